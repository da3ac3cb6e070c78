"""A group commit that rolls back leaves no trace of the deliveries it made:
the engine in process over real LMDB, a group made to fail by an operation
that raises after the others ran."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.engine.selectors import Consumer
from msgboard.engine.writer import Batch
from msgboard.errors import StoreError
from tests.sinks import Sink


def _fail(b: Batch) -> None:
    raise RuntimeError("an operation that fails after the others ran")


def _holding_two(board: Board, n: int) -> tuple[Consumer, Sink]:
    """Queue "q" with ``n`` messages (bodies b"0", b"1", ...) and a consumer
    with credit 2 holding the first two as deliveries 1 and 2."""
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(n)])
    sink = Sink()
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    assert [d.id for d in sink.wait(2)] == [1, 2]
    return c, sink


def _one_failing_group(board: Board, *ops: Callable[[], Future[Any]]) -> None:
    """Runs ``ops`` and then an operation that raises, as one group: each
    of them fails with it."""
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # what follows is one group
    futs = [op() for op in ops]
    futs.append(board._writer.submit(_fail))
    gate.set()
    for fut in futs:
        with pytest.raises(StoreError):
            fut.result(10)


def test_a_rolled_back_group_takes_back_its_deliveries_and_acks(board: Board) -> None:
    """Given a consumer holding deliveries 1 and 2, when one group acks 1
    (its credit pulling message 3), adds credit (pulling 4) and then fails,
    I expect nothing of it sent, 1 and 2 outstanding again and the next id
    3; the same ack afterwards delivers 3 and 4 under ids 3 and 4, and every
    message is acked once."""
    c, sink = _holding_two(board, 5)
    _one_failing_group(
        board, lambda: board.ack_async(c, [1], 0), lambda: board.add_credit_async(c, 1)
    )
    assert (sorted(c.outstanding), c.next_id, c.pending, len(sink.got)) == ([1, 2], 3, [], 2)
    assert board.ack(c, [1]).ids == [1]
    board.add_credit(c, 1)
    got = sink.wait(4)
    assert [(d.id, d.message.body) for d in got] == [(1, b"0"), (2, b"1"), (3, b"2"), (4, b"3")]
    assert board.ack(c, [2, 3, 4]).ids == [2, 3, 4]
    assert sink.wait(5)[4].id == 5
    assert board.ack(c, [5]).ids == [5]
    assert board.get_queue("q").unprocessed == 0


def test_a_rolled_back_ack_leaves_its_messages_held(board: Board) -> None:
    """Given a consumer holding deliveries 1 and 2, when a group acks both
    and then fails, I expect both outstanding again and their messages still
    held: a Take afterwards gets only the third message."""
    c, _ = _holding_two(board, 3)
    _one_failing_group(board, lambda: board.ack_async(c, [1, 2], 0))
    assert sorted(c.outstanding) == [1, 2]
    assert [m.body for m in board.take("q", max=10)] == [b"2"]
    assert board.ack(c, [1, 2]).ids == [1, 2]
    assert board.get_queue("q").unprocessed == 0


def test_a_rolled_back_pull_leaves_nothing_held(board: Board) -> None:
    """Given a consumer holding deliveries 1 and 2 of three messages, when a
    group adds credit (pulling the third) and then fails, I expect the third
    neither outstanding nor held: a Take afterwards gets it."""
    c, _ = _holding_two(board, 3)
    _one_failing_group(board, lambda: board.add_credit_async(c, 1))
    assert (sorted(c.outstanding), c.next_id) == ([1, 2], 3)
    assert [m.body for m in board.take("q", max=10)] == [b"2"]
    assert board.ack(c, [1, 2]).ids == [1, 2]
    assert board.get_queue("q").unprocessed == 0


def test_a_rolled_back_move_delete_purge_and_release_leave_no_trace(board: Board) -> None:
    """Given two queues, a leased message and waiting ones, when one group
    moves, deletes, purges and releases and then fails, I expect every
    message where it was, the lease still held (and ackable), and the same
    calls afterwards working."""
    board.create_queue(QueueSpec("a", max_history=10))
    board.create_queue(QueueSpec("b"))
    board.post("a", [Message(body=b"%d" % i) for i in range(6)])
    [leased] = board.take_leased("a", lease=3600)  # seq 1
    before = [(m.seq, m.section) for m in board.browse("a", limit=100).messages]
    _one_failing_group(
        board,
        lambda: board.move_messages_async("a", "b", seqs=[2, 3]),
        lambda: board.delete_messages_async("a", seqs=[4]),
        lambda: board.release_messages_async("a", [1]),
        lambda: board.purge_queue_async("a", history=True),
    )
    assert [(m.seq, m.section) for m in board.browse("a", limit=100).messages] == before
    assert board.browse("b", limit=100).messages == []
    assert [m.body for m in board.take("a", max=10)] == [b"1", b"2", b"3", b"4", b"5"]
    assert board.ack_leases("a", [leased.id]).ids == [leased.id]
