"""Credit given back by an ack: the messages it pulls leave before the ack's
own commit when they were durable already, and a rollback of that commit
leaves the consumer's deliveries consistent (engine in process, real LMDB).
The kill -9 guarantee with cumulative acks is in tests/test_subscribe.py."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.engine.writer import Batch
from msgboard.errors import StoreError
from msgboard.spec import Delivery


class Sink:
    """Collects deliveries, noting for each batch whether the board's durable
    write transaction was still open (its group not yet committed)."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.got: list[Delivery] = []
        self.before_commit: list[bool] = []
        self._cond = threading.Condition()

    def deliver(self, batch: list[Delivery]) -> None:
        with self._cond:
            self.got += batch
            self.before_commit += [self.board._durable._txn is not None] * len(batch)
            self._cond.notify_all()

    def end(self, why: BaseException | None) -> None:
        pass

    def wait(self, n: int) -> list[Delivery]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= n, 10), f"{len(self.got)} of {n}"
            return list(self.got)


def test_an_acks_credit_delivers_durable_messages_before_the_acks_commit(board: Board) -> None:
    """Given a consumer with credit 2 on a queue of 3 durable messages, when
    it acks its first delivery, I expect the third message delivered while
    the ack's group is still writing (not after its fsync), the ack itself
    answered once durable; a message posted later is delivered only once
    its post is durable."""
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(3)])
    sink = Sink(board)
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    first, _ = sink.wait(2)
    assert board.ack(c, [first.id]).ids == [first.id]
    got = sink.wait(3)
    assert got[2].message.body == b"2"
    assert sink.before_commit[2] is True
    board.ack(c, [d.id for d in got[1:]])
    board.post("q", [Message(body=b"late")])
    late = sink.wait(4)[3]
    assert late.message.body == b"late"
    assert sink.before_commit[3] is False


def test_a_rolled_back_group_keeps_what_it_delivered_before_its_commit(board: Board) -> None:
    """Given a consumer whose ack pulled a message that left before the
    group's commit, when that group rolls back, I expect the ack failed (its
    delivery still outstanding and ackable), the early delivery outstanding
    under the id the consumer got, nothing delivered twice, and the queue
    empty once both are acked."""
    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(body=b"%d" % i) for i in range(3)])
    sink = Sink(board)
    c, _ = board.subscribe("q", deliver=sink.deliver, end=sink.end, credit=2)
    first, second = sink.wait(2)
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # the next ops form one group
    acked = board.ack_async(c, [first.id], 0)

    def boom() -> None:
        raise RuntimeError("a failure after the deliveries left")

    def fail(b: Batch) -> None:
        b.before(boom)  # runs after the ack's early flush, before the commit

    failed: Future[None] = board._writer.submit(fail)
    gate.set()
    with pytest.raises(StoreError):
        acked.result(10)
    with pytest.raises(StoreError):
        failed.result(10)
    third = sink.wait(3)[2]
    assert third.message.body == b"2"
    assert sink.before_commit[2] is True
    assert sorted(c.outstanding) == [first.id, second.id, third.id]
    assert board.ack(c, [first.id, second.id, third.id]).ids == [first.id, second.id, third.id]
    assert [d.message.body for d in sink.got] == [b"0", b"1", b"2"]
    assert board.get_queue("q").unprocessed == 0
