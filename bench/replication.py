"""What replication costs: rows 1, 2, 3 and 5 of the side-by-side benchmark
(bench/compare.py, the code of each side in bench/peers/) on a single
server and on a three-server cluster of each system, alternating in one
run, 100-byte durable messages:

- ``msgboard``: a single board, no replication (no log written);
- ``msgboard-3``: a primary and two standbys (``--sync-standbys 1``: each
  answer waits for the primary's fsync and one standby's), static roles
  (``--replication-token``, ``--standby-of``), on this machine;
- ``rabbitmq-quorum``: one RabbitMQ node, quorum queues (one member);
- ``rabbitmq-3``: three RabbitMQ nodes joined in a cluster on loopback,
  quorum queues (a member on each node; a confirm waits for a majority's
  fsync), clients on the node holding the queue's leader;
- ``rabbitmq`` (classic durable queues on the single node, as
  bench/compare.py runs them), ``msgboard-logged`` (a primary writing its
  log, no standby, ``--allow-async``) and ``msgboard-standby`` (a primary
  and one sync standby): with ``--systems``.

    .venv/bin/python bench/replication.py [--messages 10000] [--unary 1000]
        [--fanout 5000] [--rounds 3] [--systems SYSTEM ...] [--only ROW ...]

Each round runs every row on each system in turn (a fresh queue each
time; the servers run for the whole run). Prints the median (min-max) of
each row per system and each cluster's ratio to its own single server, and
writes every run to bench/results/replication-<time>.json. RabbitMQ needs
Debian's rabbitmq-server and pika in .venv (scripts/bench-compare installs
both). Every process started is stopped at the end, on failure and on
SIGTERM or Ctrl-C too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import board, servers

#: Each system: how it is started (the servers' keyword arguments), its
#: queue arguments (RabbitMQ) and the single server a cluster is divided by.
SYSTEMS: dict[str, dict[str, Any]] = {
    "msgboard": {"board": {}},
    "msgboard-logged": {"board": {"log": True}, "base": "msgboard"},
    "msgboard-standby": {"board": {"standbys": 1}, "base": "msgboard"},
    "msgboard-3": {"board": {"standbys": 2, "sync": 1}, "base": "msgboard"},
    "rabbitmq": {"rabbit": 1, "quorum": False},
    "rabbitmq-quorum": {"rabbit": 1, "quorum": True},
    "rabbitmq-3": {"rabbit": 3, "quorum": True, "base": "rabbitmq-quorum"},
}
DEFAULT = ["msgboard", "msgboard-3", "rabbitmq-quorum", "rabbitmq-3"]
#: Rows of bench/compare.py: the workload function of each, its count.
ROWS = {
    "publish_one": ("1. publish one at a time, each confirmed durable", "unary"),
    "publish_batch": ("2. publish pipelined, confirmed durable", "messages"),
    "consume": ("3. consume a full queue, credit/prefetch 100, ack each", "messages"),
    "fanout": ("5. fan-out, 1 publisher -> 10 subscribers, deliveries/s", "fanout"),
}


def start(systems: list[str], tmp: Path) -> dict[str, Any]:
    """Starts each system's servers (one RabbitMQ node serves both its
    classic and its quorum queues); the address or AMQP port by system."""
    targets: dict[str, Any] = {}
    nodes: dict[int, Any] = {}
    for s in systems:
        print(f"starting {s} ...", file=sys.stderr)
        how = SYSTEMS[s]
        if "board" in how:
            targets[s] = servers.Board(tmp, s, **how["board"]).address
            continue
        size = how["rabbit"]
        if size not in nodes:
            nodes[size] = servers.Rabbit(tmp) if size == 1 else servers.RabbitCluster(tmp, size)
        targets[s] = nodes[size].port
    return targets


def call(system: str, target: Any, row: str, args: argparse.Namespace) -> Callable[[str], Any]:
    """The function running ``row`` on ``system`` with a fresh queue name."""
    n = getattr(args, ROWS[row][1])
    extra: dict[str, Any] = {}
    if "rabbit" in SYSTEMS[system]:
        from peers import rabbit  # pika: only when RabbitMQ runs

        module: Any = rabbit
        extra["arguments"] = rabbit.QUORUM if SYSTEMS[system]["quorum"] else None
    else:
        module = board
    fn = getattr(module, row)
    return lambda q: fn(target, q, n, **extra)


def run(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Every round of every row on every system; a run that fails is
    recorded with its error (and printed), the others go on."""
    targets = start(args.systems, tmp)
    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for row in args.only:
            for s in args.systems:
                one: dict[str, Any] = {"round": rnd, "row": row, "system": s}
                t = time.perf_counter()
                try:
                    one["figures"] = call(s, targets[s], row, args)(f"{row}-{rnd}-{s}")
                except Exception as e:
                    one["error"] = repr(e)
                    traceback.print_exc()
                one["wall_seconds"] = time.perf_counter() - t
                runs.append(one)
                rate = one.get("figures", {}).get("msgs_per_s")
                shown = f"{rate:,.0f} msgs/s" if rate else one.get("error")
                print(
                    f"round {rnd + 1}/{args.rounds} {row:<14} {s:<16} {shown} "
                    f"({one['wall_seconds']:.1f} s)",
                    file=sys.stderr,
                )
    return runs


def paired(runs: list[dict[str, Any]], row: str, system: str, base: str) -> list[float]:
    """``system``'s figure over ``base``'s in each round where both ran
    ``row`` (back to back: a drift of the machine's load between rounds
    cancels out)."""
    by: dict[tuple[str, int], float] = {
        (r["system"], r["round"]): r["figures"]["msgs_per_s"]
        for r in runs
        if r["row"] == row and "figures" in r
    }
    return [
        v / by[(base, rnd)]
        for (s, rnd), v in sorted(by.items())
        if s == system and (base, rnd) in by
    ]


def table(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Prints each row's median (min-max) per system, with each cluster's
    ratio to its single server: the ratio of the medians, and the median
    (min-max) of the rounds' ratios; returns the same as data."""
    out: dict[str, Any] = {}
    for row in args.only:
        label, count = ROWS[row]
        print(f"\n{label} ({getattr(args, count):,})  [msgs/s]")
        cells: dict[str, Any] = {}
        for s in args.systems:
            mine = [r for r in runs if r["row"] == row and r["system"] == s]
            vals = [r["figures"]["msgs_per_s"] for r in mine if "figures" in r]
            failed = len(mine) - len(vals)
            if not vals:
                cells[s] = {"failed": failed}
                print(f"  {s:<16} failed")
                continue
            med = statistics.median(vals)
            cell = {"median": med, "min": min(vals), "max": max(vals), "failed": failed}
            base = SYSTEMS[s].get("base")
            ratio = ""
            if base in cells and "median" in cells[base]:
                cell["ratio"] = med / cells[base]["median"]
                ratio = f"x{cell['ratio']:.2f} of {base}"
                rounds = paired(runs, row, s, base)
                if rounds:
                    cell["round_ratios"] = rounds
                    cell["round_ratio_median"] = statistics.median(rounds)
                    ratio += (
                        f"; by round x{statistics.median(rounds):.2f} "
                        f"(x{min(rounds):.2f}-x{max(rounds):.2f})"
                    )
            cells[s] = cell
            note = f"  ({failed} failed)" if failed else ""
            print(f"  {s:<16} {med:>10,.0f} ({min(vals):,.0f}-{max(vals):,.0f})  {ratio}{note}")
        out[row] = cells
    return out


def _on_signal(signum: int, _frame: object) -> None:
    """SIGTERM, SIGHUP: stop as Ctrl-C does (the servers are stopped)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=10_000, help="N of rows 2 and 3")
    p.add_argument("--unary", type=int, default=1_000, help="N of row 1")
    p.add_argument("--fanout", type=int, default=5_000, help="messages published in row 5")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=DEFAULT)
    p.add_argument("--only", nargs="+", choices=list(ROWS), default=list(ROWS), metavar="ROW")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    args.systems = list(dict.fromkeys(args.systems))
    # A cluster's ratio needs its single server in the same run.
    for s in list(args.systems):
        base = SYSTEMS[s].get("base")
        if base and base not in args.systems:
            args.systems.insert(0, base)
    args.systems.sort(key=list(SYSTEMS).index)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    started = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-repl-") as tmp:
        try:
            runs = run(args, Path(tmp))
        finally:
            servers.stop_all()
    load = os.getloadavg()
    print(
        f"\nmedian (min-max) of {args.rounds} alternating rounds, 100-byte durable messages, "
        f"on {platform.node()} ({os.cpu_count()} cores, servers and clients sharing them; "
        f"load average {load_before[0]:.1f} at the start, {load[0]:.1f} at the end), "
        f"{time.strftime('%Y-%m-%d %H:%M')}, "
        f"{(time.time() - started) / 60:.1f} min"
    )
    figures = table(runs, args)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"replication-{time.strftime('%Y%m%dT%H%M%S')}.json"
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": sys.argv if argv is None else argv,
        "args": vars(args),
        "load_average": {"start": load_before, "end": load},
        "rows": figures,
        "runs": runs,
    }
    path.write_text(json.dumps(result, indent=2))
    print(f"\nresults: {path}")
    return result


if __name__ == "__main__":
    main()
