"""How a message left, in its history record (``Message.exit``): one test
per kind of exit on the embedded engine over a real LMDB directory (a Take,
a consumer's ack, a leased Take acked, MOVE, BOUNCE, COPY, DELETE, each
dead-letter reason the engine can cause, expiry, the unmatched policy
discard, drop-new), each read back from the history section as Browse gives
it; the old records without one; and the exit over the wire (Browse, the
Python client, ``msgboard browse --json``)."""

from __future__ import annotations

import json

import pytest

from msgboard import Message, QueueSpec, Section
from msgboard.cli import main
from msgboard.client import Client
from msgboard.codec import messages_from_pb, messages_to_pb
from msgboard.engine import Board
from msgboard.message import Exit, ExitKind
from msgboard.spec import UNLIMITED, Op, OverflowPolicy, SelectorSpec, UnmatchedPolicy
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from tests.sinks import nums, post, subscribe, until

H = UNLIMITED


def history(board: Board, queue: str) -> list[Message]:
    return board.browse(queue, section=Section.HISTORY, limit=1000).messages


def exits(board: Board, queue: str) -> list[Exit | None]:
    return [m.exit for m in history(board, queue)]


def test_a_take_is_recorded_taken(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=H))
    post(board, "q", *nums(3))
    taken = board.take("q", max=2)
    # The taker's own messages say so too.
    assert [m.exit for m in taken] == [Exit(ExitKind.TAKEN)] * 2
    assert exits(board, "q") == [Exit(ExitKind.TAKEN)] * 2
    [waiting] = board.browse("q", section=Section.UNPROCESSED).messages
    assert waiting.exit is None


def test_a_consumers_ack_is_recorded_acked_with_its_selector(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=H))
    c, sink = subscribe(board, "q")
    post(board, "q", *nums(3))
    got = sink.wait(3)
    board.ack(c, [d.id for d in got])
    until(lambda: len(history(board, "q")) == 3)
    assert exits(board, "q") == [Exit(ExitKind.ACKED, selector=c.selector.id)] * 3


def test_a_leased_take_acked_is_acked_and_one_given_back_waits_without_an_exit(
    board: Board,
) -> None:
    board.create_queue(QueueSpec("q", max_history=H))
    post(board, "q", ("a",), ("b",))
    [a, b] = board.take_leased("q", lease=60, max=2)
    board.ack_leases("q", [a.id])
    board.ack_leases("q", [b.id], nack=True)  # back to waiting: no exit
    assert exits(board, "q") == [Exit(ExitKind.ACKED)]
    [back] = board.browse("q", section=Section.UNPROCESSED).messages
    assert back.tuple == ("b",) and back.exit is None
    [again] = board.take("q", timeout=30)  # a nacked lease waits the nack backoff first
    assert (again.delivery_count, again.exit) == (2, Exit(ExitKind.TAKEN))


def test_a_move_names_the_queue_and_seq_it_went_to(board: Board) -> None:
    board.create_queue(QueueSpec("src", max_history=H))
    board.create_queue(QueueSpec("dst"))
    post(board, "dst", ("already",))  # dst's seqs are not src's
    s = board.create_selector(SelectorSpec("src", destination="dst"))
    post(board, "src", *nums(2))
    assert exits(board, "src") == [Exit(ExitKind.MOVED, "selector", "dst", s.id, n) for n in (2, 3)]
    there = {m.seq: m.tuple for m in board.browse("dst").messages}
    assert there == {1: ("already",), 2: ("n", 0), 3: ("n", 1)}


def test_a_copy_leaves_the_source_waiting_with_no_exit(board: Board) -> None:
    """A COPY is not an exit: the source message stays, and its exit is set
    by whatever takes it later."""
    board.create_queue(QueueSpec("src", max_history=H))
    board.create_queue(QueueSpec("dst"))
    board.create_selector(SelectorSpec("src", destination="dst", op=Op.COPY))
    post(board, "src", ("a",))
    assert history(board, "src") == []
    [m] = board.browse("src").messages
    assert (m.section, m.exit) == (Section.UNPROCESSED, None)
    board.take("src")
    assert exits(board, "src") == [Exit(ExitKind.TAKEN)]


def test_a_bounce_is_moved_to_reply_to_or_dead_lettered_with_no_room(board: Board) -> None:
    board.create_queue(QueueSpec("svc", max_history=H, dead_letter="dlq"))
    board.create_queue(QueueSpec("me"))
    board.create_queue(QueueSpec("full", max_unprocessed=1))
    board.create_queue(QueueSpec("dlq"))
    post(board, "full", ("filler",))
    s = board.create_selector(SelectorSpec("svc", op=Op.BOUNCE))
    board.post("svc", [Message(tuple=("ok",), reply_to="me")])
    board.post("svc", [Message(tuple=("no room",), reply_to="full")])
    why = "bounce: no room in reply_to"
    assert exits(board, "svc") == [
        Exit(ExitKind.MOVED, "bounce", "me", s.id, 1),
        Exit(ExitKind.DEAD_LETTERED, why, "dlq", s.id),
    ]
    [dead] = board.read("dlq")
    assert dead.headers["x-dead-letter-reason"] == why


def test_a_delete_selector_drops(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=H))
    s = board.create_selector(SelectorSpec("q", op=Op.DELETE))
    post(board, "q", ("a",))
    assert exits(board, "q") == [Exit(ExitKind.DROPPED, "delete", "", s.id)]


def test_unmatched_discard_drops_and_unmatched_dead_letter_names_the_dlq(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("gone", max_history=H, unmatched=UnmatchedPolicy.DISCARD))
    board.create_queue(
        QueueSpec("dead", max_history=H, unmatched=UnmatchedPolicy.DEAD_LETTER, dead_letter="dlq")
    )
    board.create_queue(QueueSpec("x"))
    for q in ("gone", "dead"):
        board.create_selector(SelectorSpec(q, destination="x", op=Op.COPY))
    post(board, "gone", ("a",))
    post(board, "dead", ("b",))
    assert exits(board, "gone") == [Exit(ExitKind.DROPPED, "unmatched")]
    assert exits(board, "dead") == [Exit(ExitKind.DEAD_LETTERED, "unmatched", "dlq")]


def test_a_reject_is_dead_lettered_rejected(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", max_history=H, dead_letter="dlq"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("a",))
    board.nack(c, [sink.wait(1)[0].id], reject=True)
    until(lambda: len(history(board, "q")) == 1)
    assert exits(board, "q") == [Exit(ExitKind.DEAD_LETTERED, "rejected", "dlq")]


def test_max_deliveries_is_dead_lettered_and_discarded_when_the_dlq_is_full(board: Board) -> None:
    """Twice nacked with max_deliveries 2: dead-lettered. The second
    message finds the dead-letter queue full: discarded, queue ''."""
    board.create_queue(QueueSpec("dlq", max_unprocessed=1))
    board.create_queue(QueueSpec("q", max_history=H, dead_letter="dlq", max_deliveries=2))
    for n in range(2):
        post(board, "q", ("m", n))
        for _ in range(2):
            [d] = board.take_leased("q", lease=60, timeout=30)
            board.ack_leases("q", [d.id], nack=True)
    assert exits(board, "q") == [
        Exit(ExitKind.DEAD_LETTERED, "max-deliveries", "dlq"),
        Exit(ExitKind.DEAD_LETTERED, "max-deliveries", ""),
    ]
    assert board.get_queue("dlq").unprocessed == 1


def test_max_hops_is_dead_lettered_with_no_queue(board: Board) -> None:
    """Two services bouncing a message to each other: past MAX_HOPS it is
    processed where it stands, never sent to a dead-letter queue."""
    for q in ("a", "b"):
        board.create_queue(QueueSpec(q, max_history=H, dead_letter="dlq"))
        board.create_selector(SelectorSpec(q, op=Op.BOUNCE))
    board.create_queue(QueueSpec("dlq"))
    board.post("a", [Message(tuple=("ping",), reply_to="b")])
    every = [m.exit for q in ("a", "b") for m in history(board, q)]
    assert every.count(Exit(ExitKind.DEAD_LETTERED, "max-hops")) == 1
    assert every.count(None) == 0
    moved = [e for e in every if e is not None and e.kind is ExitKind.MOVED]
    assert len(moved) == len(every) - 1 > 30
    # Each hop names where the next one is: a message there, bounced back.
    held = {(q, m.seq): m for q in ("a", "b") for m in history(board, q)}
    for e in moved:
        assert e.reason == "bounce" and (e.queue, e.seq) in held, e
    assert board.get_queue("dlq").unprocessed == 0


def test_expiry_names_the_dlq_or_none(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", max_history=H, dead_letter="dlq"))
    board.create_queue(QueueSpec("lone", max_history=H))
    post(board, "q", ("past",), expires_at=1)
    post(board, "lone", ("past",), expires_at=1)
    assert board.take("q") == [] and board.take("lone") == []
    assert exits(board, "q") == [Exit(ExitKind.EXPIRED, "expired", "dlq")]
    assert exits(board, "lone") == [Exit(ExitKind.EXPIRED, "expired", "")]


def test_drop_new_leaves_no_history_row_and_no_seq(board: Board) -> None:
    """A post refused by drop-new never entered the queue: nothing to
    record, and it takes no seq (posted counts only what entered)."""
    spec = QueueSpec("q", max_history=H, max_unprocessed=1, overflow=OverflowPolicy.DROP_NEW)
    board.create_queue(spec)
    assert post(board, "q", ("a",), ("b",)) == [1, 0]
    assert history(board, "q") == []
    board.take("q")
    assert exits(board, "q") == [Exit(ExitKind.TAKEN)]
    assert board.get_queue("q").next_seq == 2


def test_a_post_never_carries_an_exit() -> None:
    """A browsed history message posted again (its protobuf, exit and all):
    the exit is cleared from the stored bytes, as processed_at is."""
    p = pb.Message(address="a")
    p.exit.kind = pb.EXIT_KIND_ACKED
    [m] = messages_from_pb([p])
    assert m.exit is None and not p.HasField("exit")
    assert pb.Message.FromString(m._wire or b"").HasField("exit") is False
    mine = Message(address="a")
    [q] = messages_to_pb([mine])
    assert not q.HasField("exit")


def test_browse_over_the_wire_returns_the_exit(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Browse over gRPC: the Python client's messages carry the exit, and
    ``msgboard browse --json`` prints it."""
    client.create_queue("dlq")
    client.create_queue("q", max_history=H, dead_letter="dlq")
    client.post("q", ("a",))
    client.post("q", ("b",), expires_at=1)
    client.take("q")
    page = client.browse("q", section=Section.HISTORY)
    assert [(m.tuple, m.exit) for m in page.messages] == [
        (("a",), Exit(ExitKind.TAKEN)),
        (("b",), Exit(ExitKind.EXPIRED, "expired", "dlq")),
    ]
    code = main(["browse", "q", "--section", "history", "--json", "--server", server.address])
    out, _ = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert code == 0
    assert [r["exit"] for r in rows] == [
        {"kind": "taken"},
        {"kind": "expired", "reason": "expired", "queue": "dlq"},
    ]


def test_sys_events_trimmed_past_its_bound_are_dropped_trimmed(board: Board) -> None:
    """$sys keeps SYS_WAITING events waiting; older ones go to its history,
    recorded as dropped by trimming."""
    from msgboard.engine.events import SYS, SYS_WAITING

    for i in range(SYS_WAITING + 5):
        board.emit("test.event", i)
    until(lambda: len(history(board, SYS)) >= 5, timeout=30)
    assert set(exits(board, SYS)) == {Exit(ExitKind.DROPPED, "trimmed")}
