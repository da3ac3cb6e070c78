"""The store contract, as stories, run on both backends (LMDB and memory).

The LMDB store's own stories (what survives a reopen, map growth, the key
layout and what opening reads) are in ``test_durable.py``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.associative import ANY, Pattern, template
from msgboard.errors import StoreError
from msgboard.lmdbstore import Counts, DurableStore, MemoryStore, QueueInfo, Store
from msgboard.message import Exit, ExitKind, Message, Section
from msgboard.spec import UNLIMITED, OverflowPolicy, QueueSpec, SelectorSpec
from tests.stores import H, S, U, make, post, seqs


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = DurableStore(tmp_path / "board") if request.param == "lmdb" else MemoryStore()
    yield s
    s.close()


# -- queues ------------------------------------------------------------------


def test_create_find_and_list_queues(store: Store) -> None:
    """Given queues created out of order, when I look them up, I expect each
    with its spec and creation time, None for an unknown name, the list
    ordered by name, and a second create of a taken name refused."""
    spec = QueueSpec("jobs", max_unprocessed=5, overflow=OverflowPolicy.DROP_NEW, max_history=3)
    with store.begin() as txn:
        txn.create_queue(spec, created_at=42)
        txn.create_queue(QueueSpec("alpha"), created_at=43)
        txn.create_queue(QueueSpec("zeta"), created_at=44)
        assert txn.queue("jobs") == QueueInfo(spec, 42)  # a txn sees its own writes
    with store.begin() as txn:
        assert txn.queue("jobs") == QueueInfo(spec, 42)
        assert txn.queue("nope") is None
        assert [i.spec.name for i in txn.queues()] == ["alpha", "jobs", "zeta"]
        with pytest.raises(KeyError):
            txn.create_queue(QueueSpec("jobs"), created_at=45)
        assert txn.counts("jobs") == Counts(0, 0, 1)


def test_delete_queue_removes_it_and_a_new_one_starts_at_seq_1(store: Store) -> None:
    """Given a queue with messages in both sections, when I delete it, I
    expect it gone with its messages (a second delete says False), and a new
    queue of the same name to start again at seq 1, empty."""
    make(store, max_history=UNLIMITED)
    post(store, 3)
    with store.begin() as txn:
        txn.process("q", 1, now=11 * S, max_history=UNLIMITED)
    with store.begin() as txn:
        assert txn.delete_queue("q") is True
        assert txn.delete_queue("q") is False
        assert txn.queue("q") is None
        with pytest.raises(KeyError):
            txn.counts("q")
    make(store)
    with store.begin() as txn:
        assert txn.counts("q") == Counts(0, 0, 1)
        assert list(txn.scan("q")) == []
        assert txn.fetch("q", 2) is None
        assert txn.seq_at("q", 0) is None
        assert txn.append("q", Message(), now=12 * S).seq == 1


def test_delete_queue_forgets_its_due_times_and_key_ends(store: Store) -> None:
    """Given a queue with a message scheduled at 100 s and a key whose
    window ends at 50 s, when I delete it (a delete that fails first
    changes nothing) and make it again with a message of the same seq due
    in an hour, I expect only the hour's due time and no key end left."""
    with store.begin() as txn:
        txn.create_queue(QueueSpec("q", dedup_window=40 * S), created_at=1)
        txn.append("q", Message(key="k"), now=10 * S)
        txn.process("q", 1, now=10 * S, max_history=0)
        assert txn.schedule("q", Message(not_before=100 * S), now=10 * S).seq == 2
    with pytest.raises(RuntimeError), store.begin() as txn:
        txn.delete_queue("q")
        raise RuntimeError("boom")
    with store.begin() as txn:
        assert txn.next_due() == 100 * S
        assert txn.due(200 * S, 10) == ([("q", 2, 100 * S)], 0)
        assert txn.delete_queue("q") is True
    with store.begin() as txn:
        assert txn.next_due() == 0
        assert txn.due(200 * S, 10) == ([], 0)
        assert txn.sweep_keys(200 * S, 10) == (0, 0)
        txn.create_queue(QueueSpec("q"), created_at=2)
        txn.append("q", Message(), now=10 * S)
        assert txn.schedule("q", Message(not_before=3600 * S), now=10 * S).seq == 2
    with store.begin() as txn:
        assert txn.due(200 * S, 10) == ([], 3600 * S)
        assert txn.next_due() == 3600 * S


def test_unknown_queue_is_a_key_error(store: Store) -> None:
    """Given no queue, when I use one, I expect KeyError (the engine checks first)."""
    with store.begin() as txn:
        for call in (
            lambda: txn.append("nope", Message(), 1),
            lambda: txn.counts("nope"),
            lambda: txn.fetch("nope", 1),
            lambda: txn.process("nope", 1, 1, 0),
            lambda: txn.scan("nope"),
            lambda: txn.seq_at("nope", 1),
        ):
            with pytest.raises(KeyError):
                call()


# -- append and fetch --------------------------------------------------------


def test_append_assigns_seqs_and_keeps_posted_at_monotonic(store: Store) -> None:
    """Given a queue, when I append with a clock that goes back, I expect seqs
    1, 2, 3 and posted_at never lower than the one before."""
    make(store)
    with store.begin() as txn:
        a = txn.append("q", Message(tuple=("a",)), now=5 * S)
        b = txn.append("q", Message(tuple=("b",)), now=4 * S)
    with store.begin() as txn:
        c = txn.append("q", Message(tuple=("c",)), now=6 * S)
    assert seqs([a, b, c]) == [1, 2, 3]
    assert [m.posted_at for m in (a, b, c)] == [5 * S, 5 * S, 6 * S]
    assert {(m.queue, m.section, m.processed_at) for m in (a, b, c)} == {("q", U, 0)}


def test_append_stores_the_whole_envelope(store: Store) -> None:
    """Given a message with every envelope field set, when I append and fetch
    it, I expect it back as stored."""
    make(store)
    msg = Message(
        tuple=(None, True, -7, 1.5, "s", b"\x00b"),
        address="rec.pets.cats",
        priority=3,
        headers={"color": "red"},
        reply_to="replies",
        expires_at=99 * S,
        content_type="text/plain",
        body=b"hello",
        delivery_count=2,
    )
    with store.begin() as txn:
        stored = txn.append("q", msg, now=7 * S)
    assert stored == dataclasses.replace(msg, queue="q", seq=1, posted_at=7 * S)
    with store.begin() as txn:
        assert txn.fetch("q", 1) == stored
        assert txn.fetch("q", 2) is None
        assert txn.fetch("q", 0) is None


# -- process and restore -----------------------------------------------------


def test_process_with_no_history_drops_the_message(store: Store) -> None:
    """Given max_history 0, when I process a message, I expect it returned as
    processed, then found in neither section."""
    make(store)
    post(store, 2)
    with store.begin() as txn:
        m = txn.process("q", 1, now=20 * S, max_history=0)
        assert (m.seq, m.section, m.processed_at, m.delivery_count) == (1, H, 20 * S, 1)
        assert m.posted_at == 10 * S and m.tuple == (0,)
    with store.begin() as txn:
        assert txn.fetch("q", 1) is None
        assert txn.counts("q") == Counts(1, 0, 3)
        with pytest.raises(KeyError):
            txn.process("q", 1, now=21 * S, max_history=0)


def test_process_keeps_bounded_history_dropping_the_oldest(store: Store) -> None:
    """Given max_history 2, when I process four messages, I expect the last
    two in history, delivery_count one higher and processed_at set."""
    make(store, max_history=2)
    post(store, 5)
    with store.begin() as txn:
        for seq in (2, 1, 4, 3):
            txn.process("q", seq, now=(20 + seq) * S, max_history=2)
    with store.begin() as txn:
        history = list(txn.scan("q", H))
        assert seqs(history) == [3, 4]
        assert [(m.processed_at, m.delivery_count) for m in history] == [(23 * S, 1), (24 * S, 1)]
        assert txn.counts("q") == Counts(1, 2, 6)
        assert txn.fetch("q", 1) is None
        fetched = txn.fetch("q", 4)
        assert fetched is not None and fetched.section is H


def test_trim_drops_the_oldest_history_and_frees_their_keys(store: Store) -> None:
    """Given four history messages, two of them keyed, when I trim three,
    I expect the newest left, the counts down by three, the keys of the
    trimmed ones ended (no window: free at once) and an abort undoing it."""
    with store.begin() as txn:
        txn.create_queue(QueueSpec("q", max_history=UNLIMITED, dedup_window=0), created_at=1)
        for i in range(4):
            txn.append("q", Message(tuple=(i,), key=f"k{i}" if i % 2 else ""), 10 * S)
        txn.append("q", Message(tuple=(9,)), 10 * S)
    with store.begin() as txn:
        for seq in (1, 2, 3, 4):
            txn.process("q", seq, now=20 * S, max_history=UNLIMITED)
    with store.begin() as txn:
        assert txn.trim("q", 3, 30 * S) == 3
        txn.abort()
    with store.begin() as txn:
        assert txn.counts("q") == Counts(1, 4, 6)
        assert txn.keyed("q", "k1", 30 * S) == 2
        assert txn.trim("q", 3, 30 * S) == 3
    with store.begin() as txn:
        assert seqs(txn.scan("q", H)) == [4]
        assert txn.counts("q") == Counts(1, 1, 6)
        assert txn.keyed("q", "k1", 30 * S) == 0
        assert txn.keyed("q", "k3", 30 * S) == 4
        assert txn.trim("q", 5, 30 * S) == 1
        assert txn.trim("q", 5, 30 * S) == 0
        with pytest.raises(KeyError):
            txn.trim("nope", 1, 30 * S)


def test_process_with_unlimited_history_keeps_everything(store: Store) -> None:
    """Given max_history UNLIMITED, when I process every message, I expect them
    all in history, in seq order."""
    make(store, max_history=UNLIMITED)
    post(store, 50)
    with store.begin() as txn:
        for seq in range(1, 51):
            txn.process("q", seq, now=30 * S, max_history=UNLIMITED)
    with store.begin() as txn:
        assert txn.counts("q") == Counts(0, 50, 51)
        assert seqs(txn.scan("q", H)) == list(range(1, 51))


def test_process_given_the_known_message_writes_the_same_history(store: Store) -> None:
    """Given two equal messages with a tuple, an address, headers and an
    expiry, when I process one by seq alone and the other with the message
    the store holds (``known``, which lets it skip a read), I expect the same
    answer and the same history record, index entries gone for both."""
    make(store, max_history=UNLIMITED)
    full = Message(
        tuple=("job", 7, 2.5, b"\x00", None, True),
        address="a.b",
        priority=3,
        headers={"k": "v"},
        reply_to="r",
        expires_at=99 * S,
        content_type="text/plain",
        body=b"body",
    )
    with store.begin() as txn:
        one = txn.append("q", full, now=10 * S)
        two = txn.append("q", full, now=10 * S)
    with store.begin() as txn:
        by_seq = txn.process("q", one.seq, now=20 * S, max_history=UNLIMITED)
        by_known = txn.process("q", two.seq, now=20 * S, max_history=UNLIMITED, known=two)
        jobs = Pattern(templates=(template("job", int, ANY, ANY, ANY, ANY),))
        assert list(txn.find("q", jobs)) == []
    with store.begin() as txn:
        kept = list(txn.scan("q", H))
    assert [dataclasses.replace(m, seq=0) for m in kept] == [
        dataclasses.replace(by_seq, seq=0),
        dataclasses.replace(by_known, seq=0),
    ]
    assert kept[1].processed_at == 20 * S and kept[1].delivery_count == 1
    assert kept[1].tuple == full.tuple and kept[1].headers == {"k": "v"}


def test_restore_puts_a_message_back_under_its_seq(store: Store) -> None:
    """Given a message processed into history and one dropped (max_history 0),
    when I restore them, I expect both unprocessed again, under their own
    seqs, keeping delivery_count, and history without them."""
    make(store, max_history=5)
    post(store, 3)
    with store.begin() as txn:
        kept = txn.process("q", 1, now=20 * S, max_history=5)
        dropped = txn.process("q", 2, now=20 * S, max_history=0)
    with store.begin() as txn:
        txn.restore("q", kept)
        txn.restore("q", dropped)
    with store.begin() as txn:
        assert txn.counts("q") == Counts(3, 0, 4)
        back = list(txn.scan("q", U))
        assert seqs(back) == [1, 2, 3]
        assert [(m.section, m.delivery_count, m.processed_at) for m in back[:2]] == [(U, 1, 0)] * 2
        assert back[0].posted_at == 10 * S
        assert list(txn.scan("q", H)) == []
        again = txn.process("q", 1, now=21 * S, max_history=5)
        assert again.delivery_count == 2


# -- scan, seq_at, counts ----------------------------------------------------


@pytest.fixture
def mixed(store: Store) -> Store:
    """Seqs 1..10; the odd ones processed into history."""
    make(store, max_history=UNLIMITED)
    post(store, 10)
    with store.begin() as txn:
        for seq in range(1, 11, 2):
            txn.process("q", seq, now=20 * S, max_history=UNLIMITED)
    return store


def test_scan_one_section_both_directions(mixed: Store) -> None:
    """Given odd seqs in history and even ones waiting, when I scan one section
    forward or back, from a start seq or not, I expect that section's seqs in
    order, the start included when present."""
    with mixed.begin() as txn:
        assert seqs(txn.scan("q", U)) == [2, 4, 6, 8, 10]
        assert seqs(txn.scan("q", H)) == [1, 3, 5, 7, 9]
        assert seqs(txn.scan("q", U, start=4)) == [4, 6, 8, 10]
        assert seqs(txn.scan("q", U, start=5)) == [6, 8, 10]
        assert seqs(txn.scan("q", U, reverse=True)) == [10, 8, 6, 4, 2]
        assert seqs(txn.scan("q", H, start=7, reverse=True)) == [7, 5, 3, 1]
        assert seqs(txn.scan("q", H, start=6, reverse=True)) == [5, 3, 1]
        assert seqs(txn.scan("q", H, start=100, reverse=True)) == [9, 7, 5, 3, 1]
        assert seqs(txn.scan("q", U, start=11)) == []
        assert seqs(txn.scan("q", U, start=1, reverse=True)) == []
        assert {m.section for m in txn.scan("q", H)} == {H}


def test_scan_both_sections_merged(mixed: Store) -> None:
    """Given both sections filled, when I scan without a section, I expect
    every message merged by seq, each with its section, in both directions;
    and other queues' messages never leak in."""
    make(mixed, "a")
    make(mixed, "z")
    post(mixed, 3, name="a")
    post(mixed, 3, name="z")
    with mixed.begin() as txn:
        every = list(txn.scan("q"))
        assert seqs(every) == list(range(1, 11))
        assert [m.section for m in every[:3]] == [H, U, H]
        assert seqs(txn.scan("q", reverse=True)) == list(range(10, 0, -1))
        assert seqs(txn.scan("q", start=4)) == list(range(4, 11))
        assert seqs(txn.scan("q", start=4, reverse=True)) == [4, 3, 2, 1]
        lazy = txn.scan("q")
        assert next(lazy).seq == 1


def test_seq_at_finds_the_first_message_posted_at_or_after_a_time(store: Store) -> None:
    """Given messages posted over several seconds, several in a second, some
    processed and some dropped, when I ask for the seq at various times, I
    expect what a full scan would say."""
    make(store, max_history=3)
    rng = random.Random(7)
    now = 100 * S
    with store.begin() as txn:
        for _ in range(300):
            now += rng.choice([0, 1, 1000, 300_000, 2 * S, 5 * S])
            txn.append("q", Message(), now)
    with store.begin() as txn:
        for seq in rng.sample(range(1, 301), 150):
            txn.process("q", seq, now=now, max_history=rng.choice([0, 3]))
    with store.begin() as txn:
        every = list(txn.scan("q"))
        times = sorted({m.posted_at for m in every})
        probes = [0, 50 * S, now, now + 1, now + 10 * S]
        probes += [t + d for t in rng.sample(times, 60) for d in (-1, 0, 1, S)]
        for t in probes:
            expect = next((m.seq for m in every if m.posted_at >= t), None)
            assert txn.seq_at("q", t) == expect, t


def test_counts_follow_every_verb(store: Store) -> None:
    """Given a queue, when I append, process and restore, I expect counts to
    follow in the same transaction and after commit."""
    make(store, max_history=1)
    with store.begin() as txn:
        assert txn.counts("q") == Counts(0, 0, 1)
        txn.append("q", Message(), 1)
        txn.append("q", Message(), 2)
        m = txn.process("q", 1, 3, max_history=1)
        assert txn.counts("q") == Counts(1, 1, 3)
        txn.process("q", 2, 3, max_history=1)
        assert txn.counts("q") == Counts(0, 1, 3)
        txn.restore("q", m)  # seq 1, already trimmed from history by seq 2
    with store.begin() as txn:
        assert txn.counts("q") == Counts(1, 1, 3)


# -- transactions ------------------------------------------------------------


def test_abort_leaves_no_trace(store: Store) -> None:
    """Given a queue with messages, when a transaction that created a queue,
    appended, processed, restored and deleted fails, I expect everything as
    before: queues, messages, counts, seqs and posted_at."""
    make(store, max_history=2)
    post(store, 3)
    with store.begin() as txn:
        kept = txn.process("q", 1, now=20 * S, max_history=2)
    before = store.info().commits
    with pytest.raises(RuntimeError), store.begin() as txn:
        txn.create_queue(QueueSpec("new"), created_at=2)
        txn.append("new", Message(), now=30 * S)
        txn.append("q", Message(), now=90 * S)
        txn.process("q", 2, now=90 * S, max_history=0)
        txn.restore("q", kept)
        txn.process("q", 3, now=90 * S, max_history=2)
        txn.delete_queue("q")
        raise RuntimeError("boom")
    assert store.info().commits == before
    with store.begin() as txn:
        assert [i.spec.name for i in txn.queues()] == ["q"]
        assert txn.counts("q") == Counts(2, 1, 4)
        assert [(m.seq, m.section) for m in txn.scan("q")] == [(1, H), (2, U), (3, U)]
        later = txn.append("q", Message(), now=11 * S)
        assert (later.seq, later.posted_at) == (4, 11 * S)
        txn.abort()
    with store.begin() as txn:
        assert txn.counts("q") == Counts(2, 1, 4)


def test_one_transaction_at_a_time(store: Store) -> None:
    """Given an open transaction, when I begin another, I expect StoreError;
    after it ends, I can begin again. A read-only transaction is no commit."""
    make(store)
    before = store.info().commits
    txn = store.begin()
    with pytest.raises(StoreError):
        store.begin()
    txn.commit()
    assert store.info().commits == before
    with store.begin() as again:
        again.append("q", Message(), 1)
    assert store.info().commits == before + 1


def test_info(store: Store) -> None:
    """Given a store, I expect its info to say what kind it is."""
    info = store.info()
    assert info.durable is store.durable
    if store.durable:
        assert info.sync == "fsync" and info.map_used <= info.map_size
    else:
        assert (info.sync, info.map_size, info.map_used) == ("memory", 0, 0)


def test_selectors_are_stored_and_rolled_back(store: Store) -> None:
    """Given stored selectors, when I put, replace and delete them, I expect
    the list to follow in id order, ids never handed out twice, and an aborted
    transaction to leave no trace."""
    with store.begin() as txn:
        a, b = txn.new_selector_id(), txn.new_selector_id()
        assert a < b
        txn.put_selector("sel-2", SelectorSpec("two"))
        txn.put_selector("sel-1", SelectorSpec("one"))
    with store.begin() as txn:
        txn.put_selector("sel-1", SelectorSpec("uno"))
        assert txn.delete_selector("sel-2")
        assert not txn.delete_selector("sel-9")
        assert txn.new_selector_id() > b
        txn.abort()
    with store.begin() as txn:
        assert txn.selectors() == [("sel-1", SelectorSpec("one")), ("sel-2", SelectorSpec("two"))]
        assert txn.new_selector_id() == b + 1
        assert txn.delete_selector("sel-2")
    with store.begin() as txn:
        assert txn.selectors() == [("sel-1", SelectorSpec("one"))]


def test_a_history_record_keeps_how_it_left_and_one_without_reads_as_not_recorded(
    store: Store,
) -> None:
    """Given two messages processed, one with an exit and one without (as a
    record written before exits were), I expect history to give back the
    exit and None; given back (restore), the message waits with no exit."""
    make(store, max_history=UNLIMITED)
    post(store, 3)
    how = Exit(ExitKind.DEAD_LETTERED, "rejected", "dlq")
    with store.begin() as txn:
        done = txn.process("q", 1, now=11 * S, max_history=UNLIMITED, how=how)
        txn.process("q", 2, now=11 * S, max_history=UNLIMITED)
        taken = txn.process("q", 3, now=11 * S, max_history=UNLIMITED, how=Exit(ExitKind.TAKEN))
        txn.restore("q", taken)
    assert done.exit == how
    with store.begin() as txn:
        assert [m.exit for m in txn.scan("q", Section.HISTORY)] == [how, None]
        [back] = list(txn.scan("q", Section.UNPROCESSED))
        assert (back.seq, back.exit) == (3, None)
