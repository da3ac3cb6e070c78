"""The operation log's stories: a replicated board's store records what
each commit did, a standby's store applying those entries holds the same
bytes, a board without its log writes none, and the comparison that checks
a standby is shown to catch each way two boards can differ."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from msgboard.lmdbstore import DurableStore, Log, LogGap
from msgboard.lmdbstore.compare import differences
from msgboard.lmdbstore.layout import LOG_LAST_KEY, MAX_DBS
from msgboard.message import Message
from msgboard.spec import UNLIMITED, SelectorSpec
from tests.stores import S, make, post


def _logged(path: Path, log: Log) -> tuple[DurableStore, list[bytes]]:
    got: list[bytes] = []
    log.logged = lambda index, entry: got.append(entry)
    return DurableStore(path, log=log), got


def _work(s: DurableStore) -> None:
    """Every kind of write: queues, posts (keyed and scheduled), processing
    into history and away, restores, selectors, a deleted queue."""
    make(s, "a", max_history=UNLIMITED)
    make(s, "b")
    make(s, "gone")
    post(s, 5, name="a", now=50 * S, step=1)
    post(s, 3, name="b", now=60 * S, step=S)
    post(s, 2, name="gone", now=60 * S, step=S)
    with s.begin() as txn:
        txn.append("b", Message(tuple=("k", 1), key="key-1"), now=61 * S)
        txn.schedule("b", Message(body=b"later", not_before=99 * S), now=61 * S)
        txn.process("a", 1, now=70 * S, max_history=UNLIMITED)
        txn.process("b", 2, now=70 * S, max_history=0)
        m = txn.process("a", 2, now=70 * S, max_history=UNLIMITED)
    with s.begin() as txn:
        txn.restore("a", m)
        txn.new_selector_id()
        txn.put_selector("sel-1", SelectorSpec("a"))
        txn.delete_queue("gone")


def test_a_standby_applying_the_log_holds_the_same_bytes(tmp_path: Path) -> None:
    """Given a store with its log, when I write queues, messages and
    selectors and a standby's store applies each entry, I expect the two
    directories to hold the same keys and values, the log included, and
    the indexes to run 1, 2, 3... one per commit."""
    primary, entries = _logged(tmp_path / "p", Log())
    _work(primary)
    standby = DurableStore(tmp_path / "s", log=Log(), standby=True)
    try:
        assert standby.apply(entries[:3]) == 3
        for e in entries[3:]:
            standby.apply([e])
        assert primary.log_bounds() == (1, len(entries)) == standby.log_bounds()
        assert primary.entries(2, budget=1) == entries[1:2]
        with pytest.raises(LogGap):  # applied twice: not the next one
            standby.apply(entries[-1:])
        with pytest.raises(Exception, match="standby"):
            standby.begin()
    finally:
        primary.close()
        standby.close()
    assert differences(tmp_path / "p", tmp_path / "s", log=True) == []


def test_a_board_without_its_log_writes_none_and_leaves_a_hole(tmp_path: Path) -> None:
    """Given a store without a log, I expect no entry; given a directory
    that had a log, opened without it, I expect its entries dropped and the
    next index a hole, so a standby at the old end cannot continue."""
    s = DurableStore(tmp_path / "p")
    _work(s)
    assert s.log_bounds() == (2, 1) and s.entries(1) == []  # a hole at 1
    s.close()
    s, entries = _logged(tmp_path / "q", Log())
    make(s, "a")
    s.close()
    assert len(entries) == 1
    s = DurableStore(tmp_path / "q")
    assert s.log_bounds() == (3, 2)
    s.close()
    s, entries = _logged(tmp_path / "q", Log())
    post(s, 1, name="a", now=5 * S)
    assert s.log_bounds() == (3, 3)
    s.close()


def test_the_log_keeps_what_a_standby_still_needs_up_to_its_limit(tmp_path: Path) -> None:
    log = Log(keep=2, limit=5)
    s, _ = _logged(tmp_path / "p", log)
    make(s, "a")

    def commits(n: int) -> None:
        for _ in range(n):
            post(s, 1, name="a", now=5 * S)

    commits(3)
    assert s.log_bounds() == (3, 4)
    log.pin = 3  # a standby has 3: 3 (its Hello names it) on are kept
    commits(2)
    assert s.log_bounds() == (3, 6)
    commits(3)
    assert s.log_bounds() == (5, 9)  # past the limit: the standby must re-seed
    s.close()


def _mutate(path: Path, fn: object) -> None:
    env = lmdb.open(str(path), max_dbs=MAX_DBS)
    with env.begin(write=True) as txn:
        db = env.open_db(b"unprocessed", txn=txn)
        fn(txn, db)  # type: ignore[operator]
    env.close()


def test_the_comparison_catches_a_missing_an_extra_and_a_differing_record(
    tmp_path: Path,
) -> None:
    primary, entries = _logged(tmp_path / "p", Log())
    make(primary, "a")
    post(primary, 3, name="a", now=5 * S)
    primary.close()
    for case in ("missing", "extra", "differs"):
        standby = DurableStore(tmp_path / case, log=Log(), standby=True)
        standby.apply(entries)
        standby.close()
        assert differences(tmp_path / "p", tmp_path / case) == []
    key = next(iter(_keys(tmp_path / "p")))
    _mutate(tmp_path / "missing", lambda t, db: t.delete(key, db=db))
    other = key[:4] + b"\xff" * 8
    _mutate(tmp_path / "extra", lambda t, db: t.put(other, b"x", db=db))
    _mutate(tmp_path / "differs", lambda t, db: t.put(key, b"other", db=db))
    assert differences(tmp_path / "p", tmp_path / "missing") == [
        f"unprocessed: key {key.hex()} only in the first"
    ]
    extra = differences(tmp_path / "p", tmp_path / "extra")
    assert extra == [f"unprocessed: key {other.hex()} only in the second"]
    (line,) = differences(tmp_path / "p", tmp_path / "differs")
    assert line.startswith(f"unprocessed: key {key.hex()} differs")
    # The log's own keys are left out unless asked for.
    _mutate(tmp_path / "missing", lambda t, db: None)
    env = lmdb.open(str(tmp_path / "differs"), max_dbs=MAX_DBS)
    with env.begin(write=True) as txn:
        txn.put(LOG_LAST_KEY, b"\x00" * 16, db=env.open_db(b"meta", txn=txn))
    env.close()
    assert len(differences(tmp_path / "p", tmp_path / "differs")) == 1
    assert len(differences(tmp_path / "p", tmp_path / "differs", log=True)) == 2


def _keys(path: Path) -> list[bytes]:
    env = lmdb.open(str(path), max_dbs=MAX_DBS, readonly=True)
    with env.begin() as txn:
        keys = [bytes(k) for k, _ in txn.cursor(db=env.open_db(b"unprocessed", txn=txn))]
    env.close()
    return keys


def test_a_standby_keeps_its_own_last_entries(tmp_path: Path) -> None:
    """Given a standby's store keeping 2 entries, when it applies 5, I
    expect it to hold the last 2 and its data to match the primary's."""
    primary, entries = _logged(tmp_path / "p", Log())
    make(primary, "a")
    for _ in range(4):
        post(primary, 1, name="a", now=5 * S)
    primary.close()
    standby = DurableStore(tmp_path / "s", log=Log(keep=2), standby=True)
    assert standby.apply(entries) == 5
    assert standby.log_bounds() == (4, 5)
    assert standby.entries(4) == entries[3:]
    standby.close()
    assert differences(tmp_path / "p", tmp_path / "s") == []
