"""An operator's hands on waiting messages, in the embedded engine: purge,
move (and the dead-letter resubmit), delete and release, each one
operation that checks everything first, so that bad input changes nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from msgboard import Message, QueueSpec, Section
from msgboard.associative import Pattern, template
from msgboard.engine import Board, maintenance
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QueueFull,
    QueueNotFound,
    Reserved,
)
from msgboard.message import ExitKind
from msgboard.results import Moved, Purged
from msgboard.spec import UNLIMITED, Delivery, OverflowPolicy


def post(board: Board, queue: str, *tuples: tuple[object, ...], **kw: object) -> list[int]:
    return board.post(queue, [Message(tuple=t, **kw) for t in tuples])  # type: ignore[arg-type]


def everything(board: Board, queue: str) -> list[Message]:
    """Every message of the queue, both sections, oldest first."""
    return board.browse(queue, limit=10_000).messages


def waiting(board: Board, queue: str) -> list[tuple[object, ...]]:
    return [m.tuple for m in everything(board, queue) if m.section is Section.UNPROCESSED]


def events(board: Board, *names: str) -> list[tuple[object, ...]]:
    """The $sys events of these names so far (waits for them to be posted)."""
    deadline = time.monotonic() + 10
    while True:
        got = [tuple(m.tuple) for m in everything(board, "$sys") if m.tuple and m.tuple[0] in names]
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def _snapshot(board: Board, *queues: str) -> list[list[tuple[int, str, tuple[object, ...]]]]:
    return [
        [(m.seq, m.section.value, tuple(m.tuple)) for m in everything(board, q)] for q in queues
    ]


# -- purge ------------------------------------------------------------------


@pytest.mark.parametrize("transient", [False, True])
def test_purge_removes_waiting_messages_and_leaves_held_ones(board: Board, transient: bool) -> None:
    """Given a queue with history, a leased message and waiting ones, when I
    purge it, I expect the waiting ones gone (kept in no history), the
    leased one and the history untouched, and a later post seq'd after."""
    board.create_queue(QueueSpec("q", transient=transient, max_history=UNLIMITED))
    post(board, "q", ("a", 1), ("a", 2), ("a", 3), ("a", 4))
    board.take("q")  # seq 1 into history
    [leased] = board.take_leased("q", lease=60)
    got = board.purge_queue("q", by="alice")
    assert got == Purged(2, 0)
    left = everything(board, "q")
    assert [(m.seq, m.section) for m in left] == [(1, Section.HISTORY), (2, Section.UNPROCESSED)]
    board.ack_leases("q", [leased.id])  # the taker still acks its lease
    assert post(board, "q", ("b",)) == [5]
    assert events(board, "queue.purged") == [("queue.purged", "q", 2, 0, "alice")]


def test_purge_with_history_in_small_steps_empties_both_sections(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given more messages than one purge step takes, when I purge with
    history, I expect every waiting message and history record gone, over
    several group commits, and the counts at 0."""
    monkeypatch.setattr(maintenance, "PURGE_CHUNK", 3)
    board.create_queue(QueueSpec("q", max_history=UNLIMITED, dedup_window=0))
    post(board, "q", *[("m", i) for i in range(10)])
    board.take("q", max=4)
    post(board, "q", ("k",), key="K")
    got = board.purge_queue("q", history=True)
    assert got == Purged(7, 4)
    v = board.get_queue("q")
    assert (v.unprocessed, v.history) == (0, 0)
    assert everything(board, "q") == []
    # The key left with its message: with no window, free at once.
    assert post(board, "q", ("k2",), key="K") == [12]


def test_purge_of_an_unknown_or_reserved_queue_is_refused(board: Board) -> None:
    with pytest.raises(QueueNotFound):
        board.purge_queue("nope")
    with pytest.raises(Reserved):
        board.purge_queue("$sys")


# -- move -------------------------------------------------------------------


def test_move_by_seqs_keeps_the_message_and_says_whence(board: Board) -> None:
    """Given messages with keys, headers and bodies, when I move two of them
    by seq, I expect them on the destination in seq order, whole, with
    x-moved-from and x-moved-seq, their delivery count back at 0, and on
    the source's history as moved there."""
    board.create_queue(QueueSpec("src", max_history=UNLIMITED))
    board.create_queue(QueueSpec("dst"))
    board.post(
        "src",
        [
            Message(tuple=("a", 1), key="k1", headers={"h": "1"}, body=b"one", priority=3),
            Message(tuple=("a", 2)),
            Message(tuple=("a", 3), key="k3", address="x.y"),
        ],
    )
    got = board.move_messages("src", "dst", seqs=[3, 1], by="bob")
    assert got == [Moved(1, "dst", 1), Moved(3, "dst", 2)]
    one, three = everything(board, "dst")
    assert (one.tuple, one.key, one.body, one.priority) == (("a", 1), "k1", b"one", 3)
    assert one.headers == {"h": "1", "x-moved-from": "src", "x-moved-seq": "1"}
    assert (three.address, three.key, three.headers["x-moved-seq"]) == ("x.y", "k3", "3")
    assert one.delivery_count == 0
    src = {m.seq: m for m in everything(board, "src")}
    assert src[2].section is Section.UNPROCESSED
    for seq, at in ((1, 1), (3, 2)):  # followed from its history record
        assert src[seq].section is Section.HISTORY
        assert src[seq].exit is not None
        assert (src[seq].exit.kind, src[seq].exit.queue) == (ExitKind.MOVED, "dst")
        assert (src[seq].exit.reason, src[seq].exit.seq) == ("admin", at)
    # The destination holds the keys now: a retried post is a duplicate.
    assert post(board, "dst", ("again",), key="k1") == [1]
    assert events(board, "messages.moved") == [("messages.moved", "src", "dst", 2, "bob")]


def test_move_by_pattern_takes_the_oldest_matches_up_to_the_limit(board: Board) -> None:
    board.create_queue(QueueSpec("src"))
    board.create_queue(QueueSpec("dst", transient=True))
    post(board, "src", ("a", 1), ("b", 2), ("a", 3), ("a", 4))
    pat = Pattern(templates=(template("a", int),))
    got = board.move_messages("src", "dst", pattern=pat, limit=2)
    assert [(m.seq, m.new_seq) for m in got] == [(1, 1), (3, 2)]
    assert waiting(board, "src") == [("b", 2), ("a", 4)]
    assert waiting(board, "dst") == [("a", 1), ("a", 3)]
    # No pattern, no seqs: refused; with every: every waiting message.
    with pytest.raises(InvalidArgument, match="seqs: give the seqs, a pattern or all"):
        board.move_messages("src", "dst")
    with pytest.raises(InvalidArgument, match="all: give all alone"):
        board.move_messages("src", "dst", seqs=[2], every=True)
    assert len(board.move_messages("src", "dst", every=True)) == 2
    assert waiting(board, "src") == []


def test_a_moved_message_is_routed_on_arrival(board: Board) -> None:
    """Given a destination with a consumer waiting, I expect the moved
    message delivered to it as a post would be."""
    board.create_queue(QueueSpec("src"))
    board.create_queue(QueueSpec("dst"))
    got: list[Delivery] = []
    board.subscribe("dst", deliver=got.extend, end=lambda why: None, credit=5)
    post(board, "src", ("x",))
    board.move_messages("src", "dst", seqs=[1])
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [d.message.tuple for d in got] == [("x",)]


def _dead_letters(board: Board) -> None:
    """orders (room for 2, overflow dead-lettered to orders.dlq) and
    payments, each with two dead letters, keyed."""
    board.create_queue(QueueSpec("orders.dlq"))
    for q in ("orders", "payments"):
        board.create_queue(
            QueueSpec(
                q,
                max_unprocessed=2,
                overflow=OverflowPolicy.DEAD_LETTER,
                dead_letter="orders.dlq",
                max_history=UNLIMITED,
            )
        )
        board.post(q, [Message(tuple=(q, i), key=f"{q}-{i}") for i in range(4)])
        board.take(q, max=2)  # room again; the key of each taken one is still held


def test_resubmit_sends_each_dead_letter_back_to_its_origin(board: Board) -> None:
    """Given dead letters of two queues in one dead-letter queue, when I
    move them with no destination, I expect each back on the queue its
    x-dead-letter-queue names, keys and dead-letter headers kept, one event
    per destination."""
    _dead_letters(board)
    assert len(waiting(board, "orders.dlq")) == 4
    got = board.move_messages("orders.dlq", "", every=True, by="carol")
    assert [(m.queue, m.new_seq) for m in got] == [
        ("orders", 3),
        ("orders", 4),
        ("payments", 3),
        ("payments", 4),
    ]
    assert waiting(board, "orders") == [("orders", 2), ("orders", 3)]
    m = everything(board, "orders")[-1]
    assert m.key == "orders-3"
    assert m.headers["x-dead-letter-queue"] == "orders"
    assert m.headers["x-dead-letter-reason"] == "overflow"
    assert m.headers["x-moved-from"] == "orders.dlq"
    assert waiting(board, "orders.dlq") == []
    assert sorted(events(board, "messages.moved")) == [
        ("messages.moved", "orders.dlq", "orders", 2, "carol"),
        ("messages.moved", "orders.dlq", "payments", 2, "carol"),
    ]


def test_a_move_takes_over_a_key_that_left_but_not_one_still_waiting(board: Board) -> None:
    """Given a destination whose history holds key K, I expect a message
    with K moved in (a deliberate re-entry); given one whose waiting
    message holds K, I expect the move refused, naming both."""
    board.create_queue(QueueSpec("src", dedup_window=0))
    board.create_queue(QueueSpec("dst", max_history=UNLIMITED))
    post(board, "dst", ("old",), key="K")
    board.take("dst")  # K held by dst's history record 1
    post(board, "src", ("new",), key="K")
    assert board.move_messages("src", "dst", seqs=[1]) == [Moved(1, "dst", 2)]
    assert post(board, "dst", ("retry",), key="K") == [2]  # K is held by the moved one
    post(board, "src", ("other",), key="K")  # src's K left with seq 1: free again
    before = _snapshot(board, "src", "dst")
    with pytest.raises(FailedPrecondition, match=r"key 'K' is held by message 2 waiting"):
        board.move_messages("src", "dst", seqs=[2])
    assert _snapshot(board, "src", "dst") == before
    # Held only within its dedup window (no history kept): taken over too.
    board.create_queue(QueueSpec("win"))
    post(board, "win", ("gone",), key="W")
    board.take("win")
    assert post(board, "win", ("retry",), key="W") == [1]  # the window holds W
    post(board, "src", ("w",), key="W")
    assert board.move_messages("src", "win", seqs=[3]) == [Moved(3, "win", 2)]
    assert post(board, "win", ("retry",), key="W") == [2]


def test_bad_moves_are_refused_and_change_nothing(board: Board) -> None:
    """Every way a move can be wrong gets its own error, naming what, and
    leaves both queues as they were."""
    board.create_queue(QueueSpec("src", max_history=UNLIMITED))
    board.create_queue(QueueSpec("dst", max_unprocessed=2))
    post(board, "src", *[("m", i) for i in range(5)])
    board.take("src")  # seq 1 in history
    [leased] = board.take_leased("src", lease=60)  # seq 2 leased
    post(board, "dst", ("d",))
    before = _snapshot(board, "src", "dst")
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"source": "nope", "destination": "dst", "every": True}, QueueNotFound, "nope"),
        ({"source": "src", "destination": "nope", "seqs": [3]}, QueueNotFound, "nope"),
        ({"source": "src", "destination": "src"}, InvalidArgument, "is the source queue"),
        ({"source": "src", "destination": "dst", "seqs": [1]}, NotFound, r"seqs\[0\].*1"),
        ({"source": "src", "destination": "dst", "seqs": [99]}, NotFound, "no waiting message 99"),
        ({"source": "src", "destination": "dst", "seqs": [2]}, FailedPrecondition, "lease"),
        ({"source": "src", "destination": "dst", "seqs": [3, 3]}, InvalidArgument, "twice"),
        ({"source": "src", "destination": "dst", "seqs": [0]}, InvalidArgument, "not a seq"),
        (
            {"source": "src", "destination": "dst", "seqs": [3], "pattern": Pattern()},
            InvalidArgument,
            "not both",
        ),
        ({"source": "src", "destination": "dst", "limit": -1}, InvalidArgument, "limit"),
        ({"source": "src", "destination": "dst"}, InvalidArgument, "seqs: give the seqs"),
        ({"source": "src", "destination": "dst", "every": True}, QueueFull, "2 of the 3"),
        (
            {"source": "src", "destination": "", "every": True},
            FailedPrecondition,
            "x-dead-letter-queue",
        ),
        ({"source": "src", "destination": "$sys"}, Reserved, r"\$sys"),
        (
            {"source": "src", "destination": "dst", "seqs": [3], "may": lambda q: False},
            PermissionDenied,
            "'dst'",
        ),
    ]
    for kw, err, match in cases:
        with pytest.raises(err, match=match):
            board.move_messages(**kw)  # type: ignore[arg-type]
        assert _snapshot(board, "src", "dst") == before, kw
    board.ack_leases("src", [leased.id])


def test_a_resubmit_to_a_full_origin_moves_nothing(board: Board) -> None:
    _dead_letters(board)
    post(board, "orders", ("fill",))  # orders: 2 of 2 waiting
    before = _snapshot(board, "orders", "payments", "orders.dlq")
    with pytest.raises(QueueFull, match="'orders' is full"):
        board.move_messages("orders.dlq", "", every=True)
    assert _snapshot(board, "orders", "payments", "orders.dlq") == before


# -- delete -----------------------------------------------------------------


def test_delete_by_seqs_and_by_pattern_keeps_no_history(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=UNLIMITED))
    post(board, "q", ("a", 1), ("b", 2), ("a", 3), ("b", 4))
    assert board.delete_messages("q", seqs=[4, 1], by="dan") == [1, 4]
    assert board.delete_messages("q", pattern=Pattern(templates=(template("a", int),))) == [3]
    assert [(m.seq, m.section) for m in everything(board, "q")] == [(2, Section.UNPROCESSED)]
    before = _snapshot(board, "q")
    with pytest.raises(NotFound, match=r"seqs\[0\]: .*no waiting message 3"):
        board.delete_messages("q", seqs=[3, 2])
    assert _snapshot(board, "q") == before
    assert events(board, "messages.deleted") == [
        ("messages.deleted", "q", 2, "dan"),
        ("messages.deleted", "q", 1, ""),
    ]


# -- release ----------------------------------------------------------------


def test_release_gives_a_leased_message_back_now(board: Board) -> None:
    """Given a message taken with a long lease, when I release it by seq, I
    expect it waiting again (its delivery count raised), its lease no longer
    ackable, and a message not leased refused."""
    board.create_queue(QueueSpec("q"))
    post(board, "q", ("a",), ("b",))
    [leased] = board.take_leased("q", lease=3600)
    [view] = board.list_leases("q")
    assert (view.id, view.queue, view.seq) == (leased.id, "q", 1)
    assert view.until - view.since == 3600 * 1_000_000
    assert board.list_leases() == [view]
    with pytest.raises(QueueNotFound):
        board.list_leases("nope")
    with pytest.raises(NotFound, match="not leased"):
        board.release_messages("q", [2])
    assert board.release_messages("q", [1], by="erin") == [1]
    assert board.list_leases("q") == []
    [m] = board.take("q")
    assert (m.seq, m.delivery_count) == (1, 2)
    acked = board.ack_leases("q", [leased.id])
    assert acked.ids == [] and leased.id in acked.rejected
    assert events(board, "messages.released") == [("messages.released", "q", 1, "erin")]


def test_release_refuses_a_consumers_delivery(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    got: list[Delivery] = []
    board.subscribe("q", deliver=got.extend, end=lambda why: None, credit=5)
    post(board, "q", ("a",))
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(FailedPrecondition, match="consumer con-"):
        board.release_messages("q", [1])


def test_the_engine_calls_survive_a_restart(tmp_path: Path) -> None:
    """What a move wrote is durable: after a restart, the moved messages
    are where they went."""
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("src"))
        board.create_queue(QueueSpec("dst"))
        post(board, "src", ("a",), ("b",))
        board.move_messages("src", "dst", seqs=[2])
        board.purge_queue("src")
    with Board(tmp_path / "b") as board:
        assert waiting(board, "src") == []
        assert waiting(board, "dst") == [("b",)]


def test_a_resubmit_refuses_an_origin_header_naming_no_queue_of_its_own(board: Board) -> None:
    """An x-dead-letter-queue header is data, not the request: one naming
    $sys or no queue name at all is FAILED_PRECONDITION naming the message,
    and nothing moves."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("ok"))
    for origin in ("ok", "$sys", "not a name"):
        board.post("dlq", [Message(tuple=(origin,), headers={"x-dead-letter-queue": origin})])
    before = _snapshot(board, "dlq", "ok")
    with pytest.raises(FailedPrecondition, match=r"message 2 of queue 'dlq': .*\$sys"):
        board.move_messages("dlq", every=True)
    with pytest.raises(FailedPrecondition, match="message 3 of queue 'dlq'"):
        board.move_messages("dlq", seqs=[1, 3])
    assert _snapshot(board, "dlq", "ok") == before
    assert board.move_messages("dlq", seqs=[1]) == [Moved(1, "ok", 1)]


def test_a_purge_whose_caller_gives_up_stops_after_its_step(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a purge of 10 messages 3 a step, when its caller cancels it
    right after its first step (an operation of the same group), I expect
    3 purged, 7 left waiting, and the event saying 3."""
    monkeypatch.setattr(maintenance, "PURGE_CHUNK", 3)
    board.create_queue(QueueSpec("q"))
    post(board, "q", *[("m", i) for i in range(10)])
    gate = threading.Event()
    board._writer.submit(lambda b: gate.wait(10))  # what follows runs after it, in order
    fut = board.purge_queue_async("q", by="fay")
    cancelled = board._writer.submit(lambda b: fut.cancel())
    gate.set()
    assert cancelled.result(10) is True
    assert events(board, "queue.purged") == [("queue.purged", "q", 3, 0, "fay")]
    assert board.get_queue("q").unprocessed == 7
