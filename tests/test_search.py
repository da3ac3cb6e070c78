"""Stories of ``Txn.find``: indexed search of a queue's waiting messages, on
both stores. The index must find exactly what a scan finds, whatever was
appended, taken, restored, aborted or deleted, and a search that runs out
of budget must resume where it stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgboard.associative import ANY, EVERYTHING, AddressPattern, Pattern, Range, template
from msgboard.associative.keys import message_keys
from msgboard.errors import StoreError
from msgboard.lmdbstore import FIND_BUDGET, DurableStore, MemoryStore, Store
from msgboard.lmdbstore.search import MAX_ALTERNATIVES, RANGE_KEYS
from msgboard.message import Message, Section
from msgboard.spec import UNLIMITED, QueueSpec
from tests import damage
from tests.strategies import addresses, patterns, tuples

U = Section.UNPROCESSED


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = DurableStore(tmp_path / "board") if request.param == "lmdb" else MemoryStore()
    yield s
    s.close()


def make(store: Store, name: str = "q") -> None:
    with store.begin() as txn:
        txn.create_queue(QueueSpec(name, max_history=UNLIMITED), created_at=1)


def post(store: Store, msgs: list[Message], name: str = "q") -> list[Message]:
    with store.begin() as txn:
        return [txn.append(name, m, 1) for m in msgs]


def found(store: Store, pattern: Pattern, name: str = "q", budget: int = FIND_BUDGET) -> list[int]:
    with store.begin() as txn:
        return [m.seq for m in txn.find(name, pattern, budget=budget)]


def brute(store: Store, pattern: Pattern, name: str = "q") -> list[int]:
    with store.begin() as txn:
        return [m.seq for m in txn.scan(name, U) if pattern.matches(m)]


def index_entries(store: Store, name: str) -> int:
    """How many (key, seq) pairs the queue's index holds, read from inside."""
    if isinstance(store, MemoryStore):
        q = store._queues.get(name)
        return 0 if q is None else sum(len(seqs) for seqs in q.index.values())
    assert isinstance(store, DurableStore)
    with store._env.begin() as txn:
        queue = store._cache.queues.get(name)
        if queue is None:
            return 0
        return sum(1 for k, _ in txn.cursor(store._dbs.index) if k[:4] == queue.prefix)


def expected_entries(store: Store, name: str) -> int:
    with store.begin() as txn:
        return sum(len(message_keys(m.address, m.tuple)) for m in txn.scan(name, U))


# -- the property -------------------------------------------------------------


# One store of each kind for the whole module: hypothesis runs many examples.
@pytest.fixture(scope="module", params=["lmdb", "memory"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    s: Store = (
        DurableStore(tmp_path_factory.mktemp("search") / "board", sync=False)
        if request.param == "lmdb"
        else MemoryStore()
    )
    yield s
    s.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("post"), addresses, tuples),
        st.tuples(st.just("aborted post"), addresses, tuples),
        st.tuples(st.just("take"), st.integers(0, 30), st.none()),
        st.tuples(st.just("restore"), st.integers(0, 30), st.none()),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=250, database=None, deadline=None)
@given(ops, st.lists(patterns(), min_size=1, max_size=4), st.integers(1, 5))
def test_find_returns_exactly_what_a_scan_returns(
    shared: Store,
    script: list[tuple[str, object, object]],
    pats: list[Pattern],
    budget: int,
) -> None:
    """Given random posts, takes, restores and aborted posts on a fresh queue,
    when I find by random patterns, I expect exactly the seqs a full scan
    matches, in order; the same when I resume small-budget searches; the
    index holding exactly each waiting message's keys; and no index left
    once the queue is deleted."""
    make(shared)
    try:
        taken: list[Message] = []
        for op, a, b in script:
            if op == "post":
                post(shared, [Message(tuple=b, address=a)])  # type: ignore[arg-type]
            elif op == "aborted post":
                with pytest.raises(RuntimeError), shared.begin() as txn:
                    txn.append("q", Message(tuple=b, address=a), 1)  # type: ignore[arg-type]
                    raise RuntimeError("abort")
            else:
                with shared.begin() as txn:
                    waiting = list(txn.scan("q", U))
                    if op == "take" and waiting:
                        m = waiting[a % len(waiting)]  # type: ignore[operator]
                        taken.append(txn.process("q", m.seq, 2, UNLIMITED))
                    elif op == "restore" and taken:
                        txn.restore("q", taken.pop(a % len(taken)))  # type: ignore[operator]
        assert index_entries(shared, "q") == expected_entries(shared, "q")
        for p in pats:
            want = brute(shared, p)
            assert found(shared, p) == want
            got: list[int] = []
            start: int | None = None
            with shared.begin() as txn:
                while True:
                    search = txn.find("q", p, start, budget=budget)
                    got += [m.seq for m in search]
                    assert search.examined <= budget
                    if not search.next_seq:
                        break
                    start = search.next_seq
            assert got == want
    finally:
        with shared.begin() as txn:
            txn.delete_queue("q")
    assert index_entries(shared, "q") == 0


# -- which index answers --------------------------------------------------


def items(n: int) -> list[Message]:
    return [Message(tuple=("item", i, "payload"), address=f"item.{i % 3}") for i in range(n)]


def test_an_actual_field_is_found_through_its_key(store: Store) -> None:
    """Given 2,000 items and two rare tuples among them, when I find by the
    rare actual, I expect just the rare ones, examined alone."""
    make(store)
    post(store, items(1000))
    post(store, [Message(tuple=("rare", 1, "x")), Message(tuple=("rare", 2, "y"))])
    post(store, items(1000))
    with store.begin() as txn:
        search = txn.find("q", Pattern(templates=(template("rare", int, str),)))
        assert [m.seq for m in search] == [1001, 1002]
        assert (search.plan, search.examined) == ("template", 2)
        # The most selective actual wins: position 1 holds 7 only twice.
        search = txn.find("q", Pattern(templates=(template("item", 7, ANY),)))
        assert [m.seq for m in search] == [8, 1010]
        assert (search.plan, search.examined) == ("template", 2)


def test_formals_use_the_shape(store: Store) -> None:
    """Given items and three tuples of another shape, when I find by formals
    (or a range, whose shapes are int or float), I expect the shape key."""
    make(store)
    post(store, items(500))
    post(store, [Message(tuple=("x", 1.5)), Message(tuple=("x", 2)), Message(tuple=(b"x", 2))])
    with store.begin() as txn:
        search = txn.find("q", Pattern(templates=(template(str, float),)))
        assert ([m.seq for m in search], search.plan, search.examined) == ([501], "template", 1)
        search = txn.find("q", Pattern(templates=(template(str, Range(0, 9)),)))
        assert ([m.seq for m in search], search.examined) == ([501, 502], 2)
        search = txn.find("q", Pattern(templates=(template(ANY, ANY),)))
        assert ([m.seq for m in search], search.examined) == ([501, 502, 503], 3)


def test_addresses_eq_and_topics_with_a_literal_start(store: Store) -> None:
    """Given items on item.0/1/2 and a few on rec.pets.*, when I find by eq
    or by a topic, I expect the address index and only its candidates."""
    make(store)
    post(store, items(300))
    post(store, [Message(address=a) for a in ("rec.pets.cats", "rec.pets", "rec.pets.dogs.x")])
    with store.begin() as txn:
        search = txn.find("q", Pattern(AddressPattern.eq("rec.pets")))
        assert ([m.seq for m in search], search.plan, search.examined) == ([302], "address", 1)
        search = txn.find("q", Pattern(AddressPattern.topic("rec.pets.*")))
        assert ([m.seq for m in search], search.plan, search.examined) == ([301], "address", 1)
        search = txn.find("q", Pattern(AddressPattern.topic("rec.#")))
        assert ([m.seq for m in search], search.examined) == ([301, 302, 303], 3)
        # No literal start, but few distinct addresses: each key is tested.
        search = txn.find("q", Pattern(AddressPattern.topic("#.cats")))
        assert ([m.seq for m in search], search.examined) == ([301], 1)


def test_alternatives_are_a_union_in_seq_order(store: Store) -> None:
    """Given items, when I find by two templates whose matches interleave and
    overlap, I expect each match once, in seq order."""
    make(store)
    post(store, items(100))
    p = Pattern(templates=(template("item", 5, str), template(str, 5, "payload")))
    with store.begin() as txn:
        search = txn.find("q", p)
        assert [m.seq for m in search] == [6]
        p = Pattern(templates=(template("item", 70, str), template("item", 3, str)))
        assert [m.seq for m in txn.find("q", p)] == [4, 71]


def test_too_many_alternatives_are_not_planned_through_the_index(store: Store) -> None:
    """Given items, when I find by more alternative templates than the
    planner takes, I expect a scan that still finds exactly the matches."""
    make(store)
    post(store, items(100))
    alts = tuple(template("item", i, str) for i in range(MAX_ALTERNATIVES + 1))
    with store.begin() as txn:
        search = txn.find("q", Pattern(templates=alts))
        assert [m.seq for m in search] == list(range(1, MAX_ALTERNATIVES + 2))
        assert search.plan == "scan"
        search = txn.find("q", Pattern(templates=alts[:MAX_ALTERNATIVES]))
        assert len(list(search)) == MAX_ALTERNATIVES and search.plan == "template"


def test_without_a_selective_key_a_bounded_scan_resumes(store: Store) -> None:
    """Given 1,000 items, when I find with a pattern no key narrows and a
    budget of 300, I expect a scan that stops with next_seq, and searches
    resumed from it that find the rest."""
    make(store)
    post(store, items(1000))
    p = Pattern(templates=(template("item", Range(900, 2000), str),))
    with store.begin() as txn:
        search = txn.find("q", p, budget=300)
        assert (list(search), search.plan, search.next_seq) == ([], "scan", 301)
        assert search.examined == 300
        search = txn.find("q", p, 901, budget=300)
        assert [m.seq for m in search][:2] == [901, 902] and search.next_seq == 0


def test_too_many_distinct_addresses_fall_back_to_a_scan(store: Store) -> None:
    """Given more distinct addresses than a key range may span, when I find
    by a topic with no literal start, I expect a scan (still exact)."""
    make(store)
    post(store, [Message(address=f"a{i}.cats") for i in range(RANGE_KEYS + 1)])
    with store.begin() as txn:
        search = txn.find("q", Pattern(AddressPattern.topic("#.cats")))
        assert len(list(search)) == RANGE_KEYS + 1 and search.plan == "scan"
        search = txn.find("q", EVERYTHING, 5)
        assert next(search).seq == 5 and search.plan == "scan"


def test_find_on_an_unknown_queue_is_a_key_error(store: Store) -> None:
    with store.begin() as txn, pytest.raises(KeyError):
        txn.find("nope", EVERYTHING)


# -- schemas (LMDB) ---------------------------------------------------------


def test_a_schema_1_directory_is_indexed_once_when_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a schema-1 board (no index, no checksums), when I open it, I
    expect one log line, the index built, and search exact; then schema 4 on
    disk."""
    path = tmp_path / "board"
    s = DurableStore(path)
    make(s)
    post(s, items(50))
    with s.begin() as txn:
        txn.process("q", 3, 2, UNLIMITED)
    s.close()
    damage.downgrade(path, b"1")
    with caplog.at_level(logging.WARNING, logger="msgboard.lmdbstore.upgrade"):
        s = DurableStore(path)
    try:
        assert "upgraded schema 1 to 4: indexed 49 unprocessed messages" in caplog.text
        assert index_entries(s, "q") == expected_entries(s, "q") == 49 * 5
        p = Pattern(templates=(template("item", 3, str), template("item", 2, str)))
        assert found(s, p) == [4]  # item 2 (seq 3) was taken
    finally:
        s.close()
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin() as txn:
        assert txn.get(b"schema", db=env.open_db(b"meta", txn=txn)) == b"4"
    env.close()


def test_an_unknown_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "board"
    DurableStore(path).close()
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"schema", b"9", db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(StoreError, match=r"schema b'9', this version reads b'4'"):
        DurableStore(path)


def test_the_index_survives_a_reopen(tmp_path: Path) -> None:
    """Given an indexed board, when I reopen it, I expect the same answers."""
    path = tmp_path / "board"
    s = DurableStore(path)
    make(s)
    post(s, items(100))
    s.close()
    s = DurableStore(path)
    try:
        with s.begin() as txn:
            search = txn.find("q", Pattern(templates=(template("item", 42, str),)))
            assert [m.seq for m in search] == [43] and search.examined == 1
    finally:
        s.close()
