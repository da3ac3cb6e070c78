"""The board's leases, listed and released by an operator (the console's
Consumers and leases page), and a kick that names who kicked: in-process,
on a real board over a real LMDB directory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from msgboard.associative import Pattern, parse_template
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, NotFound
from msgboard.message import Message, now_us
from msgboard.spec import QueueSpec


def _events(board: Board, name: str) -> list[tuple[object, ...]]:
    """The ``$sys`` events called ``name`` so far (waiting until one is)."""
    deadline = time.monotonic() + 30
    while True:
        page = board.browse("$sys", limit=1000)
        found = [m.tuple for m in page.messages if m.tuple and m.tuple[0] == name]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_lease_is_listed_then_released_and_its_message_comes_back(tmp_path: Path) -> None:
    """Given a message taken with a 60 s lease, I expect it listed with its
    queue, seq and when the lease runs out; released by an operator, I
    expect it waiting again at once with its delivery count raised, the
    taker's ack refused, the lease gone from the list and a
    ``lease.released`` event naming the operator."""
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("jobs"))
        board.post("jobs", [Message(tuple=("job", 1), address="a.b")])
        before = now_us()
        [d] = board.take_leased("jobs", lease=60)
        [v] = board.list_leases()
        assert (v.id, v.queue, v.seq, v.address, v.delivery_count) == (d.id, "jobs", 1, "a.b", 0)
        assert before + 59_000_000 <= v.until <= now_us() + 60_000_000
        assert board.list_leases("jobs") == [v]
        # Leased: invisible to a take.
        assert board.take("jobs") == []

        assert board.release_lease("jobs", d.id, by="alice") == v
        assert board.list_leases() == []
        [waiting] = board.browse("jobs").messages
        assert (waiting.seq, waiting.delivery_count) == (1, 1)
        [back] = board.take("jobs", Pattern(templates=(parse_template(["job", "?int"]),)))
        assert back.seq == 1
        acked = board.ack_leases("jobs", [d.id])
        assert isinstance(acked.rejected[d.id], NotFound)
        assert ("lease.released", "jobs", 1, d.id, "alice") in _events(board, "lease.released")


def test_releasing_a_lease_that_holds_nothing_says_why(tmp_path: Path) -> None:
    """Given a lease acked already, one on another queue and one never
    given, I expect NotFound, InvalidArgument naming the other queue, and
    InvalidArgument; the message stays as it was."""
    with Board(tmp_path / "b") as board:
        for q in ("jobs", "other"):
            board.create_queue(QueueSpec(q))
            board.post(q, [Message(tuple=(q,))])
        [done] = board.take_leased("jobs", lease=60)
        board.ack_leases("jobs", [done.id])
        with pytest.raises(NotFound, match="already acked"):
            board.release_lease("jobs", done.id)
        [held] = board.take_leased("other", lease=60)
        with pytest.raises(InvalidArgument, match="is on queue 'other'"):
            board.release_lease("jobs", held.id)
        with pytest.raises(InvalidArgument, match="never given"):
            board.release_lease("jobs", held.id + 1000)
        assert [x.id for x in board.list_leases()] == [held.id]


def test_a_kick_names_who_kicked(tmp_path: Path) -> None:
    """Given a consumer kicked by bob, I expect the consumer.detached event's
    reason to say so (a kick with no name says "kicked")."""
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("jobs"))
        ended: list[BaseException | None] = []
        for _ in range(2):
            board.subscribe("jobs", deliver=lambda d: None, end=ended.append)
        first, second = board.list_consumers("jobs")
        board.kick_consumer(first.id, by="bob")
        board.kick_consumer(second.id)
        detached = _events(board, "consumer.detached")
        deadline = time.monotonic() + 30
        while len(detached) < 2 and time.monotonic() < deadline:
            detached = _events(board, "consumer.detached")
        reasons = {e[1]: e[4] for e in detached}
        assert reasons == {first.id: "kicked by bob", second.id: "kicked"}
