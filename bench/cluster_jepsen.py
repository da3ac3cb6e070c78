"""The long Jepsen-style run of replication faults (not in the test suite):
cycles of one fault at a time under the fault tests' workload
(tests/workload.py), each fault on fresh boards, judged at its end by the
checker (tests/jepsen.py, shown each violation in tests/test_jepsen.py).

    scripts/cluster-jepsen [--mode etcd|static] [--kills 20] [--cycles 3] [--load 3]
                           [--only FAULT ...] [--ttl 3] [--hogs 0] [--minutes 0] [--keep]

``--mode etcd`` (the default): three ``msgboard serve --cluster`` boards on
three etcd members (tests/nodes.py's ``Nodes``), the workload through
clients given every board's address, which follow the primary by
themselves. Faults:

- ``kill-primary``: kill -9 of the primary, then it starts again (it
  rejoins as a standby); ``--kills`` times. The failover time is from the
  kill to the answer of a post sent through such a client;
- ``pause-primary``: SIGSTOP of the primary past its lease, SIGCONT once
  another leads; ``cut-primary``: the primary cut off from the other
  boards and etcd (TCP proxies turned black holes), its clients still
  reaching it, healed once another leads. Clients bound to the old
  primary count its answers OK after the pause (after its lease, for a
  cut): column "OK after the lease";
- ``kill-standby``: kill -9 of a standby, then it starts again;
- ``etcd-quorum``: two of the three etcd members killed (-9) past the
  lease, then back; answers OK from a TTL after the loss until etcd is
  back are counted in "OK after the lease";
- ``switchover``: ``msgboard cluster switchover`` under load; posts that
  fail after it began: column "failed posts";
- ``flap``: leadership flapping on purpose (issue 33's trace): the
  primary paused (SIGSTOP) until another board leads, then that one
  paused at once, as soon as it serves or sooner (it may lose its lease
  before it names any standby), the first resumed, the second resumed a
  lease later.

After a fault the run waits for two standbys in the in-sync set again
(column "back in sync", the longest wait, from the fault's end); a wait
over 60 s is a line of its own ("slow").

Under load: ``--hogs N`` runs N processes that spin on the CPU for the
whole run, ``--ttl S`` shortens the lease (etcd's minimum is 2), and
``--minutes M`` repeats every fault in turn (fresh boards each round)
until M minutes have passed, adding to the same rows.

``--mode static``: a primary and two standbys (``--standby-of``;
tests/faults.py's ``Trio``), promotion by this script (the most advanced
standby's directory opened as the primary, the dead board back as a
standby from an empty directory). Faults ``kill-primary``,
``kill-standby``, ``kill-standbys``, ``pause-standby`` (both required),
``cut-standbys``; its failover time includes this script's promotion.

Prints a table of faults x lost / duplicates / redelivered after an ack /
FIFO / diverged (each a count of the checker's lines) and the columns
above, then the failover times (p50 and max) and every line found. Exits 1
if anything was found.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msgboard.client import Client
from msgboard.errors import MsgboardError
from tests.cluster import EtcdCluster, wait_until
from tests.faults import Trio, pause, resume
from tests.nodes import Nodes
from tests.served import Served
from tests.workload import OK, History, Op, Workload, erred, late, now, outcome, posted, prepare

FAULTS = ("kill-primary", "kill-standby", "kill-standbys", "pause-standby", "cut-standbys")
CLUSTER_FAULTS = (
    "kill-primary",
    "pause-primary",
    "cut-primary",
    "kill-standby",
    "etcd-quorum",
    "switchover",
    "flap",
)
RULES = ("lost", "duplicate", "redelivered", "FIFO", "diverged")
#: The sync timeout of every primary here (ms): faults outlast it.
SYNC_MS = 2000
#: A cluster's lease (s), its boards' settings, how long a following
#: client looks for the primary (s), and the time a frozen board's last
#: answers may take to reach a client (s).
TTL = 3
SYNC_TIMEOUT_MS = "20000"
FAILOVER = 60.0
SLACK = 1.0


@dataclass
class Row:
    fault: str
    cycles: int = 0
    posts: int = 0
    found: Counter[str] = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)
    failovers: list[float] = field(default_factory=list)
    #: Answers OK from a board after its lease ran out (or while etcd had
    #: no quorum), and posts that failed during a switchover.
    late: int = 0
    failed: int = 0
    #: Seconds from each fault's end to two standbys in sync again.
    insync: list[float] = field(default_factory=list)


def first_ok(trio: Trio, h: History, since: float, n: int, timeout: float = 120.0) -> float:
    """Seconds from ``since`` to the first post answered OK by the trio's
    primary (its address read again at each try), recorded in ``h``."""
    deadline = since + timeout
    for i in range(1_000_000):
        if now() > deadline:
            raise RuntimeError(f"no write answered within {timeout} s of the kill")
        key = f"probe-{n}-{i}"
        t0 = now()
        try:
            with Client(trio.primary.address, timeout=5) as c:
                seq = c.post("kept", body=key.encode(), key=key)
        except MsgboardError as e:
            h.add(Op("probe", "post", key, "kept", t0, now(), outcome(e)))
            time.sleep(0.02)
            continue
        done = now()
        h.add(Op("probe", "post", key, "kept", t0, done, OK, seq))
        return done - since
    raise AssertionError("unreachable")


def _probe(trio: Trio, h: History, since: float, n: int, into: list[float]) -> None:
    into.append(first_ok(trio, h, since, n))


def loaded(h: History, seconds: float, n: int = 20) -> None:
    """Load for ``seconds``, and at least ``n`` posts answered meanwhile."""
    t = now()
    time.sleep(seconds)
    deadline = t + 120
    while len(posted(h.ops(), after=t)) < n:
        if now() > deadline:
            raise RuntimeError("the workload got no write answered in 120 s")
        time.sleep(0.1)


def run(fault: str, cycles: int, load: float, tmp: Path) -> Row:
    row = Row(fault)
    args: tuple[str, ...] = ("--sync-timeout-ms", str(SYNC_MS))
    if fault == "pause-standby":
        args = ("--sync-standbys", "2", *args)
    trio = Trio(tmp / fault, *args, proxied=fault == "cut-standbys")
    try:
        prepare(trio.primary.address)
        h = History()
        w = Workload(h, trio.primary.address, name="c0").start()
        outage = SYNC_MS / 1000 + 1
        for n in range(cycles):
            loaded(h, load)
            if fault == "kill-primary":
                old = trio.primary
                old.kill()
                killed = now()
                timing: list[float] = []
                probe = threading.Thread(
                    target=_probe, args=(trio, h, killed, n, timing), daemon=True
                )
                probe.start()
                trio.promote(trio.most_advanced())
                probe.join(150)
                w.stop()  # its clients knew only the old primary
                row.failovers.extend(timing)
                trio.rejoin(old)
                w = Workload(h, trio.primary.address, name=f"c{n + 1}").start()
            elif fault == "kill-standby":
                i = random.randrange(2)
                trio.standbys[i].kill()
                time.sleep(outage)
                trio.restart(i)
            elif fault == "kill-standbys":
                for s in trio.standbys:
                    s.kill()
                time.sleep(outage)
                for i in range(2):
                    trio.restart(i)
            elif fault == "pause-standby":
                s = trio.standbys[random.randrange(2)]
                pause(s)
                time.sleep(outage)
                resume(s)
            else:
                for p in trio.proxies:
                    p.cut()
                time.sleep(outage)
                for p in trio.proxies:
                    p.heal()
            row.cycles += 1
            print(f"  {fault} {n + 1}/{cycles}", file=sys.stderr, flush=True)
        loaded(h, load)
        w.stop()
        row.lines = trio.finish(h)
        row.posts = len(posted(h.ops()))
        for line in row.lines:
            row.found[line.split(":", 1)[0]] += 1
    finally:
        trio.close()
    return row


def run_etcd(
    fault: str, cycles: int, load: float, tmp: Path, etcd: EtcdCluster, row: Row | None = None
) -> Row:
    """``fault`` ``cycles`` times on three ``serve --cluster`` boards, under
    the workload through clients that follow the primary (added to ``row``)."""
    row = row or Row(fault)
    round_ = sum(1 for _ in tmp.glob(f"{fault}*"))
    args = ("--lease-ttl", str(TTL), "--sync-timeout-ms", SYNC_TIMEOUT_MS)
    where = tmp / (f"{fault}-{round_}" if round_ else fault)
    nodes = Nodes(where, etcd, f"jepsen-{fault}-{round_}", *args).start()
    try:
        h = History()
        nodes.primary()
        prepare(nodes.addresses)
        w = Workload(h, nodes.addresses, name="f", failover=FAILOVER).start()
        for n in range(cycles):
            try:
                cycle_etcd(fault, n, load, nodes, h, row, etcd)
            except (AssertionError, RuntimeError, MsgboardError) as e:
                row.lines.append(f"stuck: {fault} cycle {n + 1}: {e}")
                w.stop()
                return row
            row.cycles += 1
            print(f"  {fault} {n + 1}/{cycles}", file=sys.stderr, flush=True)
        loaded(h, load)
        w.stop()
        lines = finish(nodes, h)
        row.lines += lines
        row.posts += len(posted(h.ops()))
        for line in lines:
            row.found[line.split(":", 1)[0]] += 1
    finally:
        nodes.close()
    return row


def cycle_etcd(
    fault: str, n: int, load: float, nodes: Nodes, h: History, row: Row, etcd: EtcdCluster
) -> None:
    """One cycle of ``fault`` (see the module docstring)."""
    loaded(h, load)
    wait_until("two standbys in sync", lambda: len(nodes.in_sync()) == 2, 120)
    primary = nodes.primary()
    try:
        fault_etcd(fault, n, nodes, h, row, etcd, primary)
    finally:
        ended = now()
    wait_until("two standbys in sync after the fault", lambda: len(nodes.in_sync()) == 2, 300)
    row.insync.append(now() - ended)
    if row.insync[-1] > 60:
        row.lines.append(f"slow: {fault} cycle {n + 1}: {row.insync[-1]:.0f} s to two in sync")


def fault_etcd(
    fault: str, n: int, nodes: Nodes, h: History, row: Row, etcd: EtcdCluster, primary: str
) -> None:
    """The fault of one cycle (see the module docstring)."""
    if fault == "flap":
        flap(nodes, primary)
        return
    if fault == "kill-primary":
        nodes.kill(primary)
        killed = now()
        row.failovers.append(first_write(nodes.addresses, h, killed, n))
        nodes.primary(other_than=primary)
        nodes.start(primary)
    elif fault in ("pause-primary", "cut-primary"):
        bound = Workload(h, nodes.listen[primary], name=f"bound{n}").start()
        loaded(h, 1.0, n=1)
        at = now()
        (nodes.pause if fault == "pause-primary" else nodes.cut)(primary)
        nodes.primary(other_than=primary)
        (nodes.resume if fault == "pause-primary" else nodes.heal)(primary)
        erred(h, f"bound{n}", now())
        bound.stop()
        if fault == "pause-primary":
            row.late += len(late(h, f"bound{n}", at + SLACK, frozen=True))
        else:
            row.late += len(late(h, f"bound{n}", at + TTL + SLACK))
    elif fault == "kill-standby":
        standby = random.choice([b for b in nodes.names if b != primary])
        nodes.kill(standby)
        time.sleep(TTL + 1)
        nodes.start(standby)
    elif fault == "etcd-quorum":
        lost = now()
        etcd.kill(1, 2)
        try:
            wait_until("no board leads", lambda: nodes.leader() is None, 30)
            time.sleep(TTL + 1)
            back = now()
        finally:
            etcd.restart(1, 2)
            etcd.wait_quorum()
        row.late += len(late(h, "f", lost + TTL + SLACK, back))
        nodes.primary()
    else:
        started = now()
        switched = subprocess.run(
            [
                *(sys.executable, "-m", "msgboard", "cluster", "switchover"),
                *("--cluster", nodes.cluster, "--etcd", etcd.endpoints),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if switched.returncode != 0:
            said = " / ".join(switched.stderr.strip().splitlines())
            row.lines.append(f"switchover failed: {said}")
        else:
            nodes.primary(other_than=primary)
        loaded(h, 1.0)
        failed = [
            o for o in h.ops() if o.kind == "post" and o.outcome != OK and o.invoked_at > started
        ]
        row.failed += len(failed)
        row.lines.extend(
            f"failed post: {o.client} {o.key} in switchover {n + 1}: {o.outcome}, {o.error}"
            for o in failed[:3]
        )


def finish(nodes: Nodes, h: History, tries: int = 10) -> list[str]:
    """``nodes.finish``, again while leadership moves under it (the
    primary it found refuses its reads: NotPrimary, NoLease)."""
    for _ in range(tries - 1):
        try:
            return nodes.finish(h)
        except MsgboardError as e:
            print(f"  finish: {e}; again", file=sys.stderr, flush=True)
            time.sleep(1)
    return nodes.finish(h)


def flap(nodes: Nodes, primary: str) -> None:
    """Pauses ``primary`` until another board leads, pauses that one at
    once (before it writes its set, when the timing allows), resumes the
    first, and resumes the second after a lease."""
    nodes.pause(primary)
    try:
        second = wait_for(lambda: (b := nodes.leader()) not in (None, primary) and b, 90)
        nodes.pause(second)
    finally:
        nodes.resume(primary)
    try:
        time.sleep(TTL + random.random() * TTL)
    finally:
        nodes.resume(second)
    nodes.primary()


def wait_for(found: Callable[[], str | bool | None], timeout: float) -> str:
    """``found()``'s first true answer, asked every 20 ms for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer := found():
            return str(answer)
        time.sleep(0.02)
    raise RuntimeError(f"nothing found within {timeout} s")


def first_write(addresses: str, h: History, since: float, n: int, most: float = 120.0) -> float:
    """Seconds from ``since`` to a post answered OK through a client that
    follows the primary (it looks for the primary within each call, for up
    to ``FAILOVER`` s; calls are made again for up to ``most`` s)."""
    for i in itertools.count():
        key = f"probe-{n}-{i}"
        t0 = now()
        try:
            with Client(addresses, timeout=10, failover=FAILOVER) as c:
                seq = c.post("kept", body=key.encode(), key=key)
        except MsgboardError as e:
            h.add(Op("probe", "post", key, "kept", t0, now(), outcome(e)))
            if now() - since > most:
                raise RuntimeError(f"no write answered {most:.0f} s after the kill: {e}") from e
            continue
        done = now()
        h.add(Op("probe", "post", key, "kept", t0, done, OK, seq))
        return done - since
    raise AssertionError("unreachable")


def table(rows: list[Row]) -> str:
    out = [
        "| fault | cycles | posts answered | "
        + " | ".join(RULES)
        + " | OK after the lease | failed posts | back in sync, max |",
        "| --- | --- | --- | " + " | ".join("---" for _ in RULES) + " | --- | --- | --- |",
    ]
    for r in rows:
        counts = " | ".join(str(r.found.get(rule, 0)) for rule in RULES)
        back = f"{max(r.insync):.1f} s" if r.insync else "-"
        out.append(
            f"| {r.fault} | {r.cycles} | {r.posts:,} | {counts} | {r.late} | {r.failed} | {back} |"
        )
    times = [t for r in rows for t in r.failovers]
    if times:
        out.append("")
        out.append(
            f"failover (kill -9 of the primary to the first write answered OK), over"
            f" {len(times)} kills: p50 {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )
    return "\n".join(out)


def main() -> int:
    global TTL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mode",
        choices=("etcd", "static"),
        default="etcd",
        help="boards of a cluster with leadership through etcd (default), or static roles",
    )
    ap.add_argument("--kills", type=int, default=20, help="kill-primary cycles")
    ap.add_argument("--cycles", type=int, default=3, help="cycles of each other fault")
    ap.add_argument("--load", type=float, default=3.0, help="seconds of load between faults")
    ap.add_argument("--only", nargs="*", help="these faults alone")
    ap.add_argument("--ttl", type=int, default=TTL, help="the boards' lease TTL (s; etcd mode)")
    ap.add_argument("--hogs", type=int, default=0, help="processes spinning on the CPU meanwhile")
    ap.add_argument(
        "--minutes", type=float, default=0, help="repeat the faults until this long has passed"
    )
    ap.add_argument("--keep", action="store_true", help="keep the boards' directories and logs")
    args = ap.parse_args()
    TTL = args.ttl
    if args.hogs:
        Served.READY = 180.0  # a board's start (imports) under the hogs
    faults = CLUSTER_FAULTS if args.mode == "etcd" else FAULTS
    only = args.only or list(faults)
    if unknown := [f for f in only if f not in faults]:
        ap.error(f"--only: no fault {unknown} in {args.mode} mode (faults: {', '.join(faults)})")
    what = (
        f"three serve --cluster boards, three etcd members, lease TTL {TTL} s"
        if args.mode == "etcd"
        else f"static roles, sync timeout {SYNC_MS} ms"
    )
    what += f", {args.hogs} CPU hogs" if args.hogs else ""
    print(
        f"# cluster-jepsen: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {what}",
        flush=True,
    )
    rows: dict[str, Row] = {}
    tmp = Path(tempfile.mkdtemp(prefix="cluster-jepsen-"))
    started = time.monotonic()
    with ExitStack() as stack:
        for _ in range(args.hogs):
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            stack.callback(hog.wait)
            stack.callback(hog.kill)
        etcd = None
        if args.mode == "etcd":
            (tmp / "etcd").mkdir()
            etcd = EtcdCluster(tmp / "etcd").start()
            stack.callback(etcd.stop)
        rounds = 0
        while rounds == 0 or time.monotonic() - started < args.minutes * 60:
            rounds += 1
            for fault in only:
                cycles = args.kills if fault == "kill-primary" else args.cycles
                row = rows.setdefault(fault, Row(fault))
                try:
                    if etcd is not None:
                        run_etcd(fault, cycles, args.load, tmp, etcd, row)
                    else:
                        rows[fault] = run(fault, cycles, args.load, tmp)
                except Exception as e:  # the harness's own failure: said, and on
                    row.lines.append(f"harness: {fault}: {e!r}")
                if args.minutes and time.monotonic() - started > args.minutes * 60:
                    break
            print(f"  round {rounds} done, {(time.monotonic() - started) / 60:.1f} min",
                  file=sys.stderr, flush=True)  # fmt: skip
            print(table(list(rows.values())), file=sys.stderr, flush=True)
    print(f"# {rounds} round(s), {(time.monotonic() - started) / 60:.1f} min, load average "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print(table(list(rows.values())))
    bad = [line for r in rows.values() for line in r.lines]
    for line in bad:
        print(line)
    if bad or args.keep:
        print(f"the boards' directories and logs are kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad or any(r.late or r.failed for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
