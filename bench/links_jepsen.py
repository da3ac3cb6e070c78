"""The long kill test across linked boards (not in the test suite): many
cycles of kill -9 under load on boards joined by links, judged at the end
by the checker of tests/linkcheck.py (shown each violation in
tests/test_links_checker.py).

    scripts/links-jepsen [--cycles 50] [--sites 2] [--seed N] [--pause 0.1] [--batch 5]
                         [--without-pull]

Boards: ``--sites`` sites and a central board (tests/linkboards.py's
``Net``): each site moves ``up`` to central's ``inbox`` through a
translator, central copies ``news`` to every site, the first site pulls
central's ``work``. Keyed posts from concurrent clients to every source
queue, each poster pausing ``--pause`` s between posts (batches of
``--batch`` for the streamed one). Each cycle picks its victims at random:
a site (a source of the MOVE, a destination of the broadcast and the
pull), the central board, or two boards, the second killed at a random
moment while the first is down; each is killed (-9) at a random moment,
started again on its directory and port, and the cycle ends once every
writer posts and every flow delivers again.

Prints one line per cycle (to standard error), then a table of victims x
cycles, and the totals: posts answered OK, tries whose answer was lost
(sent again by the workload with the same key) and posts never answered,
arrivals, and lost / duplicate / reordered / changed / stray / behind
(each a count of the checker's lines), and every line found. Exits 1 if anything was
found (the boards' directories and logs are kept then).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.linkboards import Boards, Net
from tests.linkcheck import check, counts
from tests.workload import OK, UNKNOWN, History, now

RULES = ("lost", "duplicate", "reordered", "changed", "stray", "behind")


def victims(rng: random.Random, names: list[str]) -> tuple[str, ...]:
    """One board (each as likely), or two, one after the other."""
    if rng.random() < 1 / 3:
        return tuple(rng.sample(names, 2))
    return (rng.choice(names),)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50, help="kill cycles")
    ap.add_argument("--sites", type=int, default=2, help="site boards beside the central one")
    ap.add_argument("--seed", type=int, default=None, help="the random seed (default: the time)")
    ap.add_argument("--pause", type=float, default=0.1, help="seconds between a poster's posts")
    ap.add_argument("--batch", type=int, default=5, help="messages per streamed batch")
    ap.add_argument("--without-pull", action="store_true", help="leave the federation pull out")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    sites = [f"site{i + 1}" for i in range(args.sites)]
    names = [*sites, "central"]
    print(
        f"# links-jepsen: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f},"
        f" {args.sites} sites and a central board, {args.cycles} cycles, seed {seed}",
        flush=True,
    )
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="links-jepsen-"))
    boards = Boards(tmp, names)
    h = History()
    done: Counter[str] = Counter()
    started = now()
    try:
        net = Net(boards, sites, pull=not args.without_pull)
        net.load(h, pause=args.pause, batch=args.batch)
        try:
            net.moving(h)
            for n in range(args.cycles):
                v = victims(rng, names)
                t0 = now()
                net.cycle(v, rng, h)
                done[" then ".join(v) if len(v) > 1 else v[0]] += 1
                print(
                    f"  cycle {n + 1}/{args.cycles}: killed {', '.join(v)};"
                    f" moving again after {now() - t0:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            net.unload()
        late = net.settle(300)
        arrived = net.arrivals()
        found = [*check(h.ops(), net.flows, arrived, net.ids()), *late, *net.quiet()]
    finally:
        boards.close()
    ops = h.ops()
    answered = {o.key for o in ops if o.kind == "post" and o.outcome == OK}
    lost_answers = [o for o in ops if o.kind == "post" and o.outcome == UNKNOWN]
    never = {o.key for o in lost_answers} - answered
    print("| victims | cycles |\n| --- | --- |")
    for v, c in sorted(done.items()):
        print(f"| {v} | {c} |")
    n = counts(found)
    print()
    print(
        f"{sum(done.values())} cycles in {now() - started:.0f} s; posts answered OK"
        f" {len(answered)}, tries whose answer was lost {len(lost_answers)} (posts never"
        f" answered OK {len(never)}), arrivals {len(arrived)} over {len(net.flows)} flows; "
        + ", ".join(f"{rule} {n.get(rule, 0)}" for rule in RULES)
    )
    for line in found:
        print(line)
    if found:
        print(f"the boards' directories and logs are kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
