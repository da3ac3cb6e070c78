"""A group commit that rolls back leaves no trace of the deliveries it made:
the engine in process over real LMDB, a group made to fail by an operation
that raises after the others ran."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.engine.writer import Batch
from msgboard.errors import StoreError
from tests.test_routing import Sink


def _fail(b: Batch) -> None:
    raise RuntimeError("an operation that fails after the others ran")


def test_a_rolled_back_group_takes_back_its_deliveries_and_acks(board: Board) -> None:
    """Given a consumer holding deliveries 1 and 2, when one group acks 1
    (its credit pulling message 3), adds credit (pulling 4) and then fails,
    I expect nothing of it sent, 1 and 2 outstanding again and the next id
    3; the same ack afterwards delivers 3 and 4 under ids 3 and 4, and every
    message is acked once."""
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(5)])
    sink = Sink()
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    assert [d.id for d in sink.wait(2)] == [1, 2]
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # what follows is one group
    acked = board.ack_async(c, [1], 0)
    credit = board.add_credit_async(c, 1)
    failed: Future[None] = board._writer.submit(_fail)
    gate.set()
    for fut in (acked, credit, failed):
        with pytest.raises(StoreError):
            fut.result(10)
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
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(3)])
    sink = Sink()
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    assert [d.id for d in sink.wait(2)] == [1, 2]
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # what follows is one group
    acked = board.ack_async(c, [1, 2], 0)
    failed: Future[None] = board._writer.submit(_fail)
    gate.set()
    for fut in (acked, failed):
        with pytest.raises(StoreError):
            fut.result(10)
    assert sorted(c.outstanding) == [1, 2]
    assert [m.body for m in board.take("q", max=10)] == [b"2"]
    assert board.ack(c, [1, 2]).ids == [1, 2]
    assert board.get_queue("q").unprocessed == 0


def test_a_rolled_back_pull_leaves_nothing_held(board: Board) -> None:
    """Given a consumer holding deliveries 1 and 2 of three messages, when a
    group adds credit (pulling the third) and then fails, I expect the third
    neither outstanding nor held: a Take afterwards gets it."""
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(3)])
    sink = Sink()
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    assert [d.id for d in sink.wait(2)] == [1, 2]
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # what follows is one group
    credit = board.add_credit_async(c, 1)
    failed: Future[None] = board._writer.submit(_fail)
    gate.set()
    for fut in (credit, failed):
        with pytest.raises(StoreError):
            fut.result(10)
    assert (sorted(c.outstanding), c.next_id) == ([1, 2], 3)
    assert [m.body for m in board.take("q", max=10)] == [b"2"]
    assert board.ack(c, [1, 2]).ids == [1, 2]
    assert board.get_queue("q").unprocessed == 0
