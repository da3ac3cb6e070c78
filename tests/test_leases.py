"""The board's leases, listed for an operator (the console's Consumers and
leases page): in-process, on a real board over a real LMDB directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgboard.engine import Board
from msgboard.errors import QueueNotFound
from msgboard.message import Message, now_us
from msgboard.spec import QueueSpec


def test_leases_are_listed_with_when_they_run_out(tmp_path: Path) -> None:
    """Given messages taken with leases on two queues, I expect each listed
    with its queue, seq, address, delivery count and when it runs out,
    oldest first, for the board or one queue; an acked one is gone from
    the list, and a queue that does not exist is QueueNotFound."""
    with Board(tmp_path / "b") as board:
        for q in ("jobs", "other"):
            board.create_queue(QueueSpec(q))
            board.post(q, [Message(tuple=(q,), address="a.b")])
        before = now_us()
        [d] = board.take_leased("jobs", lease=60)
        [e] = board.take_leased("other", lease=5)
        first, second = board.list_leases()
        assert (first.id, first.queue, first.seq, first.address) == (d.id, "jobs", 1, "a.b")
        assert first.delivery_count == 0 and second.id == e.id
        assert before + 59_000_000 <= first.until <= now_us() + 60_000_000
        assert second.until < first.until
        assert board.list_leases("other") == [second]
        board.ack_leases("jobs", [d.id])
        assert board.list_leases() == [second]
        with pytest.raises(QueueNotFound):
            board.list_leases("nope")
