"""Selectors, routing, credit, subscriptions and leases, on the embedded
engine over a real LMDB directory: one test per rule of DESIGN.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from msgboard import Message, QueueSpec, Section
from msgboard.associative import AddressPattern, Pattern, template
from msgboard.engine import Board, expiry
from msgboard.engine.selectors import Consumer
from msgboard.errors import FailedPrecondition, InvalidArgument, NotFound, QueueNotFound
from msgboard.spec import (
    UNLIMITED,
    Delivery,
    Op,
    OverflowPolicy,
    Position,
    Role,
    SelectorSpec,
    UnmatchedPolicy,
)


class Sink:
    """A consumer's receiving end that collects deliveries."""

    def __init__(self) -> None:
        self.got: list[Delivery] = []
        self.ended: list[BaseException | None] = []
        self._cond = threading.Condition()

    def deliver(self, batch: list[Delivery]) -> None:
        with self._cond:
            self.got += batch
            self._cond.notify_all()

    def end(self, why: BaseException | None) -> None:
        with self._cond:
            self.ended.append(why)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[Delivery]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= n, timeout), (
                f"{len(self.got)} of {n} deliveries"
            )
            return list(self.got)

    def tuples(self) -> list[tuple[object, ...]]:
        return [d.message.tuple for d in self.got]


def subscribe(board: Board, queue: str, **kw: object) -> tuple[Consumer, Sink]:
    sink = Sink()
    c, _ = board.subscribe(queue, deliver=sink.deliver, end=sink.end, **kw)  # type: ignore[arg-type]
    return c, sink


def post(board: Board, queue: str, *tuples: tuple[object, ...], **kw: object) -> list[int]:
    return board.post(queue, [Message(tuple=t, **kw) for t in tuples])  # type: ignore[arg-type]


def settle(board: Board) -> None:
    """Waits until every operation submitted so far has run."""
    board.stats()


def row(board: Board, queue: str) -> object:
    [r] = board.stats(queue).queues
    return r


def nums(n: int) -> list[tuple[object, ...]]:
    return [("n", i) for i in range(n)]


# -- the seed patterns ----------------------------------------------------


def test_wolfpack_move_subscribers_share_the_work_round_robin(board: Board) -> None:
    """Given two MOVE subscribers on one queue, when ten messages arrive, I
    expect them dealt alternately, each to exactly one subscriber, in order."""
    board.create_queue(QueueSpec("work"))
    _, a = subscribe(board, "work")
    _, b = subscribe(board, "work")
    post(board, "work", *nums(10))
    a.wait(5)
    b.wait(5)
    assert a.tuples() == [("n", i) for i in range(0, 10, 2)]
    assert b.tuples() == [("n", i) for i in range(1, 10, 2)]
    assert all(d.message.delivery_count == 1 for d in a.got + b.got)


def test_parrot_every_copy_subscriber_gets_everything(board: Board) -> None:
    """Given three COPY subscribers on a queue whose unmatched messages are
    discarded, when messages arrive, I expect each subscriber to get every
    one and the queue to keep none waiting."""
    board.create_queue(QueueSpec("news", unmatched=UnmatchedPolicy.DISCARD))
    sinks = [subscribe(board, "news", op=Op.COPY)[1] for _ in range(3)]
    post(board, "news", *nums(20))
    for s in sinks:
        s.wait(20)
        assert s.tuples() == nums(20)
    assert board.get_queue("news").unprocessed == 0
    # One delivered message for every copy, not one made per subscriber.
    first = sinks[0].got
    assert all(d.message is e.message for s in sinks[1:] for d, e in zip(first, s.got, strict=True))


def test_a_terminal_selector_counts_what_it_hands_out(board: Board) -> None:
    """Given a MOVE and a COPY subscriber on a queue, when seven messages
    arrive in two posts (two groups), I expect each subscriber's selector to
    count seven delivered and none dropped."""
    board.create_queue(QueueSpec("q"))
    (mc, ms), (cc, cs) = subscribe(board, "q"), subscribe(board, "q", op=Op.COPY)
    post(board, "q", *nums(3))
    post(board, "q", *nums(4))
    ms.wait(7)
    cs.wait(7)
    views = {v.id: v for v in board.list_selectors("q")}
    for c in (mc, cc):
        v = views[c.selector.id]
        assert (v.delivered, v.dropped) == (7, 0)


def test_housecat_address_eq_selectors_route_by_address(board: Board) -> None:
    """Given EQ address selectors from a pets queue to cats and dogs, when I
    post cats and dogs, I expect each queue to get its own."""
    for q in ("pets", "cats", "dogs"):
        board.create_queue(QueueSpec(q))
    for animal in ("cat", "dog"):
        board.create_selector(
            SelectorSpec("pets", Pattern(AddressPattern("eq", animal)), destination=animal + "s")
        )
    for i, animal in enumerate(["cat", "dog", "cat", "bird"]):
        board.post("pets", [Message(tuple=(i,), address=animal)])
    assert [m.tuple for m in board.take("cats", max=10)] == [(0,), (2,)]
    assert [m.tuple for m in board.take("dogs", max=10)] == [(1,)]
    # No selector matched the bird: the unmatched policy (hold) keeps it.
    assert [m.address for m in board.read("pets", max=10)] == ["bird"]


# -- routing rules ----------------------------------------------------------


def test_copies_first_then_delete_wins_over_move(board: Board) -> None:
    """Rule 2-3: a COPY gets its copy even when a DELETE drops the message,
    and the MOVE does not get it."""
    for q in ("in", "audit", "work"):
        board.create_queue(QueueSpec(q))
    board.create_selector(SelectorSpec("in", op=Op.COPY, destination="audit"))
    board.create_selector(SelectorSpec("in", destination="work"))
    board.create_selector(SelectorSpec("in", tpl("spam", int), op=Op.DELETE))
    post(board, "in", ("spam", 1), ("ham", 2))
    assert [m.tuple for m in board.read("audit", max=10)] == [("spam", 1), ("ham", 2)]
    assert [m.tuple for m in board.read("work", max=10)] == [("ham", 2)]
    assert board.get_queue("in").unprocessed == 0


def tpl(*fields: object) -> Pattern:
    return Pattern(templates=(template(*fields),))


def test_moves_without_credit_wait_and_deliver_in_fifo_order(board: Board) -> None:
    """Rule 4 and credit: a consumer with credit 2 holds at most two unacked
    messages; the rest wait and come, oldest first, as it acks."""
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q", credit=2)
    post(board, "q", *nums(5))
    sink.wait(2)
    settle(board)
    assert len(sink.got) == 2
    r = row(board, "q")
    assert (r.outstanding, r.ready, r.consumers) == (2, 3, 1)  # type: ignore[attr-defined]
    board.ack(c, [sink.got[0].id])
    sink.wait(3)
    board.ack(c, [], up_to=sink.got[2].id)
    sink.wait(5)
    assert sink.tuples() == nums(5)
    board.ack(c, [d.id for d in sink.got[3:]])
    assert board.get_queue("q").unprocessed == 0


def test_messages_waiting_before_a_subscriber_arrives_are_delivered(board: Board) -> None:
    """Rule 5: with no selectors, messages wait; a MOVE subscriber that comes
    later gets them, oldest first."""
    board.create_queue(QueueSpec("q"))
    post(board, "q", *nums(3))
    _, sink = subscribe(board, "q")
    sink.wait(3)
    assert sink.tuples() == nums(3)


def test_default_selector_and_unmatched_policies(board: Board) -> None:
    """Rule 5: messages no selector matches go to the default selector; with
    none, the unmatched policy holds, discards or dead-letters them."""
    for q in ("in", "a", "other"):
        board.create_queue(QueueSpec(q))
    board.create_selector(SelectorSpec("in", tpl("a"), destination="a"))
    board.create_selector(SelectorSpec("in", destination="other", role=Role.DEFAULT))
    post(board, "in", ("a",), ("b",))
    assert [m.tuple for m in board.read("a")] == [("a",)]
    assert [m.tuple for m in board.read("other")] == [("b",)]

    board.create_queue(QueueSpec("dlq"))
    board.create_queue(
        QueueSpec("strict", dead_letter="dlq", unmatched=UnmatchedPolicy.DEAD_LETTER)
    )
    board.create_queue(QueueSpec("loose", unmatched=UnmatchedPolicy.DISCARD, max_history=10))
    for q in ("strict", "loose"):
        board.create_selector(SelectorSpec(q, tpl("a"), destination="a"))
        post(board, q, ("z",))
    [dead] = board.read("dlq")
    assert dead.tuple == ("z",)
    assert dead.headers["x-dead-letter-reason"] == "unmatched"
    assert dead.headers["x-dead-letter-queue"] == "strict"
    assert board.get_queue("strict").unprocessed == 0
    loose = board.get_queue("loose")
    assert (loose.unprocessed, loose.history) == (0, 1)


def test_overflow_selector_and_policies(board: Board) -> None:
    """Rule 6: a post that finds the queue full goes to the overflow
    selector; without one, drop-new drops it and dead-letter sends it on."""
    board.create_queue(QueueSpec("spill"))
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("small", max_unprocessed=2))
    board.create_selector(SelectorSpec("small", destination="spill", role=Role.OVERFLOW))
    assert post(board, "small", *nums(4)) == [1, 2, 0, 0]
    assert [m.tuple for m in board.read("spill", max=10)] == nums(4)[2:]
    board.create_queue(
        QueueSpec("dl", max_unprocessed=1, overflow=OverflowPolicy.DEAD_LETTER, dead_letter="dlq")
    )
    board.create_queue(QueueSpec("dn", max_unprocessed=1, overflow=OverflowPolicy.DROP_NEW))
    assert post(board, "dl", *nums(2)) == [1, 0]
    assert post(board, "dn", *nums(2)) == [1, 0]
    [dead] = board.read("dlq")
    assert (dead.tuple, dead.headers["x-dead-letter-reason"]) == (("n", 1), "overflow")
    assert row(board, "dn").overflowed == 1  # type: ignore[attr-defined]


def test_an_overflow_selector_never_pulls_what_was_stored(board: Board) -> None:
    """Given an overflow selector into a full queue, I expect a message that
    was stored (the queue had room when it came) to stay when the overflow
    queue gets room again: the selector acts on full-queue posts only."""
    board.create_queue(QueueSpec("small", max_unprocessed=1))
    board.create_queue(QueueSpec("spill", max_unprocessed=1))
    board.create_selector(SelectorSpec("small", destination="spill", role=Role.OVERFLOW))
    assert post(board, "small", *nums(2)) == [1, 0]
    assert [m.tuple for m in board.take("spill")] == [("n", 1)]
    assert [m.tuple for m in board.read("small", max=10)] == [("n", 0)]
    assert board.get_queue("spill").unprocessed == 0


def test_several_default_selectors_share_round_robin_among_those_with_room(
    board: Board,
) -> None:
    """Given two default selectors on a queue, I expect the messages no normal
    selector matches dealt between them in turn, and all of them to the
    second once the first's queue is full: rule 3 applied to rule 5."""
    for q in ("in", "a", "d1", "d2"):
        board.create_queue(QueueSpec(q))
    board.create_queue(QueueSpec("small1", max_unprocessed=1))
    board.create_selector(SelectorSpec("in", tpl("a"), destination="a"))
    for d in ("d1", "d2"):
        board.create_selector(SelectorSpec("in", destination=d, role=Role.DEFAULT))
    post(board, "in", *nums(4))
    assert [m.tuple for m in board.read("d1", max=10)] == [("n", 0), ("n", 2)]
    assert [m.tuple for m in board.read("d2", max=10)] == [("n", 1), ("n", 3)]

    board.create_queue(QueueSpec("in2"))
    board.create_selector(SelectorSpec("in2", tpl("a"), destination="a"))
    board.create_selector(SelectorSpec("in2", destination="small1", role=Role.DEFAULT))
    board.create_selector(SelectorSpec("in2", destination="d2", role=Role.DEFAULT))
    post(board, "in2", *nums(4))
    assert board.get_queue("small1").unprocessed == 1
    assert board.get_queue("d2").unprocessed == 2 + 3
    assert board.get_queue("in2").unprocessed == 0


def test_several_overflow_selectors_share_round_robin_among_those_with_room(
    board: Board,
) -> None:
    """Given two overflow selectors on a full queue, I expect the overflow
    dealt between them in turn, and all of it to the second once the
    first's queue is full."""
    board.create_queue(QueueSpec("s1"))
    board.create_queue(QueueSpec("s2"))
    board.create_queue(QueueSpec("tiny", max_unprocessed=1))
    board.create_queue(QueueSpec("full", max_unprocessed=1))
    for spill in ("s1", "s2"):
        board.create_selector(SelectorSpec("full", destination=spill, role=Role.OVERFLOW))
    assert post(board, "full", *nums(5)) == [1, 0, 0, 0, 0]
    assert [m.tuple for m in board.read("s1", max=10)] == [("n", 1), ("n", 3)]
    assert [m.tuple for m in board.read("s2", max=10)] == [("n", 2), ("n", 4)]

    board.create_queue(QueueSpec("full2", max_unprocessed=1))
    for spill in ("tiny", "s2"):
        board.create_selector(SelectorSpec("full2", destination=spill, role=Role.OVERFLOW))
    post(board, "full2", *nums(5))
    assert board.get_queue("tiny").unprocessed == 1
    assert board.get_queue("s2").unprocessed == 2 + 3


def test_a_post_says_what_became_of_each_message(board: Board) -> None:
    """Given full queues with each overflow outcome, I expect every receipt
    to say whether its message was stored, overflowed, dead-lettered or
    dropped, where the seq alone says 0 for all but the first."""
    board.create_queue(QueueSpec("spill"))
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("tiny-dlq", max_unprocessed=1))
    board.create_queue(QueueSpec("ov", max_unprocessed=1))
    board.create_selector(SelectorSpec("ov", destination="spill", role=Role.OVERFLOW))
    board.create_queue(QueueSpec("del", max_unprocessed=1))
    board.create_selector(SelectorSpec("del", op=Op.DELETE, role=Role.OVERFLOW))
    board.create_queue(
        QueueSpec("dl", max_unprocessed=1, overflow=OverflowPolicy.DEAD_LETTER, dead_letter="dlq")
    )
    board.create_queue(
        QueueSpec(
            "dl-full",
            max_unprocessed=1,
            overflow=OverflowPolicy.DEAD_LETTER,
            dead_letter="tiny-dlq",
        )
    )
    board.create_queue(QueueSpec("dn", max_unprocessed=1, overflow=OverflowPolicy.DROP_NEW))

    def fates(queue: str, n: int = 2) -> list[tuple[int, str]]:
        got = board.post_receipts(queue, [Message(tuple=("n", i)) for i in range(n)])
        return [(r.seq, r.disposition.value) for r in got]

    assert fates("ov") == [(1, "stored"), (0, "overflowed")]
    assert fates("del") == [(1, "stored"), (0, "dropped")]
    assert fates("dl") == [(1, "stored"), (0, "dead-lettered")]
    assert fates("dl-full", 3) == [(1, "stored"), (0, "dead-lettered"), (0, "dropped")]
    assert fates("dn") == [(1, "stored"), (0, "dropped")]
    assert board.get_queue("spill").unprocessed == 1
    assert board.get_queue("dlq").unprocessed == 1


def test_a_dead_letter_policy_needs_a_dead_letter_queue(board: Board) -> None:
    """Given a dead-letter overflow or unmatched policy and no dead-letter
    queue, I expect the queue refused, naming the property, rather than
    messages silently discarded; max_deliveries alone is allowed."""
    with pytest.raises(InvalidArgument, match=r"spec\.overflow: .*dead_letter"):
        board.create_queue(QueueSpec("a", max_unprocessed=1, overflow=OverflowPolicy.DEAD_LETTER))
    with pytest.raises(InvalidArgument, match=r"spec\.unmatched: .*dead_letter"):
        board.create_queue(QueueSpec("a", unmatched=UnmatchedPolicy.DEAD_LETTER))
    assert board.list_queues() == []
    board.create_queue(QueueSpec("a", max_deliveries=3))


def test_moved_messages_go_to_bounded_history(board: Board) -> None:
    """Rule 7: what a selector moves is processed into the source's history,
    oldest discarded beyond max_history."""
    board.create_queue(QueueSpec("src", max_history=3))
    board.create_queue(QueueSpec("dst"))
    board.create_selector(SelectorSpec("src", destination="dst"))
    post(board, "src", *nums(5))
    hist = board.browse("src", section=Section.HISTORY).messages
    assert [m.tuple for m in hist] == nums(5)[2:]
    assert board.get_queue("dst").unprocessed == 5


def test_expired_messages_are_dead_lettered_never_delivered(board: Board) -> None:
    """Rule 8: an expired message is never delivered, by a selector or a
    Take; it goes to the dead-letter queue."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    soon = int(time.time() * 1e6) + 100_000
    post(board, "q", ("late",), expires_at=soon)
    post(board, "q", ("past",), expires_at=1)
    time.sleep(0.15)
    assert board.take("q") == []
    _, sink = subscribe(board, "q")
    post(board, "q", ("fresh",))
    sink.wait(1)
    assert sink.tuples() == [("fresh",)]
    reasons = {m.tuple: m.headers["x-dead-letter-reason"] for m in board.read("dlq", max=10)}
    assert reasons == {("late",): "expired", ("past",): "expired"}


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Waits for ``check`` to hold (a condition, not a duration, is tested)."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "the condition never held"
        time.sleep(0.02)


def test_an_expired_message_nobody_meets_is_swept_and_counted(board: Board) -> None:
    """Rule 8, with nothing touching the queue: I expect a waiting message to
    leave for the dead-letter queue soon after its expiry (not counting as
    waiting any more), another with a later expiry to stay, and Stats to
    count it as expired (and dead-lettered)."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    now = int(time.time() * 1e6)
    post(board, "q", ("soon",), expires_at=now + 200_000)
    post(board, "q", ("later",), expires_at=now + 3600_000_000)
    post(board, "q", ("never",))
    until(lambda: board.get_queue("dlq").unprocessed == 1)
    [dead] = board.read("dlq")
    assert (dead.tuple, dead.headers["x-dead-letter-reason"]) == (("soon",), "expired")
    assert [m.tuple for m in board.read("q", max=10)] == [("later",), ("never",)]
    r = row(board, "q")
    assert (r.expired, r.dead_lettered, r.unprocessed) == (1, 1, 2)  # type: ignore[attr-defined]


def test_expired_messages_are_swept_after_a_restart_too(tmp_path: Path) -> None:
    """Given messages with an expiry waiting when the board closes, I expect
    the reopened board to sweep them without anything meeting them."""
    now = int(time.time() * 1e6)
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        board.create_queue(QueueSpec("q", dead_letter="dlq"))
        post(board, "q", *nums(3), expires_at=now + 300_000)
        post(board, "q", ("stays",))
    with Board(tmp_path / "b") as board:
        until(lambda: board.get_queue("dlq").unprocessed == 3)
        assert [m.tuple for m in board.read("q", max=10)] == [("stays",)]
        assert row(board, "q").expired == 3  # type: ignore[attr-defined]


def test_sweep_and_catch_up_go_on_past_their_budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given budgets of 10 entries per operation and 25 messages expiring
    (after a restart, so that the index is rebuilt too), I expect every one
    swept: each step goes on in the next operation."""
    monkeypatch.setattr(expiry, "SWEEP_BUDGET", 10)
    monkeypatch.setattr(expiry, "CATCH_UP_BUDGET", 10)
    now = int(time.time() * 1e6)
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        for q in ("q1", "q2"):
            board.create_queue(QueueSpec(q, dead_letter="dlq"))
        post(board, "q1", *nums(15), expires_at=now + 300_000)
        post(board, "q2", *nums(10), expires_at=now + 300_000)
    with Board(tmp_path / "b") as board:
        until(lambda: board.get_queue("dlq").unprocessed == 25)
        assert board.get_queue("q1").unprocessed == board.get_queue("q2").unprocessed == 0


def test_a_message_held_when_it_expires_is_dead_lettered_when_it_comes_back(
    board: Board,
) -> None:
    """Given a delivered message that expires before its consumer nacks it, I
    expect the sweep to leave it to its consumer and the nack to dead-letter
    it, never delivering it again."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",), expires_at=int(time.time() * 1e6) + 200_000)
    [d] = sink.wait(1)
    time.sleep(0.4)  # past its expiry while held: the sweep must not take it
    assert board.get_queue("dlq").unprocessed == 0
    board.nack(c, [d.id])
    until(lambda: board.get_queue("dlq").unprocessed == 1)
    assert len(sink.got) == 1
    assert row(board, "q").expired == 1  # type: ignore[attr-defined]


def test_bounce_sends_to_reply_to_with_address_swapped(board: Board) -> None:
    board.create_queue(QueueSpec("svc"))
    board.create_queue(QueueSpec("me"))
    board.create_selector(SelectorSpec("svc", op=Op.BOUNCE))
    board.post("svc", [Message(tuple=("ping",), address="svc.ping", reply_to="me")])
    [m] = board.take("me")
    assert (m.address, m.reply_to, m.headers["x-bounced-from"]) == ("me", "svc.ping", "svc.ping")


# -- credit through the graph ---------------------------------------------


def test_chain_through_a_limited_queue_never_overflows_nor_stalls(board: Board) -> None:
    """Q1 -> MOVE -> Q2 (max 5) -> MOVE -> consumer: Q2 never holds more than
    5, and every message reaches the consumer, in order, as it acks."""
    board.create_queue(QueueSpec("q1"))
    board.create_queue(QueueSpec("q2", max_unprocessed=5))
    board.create_selector(SelectorSpec("q1", destination="q2"))
    post(board, "q1", *nums(100))
    assert board.get_queue("q2").unprocessed == 5
    assert board.get_queue("q1").unprocessed == 95
    c, sink = subscribe(board, "q2", credit=3)
    seen = 0
    while seen < 100:
        got = sink.wait(seen + 1)
        assert board.get_queue("q2").unprocessed <= 5
        board.ack(c, [d.id for d in got[seen:]])
        seen = len(got)
    assert sink.tuples() == nums(100)
    assert board.get_queue("q1").unprocessed == 0
    assert board.get_queue("q2").unprocessed == 0


def test_a_copy_subscriber_that_falls_behind_loses_copies_not_the_queue(board: Board) -> None:
    """A COPY consumer with credit 1 that never acks gets one copy; the rest
    are dropped and counted, while a MOVE consumer still gets everything."""
    board.create_queue(QueueSpec("q"))
    _, slow = subscribe(board, "q", op=Op.COPY, credit=1)
    _, worker = subscribe(board, "q", unlimited_credit=True)
    post(board, "q", *nums(5))
    worker.wait(5)
    settle(board)
    assert len(slow.got) == 1
    assert row(board, "q").dropped == 4  # type: ignore[attr-defined]


# -- redelivery --------------------------------------------------------------


def test_nack_gives_back_after_a_backoff_with_the_count_raised(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",))
    [d] = sink.wait(1)
    board.nack(c, [d.id])
    r = row(board, "q")
    # Held back, not redelivered at once.
    assert (r.outstanding, r.ready, len(sink.got)) == (1, 0, 1)  # type: ignore[attr-defined]
    again = sink.wait(2)[1]
    assert again.message.seq == d.message.seq
    assert again.message.delivery_count == 2


def test_past_max_deliveries_a_message_is_dead_lettered(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq", max_deliveries=2))
    c, sink = subscribe(board, "q")
    post(board, "q", ("poison",))
    board.nack(c, [sink.wait(1)[0].id])
    board.nack(c, [sink.wait(2)[1].id])
    [dead] = board.read("dlq", timeout=5)
    assert dead.headers["x-dead-letter-reason"] == "max-deliveries"
    assert board.get_queue("q").unprocessed == 0


def test_reject_dead_letters_at_once(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("bad",))
    board.nack(c, [sink.wait(1)[0].id], reject=True)
    [dead] = board.read("dlq")
    assert dead.headers["x-dead-letter-reason"] == "rejected"


def test_a_consumer_leaving_gives_back_its_messages_in_seq_order(board: Board) -> None:
    """Outstanding messages of a consumer that goes return in seq order, with
    their delivery count raised, to the next consumer."""
    board.create_queue(QueueSpec("q"))
    c, first = subscribe(board, "q", credit=3)
    post(board, "q", *nums(5))
    first.wait(3)
    board.ack(c, [first.got[1].id])
    first.wait(4)  # the ack gave credit back: ("n", 3) came
    board.unsubscribe(c)
    _, second = subscribe(board, "q")
    got = second.wait(4)
    assert [d.message.tuple for d in got] == [("n", 0), ("n", 2), ("n", 3), ("n", 4)]
    assert [d.message.delivery_count for d in got] == [2, 2, 2, 1]


def test_deleting_a_selector_gives_back_its_messages(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    s = board.create_selector(SelectorSpec("q"))
    sink = Sink()
    board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=s.id)
    post(board, "q", ("x",))
    sink.wait(1)
    board.delete_selector(s.id)
    assert isinstance(sink.ended[0], NotFound)
    [m] = board.take("q")
    assert m.delivery_count == 2


def test_acks_are_per_delivery(board: Board) -> None:
    """An ack applies every id it can and answers the others one by one; a
    repeated ack is harmless."""
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",), ("y",))
    a, b = sink.wait(2)
    acked = board.ack(c, [a.id, 99])
    assert acked.ids == [a.id]
    assert isinstance(acked.rejected[99], InvalidArgument)
    assert "never delivered" in str(acked.rejected[99])
    assert row(board, "q").outstanding == 1  # type: ignore[attr-defined]
    again = board.ack(c, [a.id, a.id])
    assert again.ids == [] and list(again.rejected) == [a.id]
    assert isinstance(again.rejected[a.id], NotFound)
    assert "already acked" in str(again.rejected[a.id])
    with pytest.raises(InvalidArgument):
        board.add_credit(c, -1)
    late = board.ack(c, [], up_to=b.id + 5)
    assert late.ids == [] and isinstance(late.rejected[b.id + 5], InvalidArgument)
    assert board.ack(c, [b.id]).ids == [b.id]
    assert board.get_queue("q").unprocessed == 0


# -- leases ------------------------------------------------------------------


def test_a_leased_take_is_invisible_until_acked(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=UNLIMITED))
    post(board, "q", ("a",), ("b",))
    [d] = board.take_leased("q", lease=60)
    assert d.message.tuple == ("a",) and d.message.delivery_count == 1
    assert [m.tuple for m in board.take("q", max=10)] == [("b",)]
    board.ack_leases("q", [d.id])
    with pytest.raises(NotFound, match="already acked"):
        board.ack_leases("q", [d.id])
    with pytest.raises(InvalidArgument, match="never given"):
        board.ack_leases("q", [12345])
    assert board.get_queue("q").unprocessed == 0


def test_a_lease_that_runs_out_brings_the_message_back(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    post(board, "q", ("a",))
    [d] = board.take_leased("q", lease=0.2)
    assert board.take("q") == []
    [m] = board.take("q", timeout=5)
    assert (m.tuple, m.delivery_count) == (("a",), 2)
    with pytest.raises(NotFound):
        board.ack_leases("q", [d.id])


# -- selectors: lifetime and bad input ----------------------------------


def test_auto_delete_queue_goes_with_its_last_selector(board: Board) -> None:
    board.create_queue(QueueSpec("tmp", auto_delete=True))
    board.create_queue(QueueSpec("dst"))
    s = board.create_selector(SelectorSpec("tmp", destination="dst"))
    board.delete_selector(s.id)
    with pytest.raises(QueueNotFound):
        board.get_queue("tmp")


def test_session_subscription_on_auto_delete_queue_deletes_it(board: Board) -> None:
    board.create_queue(QueueSpec("reply", transient=True, auto_delete=True))
    c, _ = subscribe(board, "reply")
    board.unsubscribe(c)
    with pytest.raises(QueueNotFound):
        board.get_queue("reply")


def test_durable_selectors_survive_a_restart(tmp_path: Path) -> None:
    """A durable MOVE selector keeps routing after a restart; a durable
    terminal selector keeps messages waiting while no consumer is attached."""
    path = tmp_path / "board"
    with Board(path) as board:
        for q in ("a", "b"):
            board.create_queue(QueueSpec(q))
        moved = board.create_selector(SelectorSpec("a", tpl("m"), destination="b"))
        term = board.create_selector(SelectorSpec("a", tpl("t"), credit=10))
        post(board, "a", ("t",))
    with Board(path) as board:
        assert [v.id for v in board.list_selectors("a")] == [moved.id, term.id]
        post(board, "a", ("m",), ("t",))
        assert [m.tuple for m in board.read("b")] == [("m",)]
        sink = Sink()
        board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=term.id)
        assert [d.message.tuple for d in sink.wait(2)] == [("t",), ("t",)]
        with pytest.raises(FailedPrecondition, match="already has a consumer"):
            board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=term.id)
        new = board.create_selector(SelectorSpec("b", op=Op.DELETE))
        assert new.id not in (moved.id, term.id)


def test_selector_bad_input_changes_nothing(board: Board) -> None:
    board.create_queue(QueueSpec("a"))
    board.create_queue(QueueSpec("b"))
    with pytest.raises(QueueNotFound, match="source"):
        board.create_selector(SelectorSpec("nope", destination="a"))
    with pytest.raises(QueueNotFound, match="destination"):
        board.create_selector(SelectorSpec("a", destination="nope"))
    with pytest.raises(InvalidArgument, match="credit"):
        board.create_selector(SelectorSpec("a", destination="b", credit=-1))
    with pytest.raises(InvalidArgument, match="destination"):
        board.create_selector(SelectorSpec("a", op=Op.DELETE, destination="b"))
    with pytest.raises(FailedPrecondition, match="cycle"):
        board.create_selector(SelectorSpec("a", destination="a"))
    board.create_selector(SelectorSpec("a", destination="b"))
    with pytest.raises(FailedPrecondition, match="cycle"):
        board.create_selector(SelectorSpec("b", op=Op.COPY, destination="a"))
    with pytest.raises(NotFound):
        board.delete_selector("sel-999")
    assert len(board.list_selectors()) == 1


def test_copy_from_head_replays_history_then_goes_live(board: Board) -> None:
    board.create_queue(QueueSpec("log", max_history=UNLIMITED))
    post(board, "log", *nums(3))
    board.take("log", max=2)
    _, sink = subscribe(board, "log", op=Op.COPY, start=Position.HEAD)
    sink.wait(3)
    post(board, "log", ("n", 3))
    assert [d.message.tuple for d in sink.wait(4)] == nums(4)


def test_selectors_and_subscriptions_apply_filters(board: Board) -> None:
    """Match first, filter second: a selector's filter and a subscription's
    filter each see only what they select."""
    board.create_queue(QueueSpec("in"))
    board.create_queue(QueueSpec("urgent"))
    board.create_selector(SelectorSpec("in", Pattern(filter="priority > 5"), destination="urgent"))
    _, sink = subscribe(board, "in", pattern=Pattern(filter="t[0] = 'x'"))
    board.post(
        "in",
        [Message(tuple=("x",), priority=9), Message(tuple=("x",)), Message(tuple=("y",))],
    )
    assert [m.priority for m in board.read("urgent", max=5)] == [9]
    [d] = sink.wait(1)
    assert (d.message.tuple, d.message.priority) == (("x",), 0)
    assert [m.tuple for m in board.read("in", max=5)] == [("y",)]


def test_a_durable_selector_into_a_transient_queue_goes_with_it(tmp_path: Path) -> None:
    path = tmp_path / "board"
    with Board(path) as board:
        board.create_queue(QueueSpec("src"))
        board.create_queue(QueueSpec("tmp", transient=True))
        board.create_selector(SelectorSpec("src", destination="tmp"))
    with Board(path) as board:
        assert board.list_selectors() == []
        post(board, "src", ("kept",))
        assert [m.tuple for m in board.read("src")] == [("kept",)]


def test_a_pull_goes_on_past_the_search_budget(board: Board) -> None:
    """A subscriber whose pattern the index cannot narrow (a filter) scans in
    budgeted steps; a match beyond the first step is still delivered."""
    from msgboard.lmdbstore.search import FIND_BUDGET

    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(tuple=("x",)) for _ in range(FIND_BUDGET + 500)])
    post(board, "q", ("y",))
    _, sink = subscribe(board, "q", pattern=Pattern(filter="t[0] = 'y'"))
    [d] = sink.wait(1)
    assert d.message.tuple == ("y",)
