"""Kill -9 across linked boards (issue 27): real ``msgboard serve``
processes on loopback, each over its own LMDB directory
(tests/linkboards.py), wired as a site -> central MOVE through a
translator, a central -> sites COPY broadcast and a pull of the central
board's queue into a site (federation); keyed posts from concurrent
clients to every source queue; the source board, the destination board,
and both (the second while the first is down) killed at random moments
and restarted on their directories; then the checker of
tests/linkcheck.py (shown each violation in tests/test_links_checker.py):
every post answered OK arrives exactly once at each destination, in
source seq order, its body intact and its address translated.

A few cycles each, inside the per-test timeout; bench/links_jepsen.py
(scripts/links-jepsen) runs many.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.linkboards import Boards, Net
from tests.linkcheck import check
from tests.workload import History


@pytest.fixture
def boards() -> Iterator[list[Boards]]:
    made: list[Boards] = []
    yield made
    for b in made:
        b.close()


def run(net: Net, cycles: list[tuple[str, ...]], seed: int) -> list[str]:
    """The cycles under load, then the checker's verdict."""
    h = History()
    net.load(h)
    try:
        net.moving(h)
        rng = random.Random(seed)
        for victims in cycles:
            net.cycle(victims, rng, h)
    finally:
        net.unload()
    net.settle()
    print("history:", h.summary())  # shown by pytest when the test fails
    return check(h.ops(), net.flows, net.arrivals(), net.ids())


def test_two_boards_survive_kills_of_either_and_both(tmp_path: Path, boards: list[Boards]) -> None:
    """Given a site and a central board linked both ways (a MOVE up, a
    COPY down, a pull), under load, when I kill -9 the site, then the
    central board, then both, each at a random moment, I expect every
    answered post at its destination exactly once and in order."""
    b = Boards(tmp_path, ["site1", "central"])
    boards.append(b)
    net = Net(b, ["site1"])
    cycles = [("site1",), ("central",), ("site1", "central")]
    assert run(net, cycles, seed=27) == []


def test_three_boards_survive_kills_of_sources_and_destination(
    tmp_path: Path, boards: list[Boards]
) -> None:
    """Given two sites and a central board, when I kill -9 a site, the
    central board, and the other site with the central board, I expect
    the same of every flow, the broadcast reaching both sites."""
    b = Boards(tmp_path, ["site1", "site2", "central"])
    boards.append(b)
    net = Net(b, ["site1", "site2"])
    cycles = [("site2",), ("central",), ("central", "site1")]
    assert run(net, cycles, seed=2727) == []
