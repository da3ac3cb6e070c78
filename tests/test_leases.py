"""The board's leases, listed and released by an operator (the console's
Consumers and leases page): in-process, on a real board over a real LMDB
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgboard.associative import Pattern, parse_template
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, NotFound
from msgboard.message import Message, now_us
from msgboard.spec import QueueSpec


def test_a_lease_is_listed_then_released_and_its_message_comes_back(tmp_path: Path) -> None:
    """Given a message taken with a 60 s lease, I expect it listed with its
    queue, seq and when the lease runs out; released by an operator, I
    expect it waiting again at once with its delivery count raised, the
    taker's ack refused and the lease gone from the list."""
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

        assert board.release_lease("jobs", d.id) == v
        assert board.list_leases() == []
        [waiting] = board.browse("jobs").messages
        assert (waiting.seq, waiting.delivery_count) == (1, 1)
        [back] = board.take("jobs", Pattern(templates=(parse_template(["job", "?int"]),)))
        assert back.seq == 1
        acked = board.ack_leases("jobs", [d.id])
        assert isinstance(acked.rejected[d.id], NotFound)


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
