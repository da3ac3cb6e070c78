"""The long Jepsen-style run of replication faults (not in the test suite):
cycles of one fault at a time under the fault tests' workload
(tests/workload.py), each fault on a fresh primary and two standbys
(tests/faults.py's ``Trio``), judged at its end by the checker
(tests/jepsen.py, shown each violation in tests/test_jepsen.py).

    scripts/cluster-jepsen [--kills 20] [--cycles 3] [--load 3] [--only kill-primary ...]

Faults (static roles: ``--replication-token``, ``--standby-of``):

- ``kill-primary``: kill -9 of the primary, the most advanced standby's
  directory opened as the new primary (by this script: static roles have
  no election), the dead board back as a standby from an empty directory
  (it seeds itself); ``--kills`` times;
- ``kill-standby``: kill -9 of one standby, then back on its directory;
- ``kill-standbys``: kill -9 of both (writes stop), then both back;
- ``pause-standby``: SIGSTOP of a standby past the sync timeout, with both
  standbys required, then SIGCONT;
- ``cut-standbys``: the primary cut off from both standbys (TCP proxies
  turned black holes) past the sync timeout, then healed.

Prints a table of faults x lost / duplicates / redelivered after an ack /
FIFO / diverged (each a count of the checker's lines), and the failover
times of ``kill-primary``: from the kill to the first post answered OK
through a client that keeps trying the primary's address (with static
roles that includes this script's promotion: stopping the standbys and
starting a board on the chosen one's directory).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msgboard.client import Client
from msgboard.errors import MsgboardError
from tests.faults import Trio, pause, resume
from tests.workload import OK, History, Op, Workload, now, outcome, posted, prepare

FAULTS = ("kill-primary", "kill-standby", "kill-standbys", "pause-standby", "cut-standbys")
RULES = ("lost", "duplicate", "redelivered", "FIFO", "diverged")
#: The sync timeout of every primary here (ms): faults outlast it.
SYNC_MS = 2000


@dataclass
class Row:
    fault: str
    cycles: int = 0
    posts: int = 0
    found: Counter[str] = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)
    failovers: list[float] = field(default_factory=list)


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


def table(rows: list[Row]) -> str:
    out = [
        "| fault | cycles | posts answered | " + " | ".join(RULES) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in RULES) + " |",
    ]
    for r in rows:
        counts = " | ".join(str(r.found.get(rule, 0)) for rule in RULES)
        out.append(f"| {r.fault} | {r.cycles} | {r.posts} | {counts} |")
    times = [t for r in rows for t in r.failovers]
    if times:
        out.append("")
        out.append(
            f"failover (kill -9 of the primary to the first write answered OK), over"
            f" {len(times)} kills: p50 {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="kill-primary cycles")
    ap.add_argument("--cycles", type=int, default=3, help="cycles of each other fault")
    ap.add_argument("--load", type=float, default=3.0, help="seconds of load between faults")
    ap.add_argument("--only", nargs="*", choices=FAULTS, default=list(FAULTS))
    args = ap.parse_args()
    print(
        f"# cluster-jepsen: {platform.node()}, {os.cpu_count()} cores, load average"
        f" {os.getloadavg()[0]:.1f}, static roles, sync timeout {SYNC_MS} ms",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="cluster-jepsen-") as tmp:
        for fault in args.only:
            cycles = args.kills if fault == "kill-primary" else args.cycles
            rows.append(run(fault, cycles, args.load, Path(tmp)))
    print(table(rows))
    bad = [line for r in rows for line in r.lines]
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
