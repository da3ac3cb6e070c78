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

from tests.faults import wait_for
from tests.linkboards import Boards, Net
from tests.linkcheck import check
from tests.test_links import Boards as LinkedPair
from tests.workload import History


@pytest.fixture
def boards() -> Iterator[list[Boards]]:
    made: list[Boards] = []
    yield made
    for b in made:
        b.close()


def run(net: Net, cycles: list[tuple[str, ...]], seed: int) -> list[str]:
    """The cycles under load, then the checker's verdict (and what did
    not arrive in time, if anything)."""
    h = History()
    net.load(h)
    try:
        net.moving(h)
        rng = random.Random(seed)
        for victims in cycles:
            net.cycle(victims, rng, h)
    finally:
        net.unload()
    late = net.settle()
    print("history:", h.summary())  # shown by pytest when the test fails
    return [*check(h.ops(), net.flows, net.arrivals(), net.ids()), *late, *net.quiet()]


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


def test_a_selector_waits_for_its_missing_remote_queue_and_delays_no_other(
    tmp_path: Path,
) -> None:
    """Given a site whose selector crosses to a central queue not made
    yet, and another selector on the same link to a queue that exists, I
    expect the other one to forward meanwhile, and the first one's
    messages to arrive, in order, once the queue is made (its refusal,
    NOT_FOUND, once held the forwarder on the link's 'connected' for
    good, and every selector of the link with it)."""
    b = LinkedPair(tmp_path)
    try:
        b.c.create_queue("there")
        for q in ("early", "late"):
            b.s.create_queue(q)
        b.s.create_link("central", b.central.address)
        b.s.create_selector("early", to="missing", link="central")
        b.s.create_selector("late", to="there", link="central")
        for i in range(3):
            b.s.post("early", body=b"e%d" % i, key=f"e{i}")
        wait_for(lambda: b.link().last_error.startswith("NOT_FOUND"), "the refusal shown")
        b.s.post("late", body=b"l0", key="l0")
        wait_for(lambda: b.c.get_queue("there").unprocessed == 1, "the other selector forwards")
        b.c.create_queue("missing")
        wait_for(lambda: b.c.get_queue("missing").unprocessed == 3, "the waiting ones arrive")
        page = b.c.browse("missing", "oldest", limit=10)
        assert [m.body for m in page.messages] == [b"e0", b"e1", b"e2"]
        wait_for(lambda: b.link().state == "connected", "the link connected again")
    finally:
        b.close()
