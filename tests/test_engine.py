"""The embedded engine, with no gRPC: Board over a real LMDB directory."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from msgboard import Message, QueueSpec, Section
from msgboard.associative import ANY, AddressPattern, Pattern, Range, template
from msgboard.engine import Board
from msgboard.errors import (
    InvalidArgument,
    MessageTooLarge,
    QueueExists,
    QueueFull,
    QueueNotFound,
)
from msgboard.lmdbstore import FIND_BUDGET
from msgboard.results import Start
from msgboard.spec import UNLIMITED, OverflowPolicy, Redelivery


def tpl(*fields: object) -> Pattern:
    return Pattern(templates=(template(*fields),))


def post(board: Board, queue: str, *tuples: tuple[object, ...], **kw: object) -> list[int]:
    return board.post(queue, [Message(tuple=t, **kw) for t in tuples])  # type: ignore[arg-type]


def test_post_then_take_returns_the_message_and_empties_the_queue(board: Board) -> None:
    """Given a queue, when I post a tuple and take it, I expect the same
    message back with its seq, and nothing left to take."""
    board.create_queue(QueueSpec("jobs"))
    [seq] = board.post("jobs", [Message(tuple=("job", 1), address="a.b", body=b"x")])
    assert seq == 1
    [m] = board.take("jobs")
    assert (m.queue, m.seq, m.tuple, m.address, m.body) == ("jobs", 1, ("job", 1), "a.b", b"x")
    assert m.section is Section.HISTORY and m.delivery_count == 1 and m.processed_at > 0
    assert board.take("jobs") == []
    assert board.get_queue("jobs").unprocessed == 0


def test_take_returns_the_oldest_matches_first_in_fifo_order(board: Board) -> None:
    """Given interleaved tuples of two shapes, when I take by template, I
    expect only the matches, oldest first, up to max."""
    board.create_queue(QueueSpec("q"))
    post(board, "q", ("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5))
    got = board.take("q", tpl("a", int), max=2)
    assert [m.tuple for m in got] == [("a", 1), ("a", 3)]
    assert [m.tuple for m in board.take("q", max=10)] == [("b", 2), ("a", 4), ("b", 5)]


def test_templates_distinguish_int_float_bool_and_null(board: Board) -> None:
    """Given 1, 1.0, True and None in a field, I expect each template to find
    only its own type."""
    board.create_queue(QueueSpec("t"))
    post(board, "t", (1,), (1.0,), (True,), (None,))
    assert [m.tuple for m in board.read("t", tpl(1), max=9)] == [(1,)]
    assert [m.tuple for m in board.read("t", tpl(1.0), max=9)] == [(1.0,)]
    assert [m.tuple for m in board.read("t", tpl(float), max=9)] == [(1.0,)]
    assert [m.tuple for m in board.read("t", tpl(bool), max=9)] == [(True,)]
    assert [m.tuple for m in board.read("t", tpl(None), max=9)] == [(None,)]
    assert len(board.read("t", tpl(ANY), max=9)) == 4
    assert [m.tuple for m in board.read("t", tpl(Range(0, 2)), max=9)] == [(1,), (1.0,)]
    assert board.read("t", tpl(ANY, ANY), max=9) == []


def test_read_leaves_messages_and_address_patterns_select(board: Board) -> None:
    """Given messages on several addresses, when I read by topic pattern, I
    expect the matches and the queue unchanged."""
    board.create_queue(QueueSpec("news"))
    for a in ("rec.pets.cats", "rec.pets.dogs", "rec.food", "sci.pets"):
        board.post("news", [Message(address=a)])
    pets = Pattern(address=AddressPattern.topic("rec.pets.*"))
    assert [m.address for m in board.read("news", pets, max=9)] == [
        "rec.pets.cats",
        "rec.pets.dogs",
    ]
    rec = Pattern(address=AddressPattern.topic("rec.#"))
    assert len(board.read("news", rec, max=9)) == 3
    assert board.get_queue("news").unprocessed == 4


def test_a_blocked_take_is_woken_by_the_matching_post(board: Board) -> None:
    """Given a take waiting for ("done", int), when a non-matching and then a
    matching tuple are posted, I expect the take to return the match only."""
    board.create_queue(QueueSpec("w"))
    fut = board.take_async("w", tpl("done", int), timeout=10)
    time.sleep(0.05)
    assert not fut.done()
    post(board, "w", ("other", 1))
    started = time.monotonic()
    post(board, "w", ("done", 7))
    [m] = fut.result(5)
    assert m.tuple == ("done", 7)
    assert time.monotonic() - started < 2
    assert [x.tuple for x in board.read("w", max=9)] == [("other", 1)]


def test_a_blocked_read_and_take_both_see_a_post_but_only_take_removes(board: Board) -> None:
    board.create_queue(QueueSpec("rw"))
    r = board.read_async("rw", timeout=10)
    t = board.take_async("rw", timeout=10)
    time.sleep(0.05)
    post(board, "rw", ("x",))
    assert r.result(5)[0].tuple == ("x",)
    assert t.result(5)[0].tuple == ("x",)
    assert board.get_queue("rw").unprocessed == 0


def test_competing_takes_each_get_a_distinct_message(board: Board) -> None:
    """Given 8 threads blocked on take, when 8 messages are posted, I expect
    each thread to get exactly one and no message twice."""
    board.create_queue(QueueSpec("c"))
    results: list[int] = []
    lock = threading.Lock()

    def taker() -> None:
        got = board.take("c", timeout=10)
        with lock:
            results.extend(m.seq for m in got)

    threads = [threading.Thread(target=taker) for _ in range(8)]
    for th in threads:
        th.start()
    time.sleep(0.1)
    for i in range(8):
        post(board, "c", (i,))
    for th in threads:
        th.join(10)
    assert sorted(results) == list(range(1, 9))


def test_an_expired_wait_is_an_empty_answer(board: Board) -> None:
    board.create_queue(QueueSpec("e"))
    started = time.monotonic()
    assert board.take("e", timeout=0.2) == []
    assert 0.15 < time.monotonic() - started < 3


def test_an_abandoned_take_gives_its_messages_back(board: Board) -> None:
    """Given a take that got a message but whose caller gave up, when it is
    abandoned, I expect the message waiting again, not lost."""
    board.create_queue(QueueSpec("ab", max_history=UNLIMITED))
    post(board, "ab", ("x",))
    fut = board.take_async("ab")
    [m] = fut.result(5)
    board.abandon("ab", fut)
    [again] = board.take("ab", timeout=5)
    assert again.seq == m.seq and again.delivery_count == 2


def test_an_abandoned_wait_takes_nothing(board: Board) -> None:
    board.create_queue(QueueSpec("ab2"))
    fut = board.take_async("ab2", timeout=30)
    board.abandon("ab2", fut)
    assert fut.result(5) == []
    post(board, "ab2", ("x",))
    assert board.get_queue("ab2").unprocessed == 1


def test_create_is_idempotent_and_conflicts_are_refused(board: Board) -> None:
    spec = QueueSpec("dup", max_unprocessed=5)
    board.create_queue(spec)
    board.create_queue(spec)
    with pytest.raises(QueueExists):
        board.create_queue(QueueSpec("dup", max_unprocessed=6))
    with pytest.raises(QueueExists):
        board.create_queue(QueueSpec("dup", max_unprocessed=5, transient=True))
    assert [v.spec for v in board.list_queues()] == [spec]


def test_a_conflict_names_the_properties_that_differ_in_the_words_of_the_proto(
    board: Board,
) -> None:
    """Given a queue, when I create it again with other properties, I expect
    the error to name only those, by their QueueSpec field names as every
    error on the wire names the request's parts (the CLI says them as its
    flags: test_commands), with what exists and what was asked."""
    board.create_queue(
        QueueSpec("jobs", max_history=1000, overflow=OverflowPolicy.DROP_NEW, max_unprocessed=9)
    )
    asked = QueueSpec("jobs", max_history=500, transient=True, max_unprocessed=9)
    with pytest.raises(QueueExists) as e:
        board.create_queue(asked)
    assert str(e.value) == (
        'queue "jobs" exists with transient false (asked: true), '
        "overflow DROP_NEW (asked: REJECT), max_history 1000 (asked: 500)"
    )
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("all", max_history=UNLIMITED, dead_letter="dlq"))
    with pytest.raises(QueueExists, match=r"max_history unlimited \(asked: 0\), "):
        board.create_queue(QueueSpec("all"))
    with pytest.raises(QueueExists, match=r'dead_letter "dlq" \(asked: ""\)$'):
        board.create_queue(QueueSpec("all", max_history=UNLIMITED))
    board.create_queue(QueueSpec("r", dedup_window=0, redelivery=Redelivery(10**6, 2.0, 3 * 10**8)))
    with pytest.raises(QueueExists) as e:
        board.create_queue(QueueSpec("r"))
    assert str(e.value).endswith(
        "dedup_window 0s (asked: 120s), "
        "redelivery {initial: 1s, multiplier: 2, max: 300s} (asked: unset)"
    )


def test_a_full_queue_rejects_or_drops(board: Board) -> None:
    """Given max_unprocessed 2, I expect reject to refuse the whole post and
    drop-new to store what fits and answer 0 for the rest."""
    board.create_queue(QueueSpec("r", max_unprocessed=2))
    post(board, "r", (1,))
    with pytest.raises(QueueFull):
        post(board, "r", (2,), (3,))
    assert board.get_queue("r").unprocessed == 1
    board.create_queue(QueueSpec("d", max_unprocessed=2, overflow=OverflowPolicy.DROP_NEW))
    assert post(board, "d", (1,), (2,), (3,)) == [1, 2, 0]
    assert board.stats("d").queues[0].overflowed == 1


def test_history_keeps_at_most_max_history(board: Board) -> None:
    board.create_queue(QueueSpec("h", max_history=2))
    post(board, "h", (1,), (2,), (3,))
    board.take("h", max=3)
    page = board.browse("h", section=Section.HISTORY)
    assert [m.tuple for m in page.messages] == [(2,), (3,)]
    board.create_queue(QueueSpec("h0"))
    post(board, "h0", (1,))
    board.take("h0")
    assert board.browse("h0").messages == []


def test_browse_pages_forward_and_backward_over_both_sections(board: Board) -> None:
    board.create_queue(QueueSpec("b", max_history=UNLIMITED))
    post(board, "b", *[(i,) for i in range(1, 8)])
    board.take("b", tpl(Range(2, 3)), max=2)
    p1 = board.browse("b", limit=3)
    assert [m.seq for m in p1.messages] == [1, 2, 3] and p1.next_seq == 4
    assert [m.section for m in p1.messages] == [
        Section.UNPROCESSED,
        Section.HISTORY,
        Section.HISTORY,
    ]
    p2 = board.browse("b", Start.SEQ, seq=p1.next_seq, limit=10)
    assert [m.seq for m in p2.messages] == [4, 5, 6, 7] and p2.next_seq == 0
    back = board.browse("b", Start.LATEST, reverse=True, limit=4)
    assert [m.seq for m in back.messages] == [7, 6, 5, 4] and back.next_seq == 3
    unp = board.browse("b", section=Section.UNPROCESSED, reverse=True, start=Start.LATEST)
    assert [m.seq for m in unp.messages] == [7, 6, 5, 4, 1]


def test_browse_since_a_time(board: Board) -> None:
    board.create_queue(QueueSpec("ts"))
    post(board, "ts", (1,))
    time.sleep(0.01)
    middle = board.browse("ts").messages[0].posted_at + 1
    time.sleep(0.01)
    post(board, "ts", (2,))
    page = board.browse("ts", Start.TIME, since=middle)
    assert [m.tuple for m in page.messages] == [(2,)]


def test_transient_queues_vanish_on_restart_and_durable_ones_stay(tmp_path: Path) -> None:
    with Board(tmp_path / "d") as b:
        b.create_queue(QueueSpec("keep"))
        b.create_queue(QueueSpec("temp", transient=True))
        post(b, "keep", ("k",))
        post(b, "temp", ("t",))
    with Board(tmp_path / "d") as b:
        assert [v.spec.name for v in b.list_queues()] == ["keep"]
        [m] = b.take("keep")
        assert m.tuple == ("k",)
        assert post(b, "keep", ("k2",)) == [2]


def test_deleting_a_queue_answers_its_waiters_not_found(board: Board) -> None:
    board.create_queue(QueueSpec("gone"))
    fut = board.take_async("gone", timeout=30)
    time.sleep(0.05)
    board.delete_queue("gone")
    with pytest.raises(QueueNotFound):
        fut.result(5)
    with pytest.raises(QueueNotFound):
        board.post("gone", [Message()])


def test_bad_input_is_refused_and_changes_nothing(board: Board) -> None:
    board.create_queue(QueueSpec("ok"))
    for bad in ("", "a b", "x" * 256, "é"):
        with pytest.raises(InvalidArgument, match="queue"):
            board.create_queue(QueueSpec(bad))
    with pytest.raises(InvalidArgument, match=r"tuple\[0\]"):
        board.post("ok", [Message(tuple=([1],))])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="tuple"):
        board.post("ok", [Message(tuple=tuple(range(65)))])
    with pytest.raises(InvalidArgument, match="64 bits"):
        board.post("ok", [Message(tuple=(2**63,))])
    with pytest.raises(MessageTooLarge):
        board.post("ok", [Message(body=b"x" * (4 * 1024 * 1024 + 1))])
    with pytest.raises(InvalidArgument, match="max"):
        board.take("ok", max=-1)
    with pytest.raises(InvalidArgument, match="timeout"):
        board.take("ok", timeout=-1)
    with pytest.raises(InvalidArgument, match="messages"):
        board.post("ok", [])
    with pytest.raises(QueueNotFound):
        board.take("nope")
    assert board.get_queue("ok").unprocessed == 0
    assert [v.spec.name for v in board.list_queues()] == ["ok"]


def test_expired_messages_are_never_delivered(board: Board) -> None:
    board.create_queue(QueueSpec("x"))
    board.post("x", [Message(tuple=(1,), expires_at=1), Message(tuple=(2,))])
    assert [m.tuple for m in board.take("x", max=5)] == [(2,)]


def test_concurrent_posts_share_group_commits(board: Board) -> None:
    """Given 2,000 posts submitted at once, I expect every seq once, and fewer
    commits than posts (they were grouped)."""
    board.create_queue(QueueSpec("g"))
    before = board.stats().commits
    futs = [board.post_async("g", [Message(tuple=(i,))]) for i in range(2000)]
    seqs = sorted(s for f in futs for s in f.result(30))
    assert seqs == list(range(1, 2001))
    assert board.stats().commits - before < 1000


def test_every_blocked_read_sees_a_post_even_one_that_a_take_consumes(board: Board) -> None:
    """Given a blocked take and, after it, a blocked read for the same
    tuple, when the tuple is posted, I expect both to get it."""
    board.create_queue(QueueSpec("order"))
    t = board.take_async("order", timeout=10)
    time.sleep(0.05)
    r = board.read_async("order", timeout=10)
    time.sleep(0.05)
    post(board, "order", ("x",))
    assert t.result(5)[0].tuple == ("x",)
    assert r.result(5)[0].tuple == ("x",)


def test_release_answers_blocked_calls_with_nothing(board: Board) -> None:
    board.create_queue(QueueSpec("rel"))
    fut = board.take_async("rel", timeout=60)
    time.sleep(0.05)
    board.release().result(5)
    assert fut.result(5) == []
    post(board, "rel", ("x",))
    assert board.get_queue("rel").unprocessed == 1


def test_a_search_longer_than_its_budget_resumes_in_later_groups(board: Board) -> None:
    """Given more same-shaped items than one search examines (FIND_BUDGET),
    when I take and read by a range that only the last items match (no key
    narrows it: a scan), I expect the match found all the same, by searches
    resumed in later groups; and with a transient queue too."""
    for spec in (QueueSpec("q"), QueueSpec("t", transient=True)):
        board.create_queue(spec)
        n = FIND_BUDGET + 2_000
        for first in range(0, n, 5_000):
            post(board, spec.name, *[("item", i) for i in range(first, min(n, first + 5_000))])
        last = tpl("item", Range(n - 2, n))
        assert [m.tuple for m in board.read(spec.name, last, max=5)] == [
            ("item", n - 2),
            ("item", n - 1),
        ]
        [m] = board.take(spec.name, last)
        assert m.seq == n - 1
        assert board.take(spec.name, tpl("item", Range(n, n + 5))) == []
