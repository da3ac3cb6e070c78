"""Routing on the embedded engine over a real LMDB directory: the seed
patterns, then one test per routing rule of DESIGN.md (copies, deletes,
moves and credit, defaults, unmatched and overflow policies, bounces) and
credit flowing through a graph of queues. Expiry, redelivery and leases,
and selectors' lifetime have files of their own (test_expiry.py,
test_redelivery.py, test_selectors.py)."""

from __future__ import annotations

import pytest

from msgboard import Message, QueueSpec, Section
from msgboard.associative import AddressPattern, Pattern
from msgboard.engine import Board
from msgboard.errors import InvalidArgument
from msgboard.spec import Op, OverflowPolicy, Role, SelectorSpec, UnmatchedPolicy
from tests.sinks import nums, post, row, settle, subscribe, tpl

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
