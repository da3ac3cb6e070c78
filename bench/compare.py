"""Side-by-side benchmark: msgboard beside RabbitMQ and Redis Streams.

Starts a throw-away instance of each system on loopback (free ports, a
temporary data directory), runs the same workloads against each with
comparable durability, stops every process it started, prints one table and
writes a JSON file (bench/results/compare-<time>.json) with the machine's
facts, the versions and every single run.

    scripts/bench-compare [--messages 100000] [--rounds 3] [--only WORKLOAD ...]
                          [--systems SYSTEM ...] [--unary 10000] [--fanout 20000]
                          [--rate 2000] [--latency-seconds 5]

The systems and their durability: msgboard (the default board, every
acknowledged post fsync'd), RabbitMQ (durable queues, persistent messages,
publisher confirms), Redis with an append-only file fsync'd ``always`` and,
labelled weaker, ``everysec``. The workloads (100-byte bodies; the code of
each system's side is in bench/peers/, one module per system):

  publish_one         1. publish one at a time, each confirmed durable (--unary)
  publish_one_unary   1b. msgboard only: the same with one unary Post per message
  publish_batch       2. publish pipelined, confirmed durable (--messages)
  publish_one_keyed   1k. msgboard only: 1 with an idempotency key on each message
  publish_batch_keyed 2k. msgboard only: 2 with an idempotency key on each message
  consume             3. consume a full queue, prefetch/credit 100, ack each
  consume_cumulative  3b. the same with cumulative acks every 50
  latency             4. publish -> delivery p50/p99 at --rate for --latency-seconds
  fanout              5. one publisher, 10 subscribers that each get every message
  fanout_queues       5b. msgboard only: fan-out through 10 durable queues
  take_pattern        6. take the 1% matching messages out of --messages tuples

Rounds alternate: in each round every workload runs once on each system in
turn (msgboard, rabbitmq, redis, redis-everysec), so that a disturbance on
the shared machine hits them alike; each figure is the median of the rounds,
with min and max beside it, and msgboard's advantage (msgboard/peer for
rates, peer/msgboard for latencies: above 1, msgboard is better).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import board, rabbit, redis_streams, servers
from table import side_by_side

#: The systems, in the order each round runs them, with a short durability
#: tag for the table (the servers module has the long form).
SYSTEMS = {
    "msgboard": "fsync",
    "rabbitmq": "persistent+confirms",
    "redis": "AOF always",
    "redis-everysec": "AOF everysec WEAKER",
}

WORKLOADS = [
    "publish_one",
    "publish_one_unary",
    "publish_batch",
    "publish_one_keyed",
    "publish_batch_keyed",
    "consume",
    "consume_cumulative",
    "latency",
    "fanout",
    "fanout_queues",
    "take_pattern",
]


@dataclasses.dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    #: Which run and figure each system's cell comes from; a system absent
    #: here is n/a for the row.
    cells: dict[str, tuple[str, str]]
    #: How each system does it, for the notes under the table.
    how: dict[str, str]
    higher_is_better: bool = True


def _all(workload: str, figure: str = "msgs_per_s") -> dict[str, tuple[str, str]]:
    return {s: (workload, figure) for s in SYSTEMS}


def rows(args: argparse.Namespace) -> list[Row]:
    redis_both = {"redis": "", "redis-everysec": ""}
    n, u, f = f"{args.messages:,}", f"{args.unary:,}", f"{args.fanout:,}"
    lat_n = f"{int(args.rate * args.latency_seconds):,}"

    def how(m: str, r: str, d: str) -> dict[str, str]:
        return {"msgboard": m, "rabbitmq": r} | dict.fromkeys(redis_both, d)

    return [
        Row(
            "publish_one",
            f"1. Publish one at a time, each confirmed durable ({u})",
            "msgs/s",
            _all("publish_one"),
            how(
                "Client.publisher(): one PostStream, one message per request, one in flight",
                "BlockingConnection + confirm_delivery: basic_publish waits for the confirm",
                "XADD, one call at a time",
            ),
        ),
        Row(
            "publish_one_unary",
            f"1b. Publish one at a time as 1, msgboard with unary Posts ({u})",
            "msgs/s",
            {"msgboard": ("publish_one_unary", "msgs_per_s")}
            | {s: ("publish_one", "msgs_per_s") for s in SYSTEMS if s != "msgboard"},
            how("Client.post, one unary call per message", "the runs of 1", "the runs of 1"),
        ),
        Row(
            "publish_batch",
            f"2. Publish pipelined, confirmed durable ({n})",
            "msgs/s",
            _all("publish_batch"),
            how(
                "Client.post_many: one PostStream, batch=100 per request",
                "SelectConnection, async confirms, <= 1,000 unconfirmed",
                "pipeline(transaction=False), 100 XADD per round trip",
            ),
        ),
        Row(
            "publish_one_keyed",
            f"1k. Publish one at a time as 1, msgboard with a key on each message ({u})",
            "msgs/s",
            {"msgboard": ("publish_one_keyed", "msgs_per_s")}
            | {s: ("publish_one", "msgs_per_s") for s in SYSTEMS if s != "msgboard"},
            how("as 1, pub.post(..., key=...)", "the runs of 1", "the runs of 1"),
        ),
        Row(
            "publish_batch_keyed",
            f"2k. Publish pipelined as 2, msgboard with a key on each message ({n})",
            "msgs/s",
            {"msgboard": ("publish_batch_keyed", "msgs_per_s")}
            | {s: ("publish_batch", "msgs_per_s") for s in SYSTEMS if s != "msgboard"},
            how("as 2, Message(key=...)", "the runs of 2", "the runs of 2"),
        ),
        Row(
            "consume",
            f"3. Consume a full queue, prefetch/credit 100, ack each ({n})",
            "msgs/s",
            _all("consume"),
            how(
                "subscribe(credit=100), sub.ack(d) per delivery; ends when all acks applied",
                "basic_qos(100) + basic_consume, basic_ack per message",
                "XREADGROUP COUNT 100, XACK of those ids pipelined with the next read",
            ),
        ),
        Row(
            "consume_cumulative",
            f"3b. Consume, as 3, cumulative acks every 50 ({n})",
            "msgs/s",
            _all("consume_cumulative"),
            how(
                "as 3, sub.ack(up_to=d) every 50 deliveries",
                "as 3, basic_ack(multiple=True) every 50",
                "no cumulative ack in Redis: the same method as 3, run again",
            ),
        ),
        Row(
            "latency_p50",
            f"4. Publish -> delivery latency p50 at {args.rate:,.0f}/s ({lat_n})",
            "ms",
            _all("latency", "p50_ms"),
            how(
                "paced publisher(), due ones per request; MOVE subscriber, credit 100, ack /50",
                "paced SelectConnection, async confirms; prefetch 100, ack multiple/50",
                "paced pipeline of the due XADDs; XREADGROUP BLOCK COUNT 100, XACK per batch",
            ),
            higher_is_better=False,
        ),
        Row(
            "latency_p99",
            f"4. Publish -> delivery latency p99 at {args.rate:,.0f}/s ({lat_n})",
            "ms",
            _all("latency", "p99_ms"),
            {},
            higher_is_better=False,
        ),
        Row(
            "latency_rate",
            f"4. (the rate the publisher achieved; target {args.rate:,.0f}/s)",
            "msgs/s",
            _all("latency", "achieved_rate"),
            {},
        ),
        Row(
            "fanout",
            f"5. Fan-out, 1 publisher -> 10 subscribers, deliveries/s ({f} published)",
            "msgs/s",
            _all("fanout"),
            how(
                f"10 COPY subscriptions, credit {f} (less drops copies), ack up_to/50",
                "fanout exchange -> 10 durable queues, prefetch 100, ack multiple/50",
                "1 stream, 10 groups, XREADGROUP BLOCK COUNT 100 + XACK per batch",
            ),
        ),
        Row(
            "fanout_queues",
            f"5b. Fan-out as 5, msgboard into 10 durable queues ({f} published)",
            "msgs/s",
            {"msgboard": ("fanout_queues", "msgs_per_s")}
            | {s: ("fanout", "msgs_per_s") for s in SYSTEMS if s != "msgboard"},
            how(
                "10 COPY selectors into 10 durable queues, MOVE subscribers, credit 100",
                "the runs of 5",
                "the runs of 5",
            ),
        ),
        Row(
            "take_pattern_1",
            f"6. Take the 1% that match from {n} tuples, one per call",
            "msgs/s",
            _all("take_pattern", "takes_per_s"),
            how(
                'take(q, ("job", int, "hot")) per message (an indexed template)',
                "no take by pattern: drain all (prefetch 0), ack matches, nack+requeue rest",
                "no take by pattern: XRANGE scan 1,000 per call, filter, XDEL matches",
            ),
        ),
        Row(
            "take_pattern_100",
            f"6b. Take the 1% that match from {n} tuples, max=100 per call",
            "msgs/s",
            {"msgboard": ("take_pattern", "takes_100_per_s")}
            | {s: ("take_pattern", "takes_per_s") for s in SYSTEMS if s != "msgboard"},
            how(
                'take(q, ("job", int, "warm"), max=100) (another 1% of the board)',
                "the scans of 6",
                "the scans of 6",
            ),
        ),
    ]


def workload_call(
    system: str, target: Any, workload: str, args: argparse.Namespace
) -> Callable[[str], dict[str, float]] | None:
    """The function running ``workload`` on ``system`` with a queue name, or
    None where the system has no such run."""
    module: Any = {
        "msgboard": board,
        "rabbitmq": rabbit,
        "redis": redis_streams,
        "redis-everysec": redis_streams,
    }[system]
    fn = getattr(module, workload, None)
    if fn is None:
        return None
    if workload.startswith("publish_one"):
        return lambda q: fn(target, q, args.unary)
    if workload == "latency":
        return lambda q: fn(target, q, int(args.rate * args.latency_seconds), args.rate)
    if workload.startswith("fanout"):
        return lambda q: fn(target, q, args.fanout, args.subscribers)
    return lambda q: fn(target, q, args.messages)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _dpkg(package: str) -> str:
    r = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
    )
    return r.stdout.strip() or "not installed"


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    return {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "msgboard_commit": commit,
        "versions": {
            "rabbitmq-server": _dpkg("rabbitmq-server"),
            "erlang": _dpkg("erlang-base"),
            "redis-server": _dpkg("redis-server"),
            "pika": _version("pika"),
            "redis-py": _version("redis"),
            "grpcio": _version("grpcio"),
            "lmdb": _version("lmdb"),
        },
    }


#: Set when a signal asks the run to stop.
_stop = threading.Event()
#: The signal that did.
_stopping: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    """SIGTERM, SIGHUP: stop, as Ctrl-C (KeyboardInterrupt) does."""
    raise SystemExit(128 + signum)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000, help="N for rows 2, 3 and 6")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        default=WORKLOADS,
        metavar="WORKLOAD",
        help=f"run only these workloads: {', '.join(WORKLOADS)}",
    )
    p.add_argument(
        "--systems",
        nargs="+",
        choices=list(SYSTEMS),
        default=list(SYSTEMS),
        metavar="SYSTEM",
        help=f"run only these systems: {', '.join(SYSTEMS)}",
    )
    p.add_argument(
        "--unary", type=int, help="messages for row 1 (default: 10,000 or --messages if fewer)"
    )
    p.add_argument(
        "--fanout",
        type=int,
        help="messages published in row 5 (default: 20,000 or --messages if fewer)",
    )
    p.add_argument("--subscribers", type=int, default=10)
    p.add_argument("--rate", type=float, default=2_000.0, help="msgs/s for row 4")
    p.add_argument("--latency-seconds", type=float, default=5.0)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    if args.unary is None:
        args.unary = min(10_000, args.messages)
    if args.fanout is None:
        args.fanout = min(20_000, args.messages)
    workloads = [w for w in WORKLOADS if w in args.only]
    systems = [s for s in SYSTEMS if s in args.systems]

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    facts = machine()
    started = time.time()
    runs: list[dict[str, Any]] = []
    durability: dict[str, str] = {}
    failure: list[BaseException] = []

    def work(tmp: Path) -> None:
        # In a thread of its own, so that a signal only ever interrupts the
        # main thread's wait below, never a client library mid-call (an
        # interrupt inside gRPC's wait can wedge the call for good).
        try:
            targets = start(systems, tmp, durability)
            for rnd in range(args.rounds):
                for w in workloads:
                    for s in systems:
                        call = workload_call(s, targets[s], w, args)
                        if call is not None and not _stop.is_set():
                            runs.append(run_once(call, rnd, w, s, args.rounds))
        except BaseException as e:
            if not _stop.is_set():
                failure.append(e)

    with tempfile.TemporaryDirectory(prefix="msgboard-compare-") as tmp:
        worker = threading.Thread(target=work, args=(Path(tmp),), daemon=True)
        try:
            worker.start()
            while worker.is_alive():
                worker.join(0.5)
        except (KeyboardInterrupt, SystemExit) as e:
            code = e.code if isinstance(e, SystemExit) else None
            _stopping.append(code if isinstance(code, int) else 130)
            _stop.set()
            print("\ninterrupted: stopping the servers", file=sys.stderr)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            _stop.set()
            # Stopping the servers ends whatever run is under way (its calls
            # fail); then whatever the worker started late goes too.
            servers.stop_all()
            worker.join(30)
            servers.stop_all()
    if failure:
        raise failure[0]
    elapsed = time.time() - started
    if not runs:
        sys.exit(_stopping[0] if _stopping else 1)

    print(
        f"\n{len(systems)} systems, 100-byte messages, median of {args.rounds} alternating "
        f"rounds on {facts['host']} ({facts['cpu_count']} cores, shared by servers and "
        f"clients), {time.strftime('%Y-%m-%d')}, {elapsed / 60:.1f} min\n"
    )
    for s in systems:
        print(f"  {s:<15} {durability.get(s, '')}")
    print()
    table = side_by_side(runs, rows(args), systems, SYSTEMS)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"compare-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": sys.argv,
                "args": vars(args),
                "machine": facts,
                "durability": durability,
                "elapsed_seconds": elapsed,
                "interrupted": bool(_stopping),
                "rows": table,
                "runs": runs,
            },
            indent=2,
        )
    )
    print(f"\nresults: {path}")
    if _stopping:
        print("(interrupted: the table has the runs done so far)")
        sys.exit(_stopping[0])


def start(systems: list[str], tmp: Path, durability: dict[str, str]) -> dict[str, Any]:
    """Starts each system's server; its address or port by system."""
    targets: dict[str, Any] = {}
    for s in systems:
        if _stop.is_set():
            raise SystemExit("stopped")
        print(f"starting {s} ...", file=sys.stderr)
        if s == "msgboard":
            b = servers.Board(tmp)
            targets[s], durability[s] = b.address, b.durability
        elif s == "rabbitmq":
            r = servers.Rabbit(tmp)
            targets[s], durability[s] = r.port, r.durability
        else:
            d = servers.Redis(tmp, "always" if s == "redis" else "everysec")
            targets[s], durability[s] = d.port, d.durability
    return targets


def run_once(
    call: Callable[[str], dict[str, float]], rnd: int, w: str, s: str, rounds: int
) -> dict[str, Any]:
    """One workload on one system, on a fresh queue; a failure is recorded
    (and printed), not raised, unless the run is being stopped."""
    run: dict[str, Any] = {"round": rnd, "workload": w, "system": s}
    t = time.perf_counter()
    try:
        run["figures"] = call(f"{w}-{rnd}-{time.monotonic_ns()}")
    except Exception as e:
        if _stop.is_set():  # the servers were stopped under it
            raise
        run["error"] = repr(e)
        traceback.print_exc()
    run["wall_seconds"] = time.perf_counter() - t
    shown = run.get("figures") or {"error": run.get("error")}
    brief = {k: round(v, 3) for k, v in shown.items() if k != "error"}
    print(
        f"round {rnd + 1}/{rounds} {w:<18} {s:<15} {brief or shown} ({run['wall_seconds']:.1f} s)",
        file=sys.stderr,
    )
    return run


if __name__ == "__main__":
    main()
