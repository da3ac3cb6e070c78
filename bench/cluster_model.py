"""The model of the cluster's protocol (tests/cluster_model.py) explored
deeper than the test suite does: breadth-first, every state once, depth
by depth, on the rules now and on the rules before issue 33.

    .venv/bin/python bench/cluster_model.py [--depth 18] [--writes 2] [--needed 1]
                                            [--no-kills] [--wipes] [--before]

Prints, as each depth is done, the states seen so far and the seconds
(wall and CPU) since the start, and the first violation found with its
events (a shortest trace), if any.
Exits 1 if the rules now break an invariant.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster_model import BEFORE, NOW, Rules, explore


def run(name: str, rules: Rules, depth: int) -> bool:
    """Explores to ``depth``, saying each depth's figures; whether nothing
    was found."""
    wall, cpu = time.monotonic(), time.process_time()

    def said(level: int, states: int) -> None:
        print(
            f"{name}: depth {level}, {states:,} states, "
            f"{time.monotonic() - wall:.1f} s ({time.process_time() - cpu:.1f} s CPU)",
            flush=True,
        )

    found = explore(rules, depth, each=said)
    for line in found.violation:
        print(f"{name}: at depth {found.depth}, {found.states:,} states: {line}")
        for event in found.trace:
            print(f"    {event}")
    return not found.violation


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=18, help="events in a sequence, at most")
    ap.add_argument("--writes", type=int, default=2, help="the client's posts")
    ap.add_argument("--needed", type=int, default=1, help="--sync-standbys")
    ap.add_argument("--no-kills", action="store_true", help="no kill -9 and restart events")
    ap.add_argument(
        "--wipes", action="store_true", help="a dead board's disk lost too (no liveness check)"
    )
    ap.add_argument("--before", action="store_true", help="the rules before issue 33 too")
    args = ap.parse_args()
    given = {"writes": args.writes, "needed": args.needed, "kills": not args.no_kills}
    if args.wipes:
        given.update(wipes=True, live=False)
    print(f"# the model of tests/cluster_model.py: three boards, {given}", flush=True)
    ok = run("now", replace(NOW, **given), args.depth)
    if args.before:
        run("before", replace(BEFORE, **given), args.depth)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
