"""The LMDB store's own stories: what survives a reopen, the key layout (a
Spark reader depends on it), map growth, an lmdb error, what opening reads
and the disk reserve. The contract both stores keep is in ``test_store.py``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import google_crc32c
import lmdb
import pytest

from msgboard.errors import DataFileDamaged, StoreError, StoreFull
from msgboard.lmdbstore import Counts, DurableStore, MapFull
from msgboard.message import Message
from msgboard.spec import UNLIMITED, QueueSpec, SelectorSpec
from msgboard.v1 import board_pb2 as pb
from tests import damage
from tests.stores import S, make, post


def test_selectors_and_their_ids_survive_reopen(tmp_path: Path) -> None:
    s = DurableStore(tmp_path / "board")
    with s.begin() as txn:
        n = txn.new_selector_id()
        txn.put_selector("sel-1", SelectorSpec("one"))
    s.close()
    s = DurableStore(tmp_path / "board")
    try:
        with s.begin() as txn:
            assert txn.selectors() == [("sel-1", SelectorSpec("one"))]
            assert txn.new_selector_id() == n + 1
    finally:
        s.close()


def test_reopen_restores_everything(tmp_path: Path) -> None:
    """Given a board with queues, messages in both sections and the last
    messages processed and dropped, when I close and reopen it, I expect the
    same queues, messages and counts, and seqs and posted_at going on from
    where they were, never reused."""
    path = tmp_path / "board"
    s = DurableStore(path)
    make(s, "a", max_history=UNLIMITED)
    make(s, "b")
    make(s, "gone")
    post(s, 4, name="a", now=50 * S, step=1)
    post(s, 3, name="b", now=60 * S, step=S)
    with s.begin() as txn:
        txn.process("a", 1, now=70 * S, max_history=UNLIMITED)
        txn.process("b", 2, now=70 * S, max_history=0)
        txn.process("b", 3, now=70 * S, max_history=0)
        txn.delete_queue("gone")
        before = [list(txn.scan(n)) for n in ("a", "b")]
    s.close()
    s = DurableStore(path)
    try:
        with s.begin() as txn:
            assert [i.spec.name for i in txn.queues()] == ["a", "b"]
            assert [list(txn.scan(n)) for n in ("a", "b")] == before
            assert txn.counts("a") == Counts(3, 1, 5)
            assert txn.counts("b") == Counts(1, 0, 4)
            # The clock went back, and the latest record was dropped: posted_at
            # still does not go below the second of the last post.
            b = txn.append("b", Message(), now=1 * S)
            assert (b.seq, b.posted_at) == (4, 62 * S)
            assert txn.seq_at("b", 61 * S) == 4
            assert txn.append("a", Message(), now=80 * S).seq == 5
            txn.create_queue(QueueSpec("gone"), created_at=2)
            assert txn.counts("gone") == Counts(0, 0, 1)
    finally:
        s.close()
    s = DurableStore(path)
    try:
        with s.begin() as txn:
            assert [i.spec.name for i in txn.queues()] == ["a", "b", "gone"]
            assert txn.counts("b") == Counts(2, 0, 5)
    finally:
        s.close()


def test_key_layout(tmp_path: Path) -> None:
    """Given a board with one message processed into history, when I read the
    LMDB files directly, I expect the documented layout (a Spark reader
    depends on it)."""
    path = tmp_path / "board"
    s = DurableStore(path, sync=False)
    assert s.info().sync == "weaker-no-fsync"
    make(s, "jobs", max_history=UNLIMITED)
    post(s, 2, name="jobs", now=1_700_000_000 * S)
    with s.begin() as txn:
        txn.process("jobs", 1, now=1_700_000_001 * S, max_history=UNLIMITED)
    s.close()
    env = lmdb.open(str(path), max_dbs=8, readonly=True)
    try:
        with env.begin() as txn:

            def items(name: bytes) -> list[tuple[bytes, bytes]]:
                return list(txn.cursor(env.open_db(name, txn=txn, create=False)))

            meta = dict(items(b"meta"))
            assert meta[b"schema"] == b"4" and struct.unpack(">Q", meta[b"next_qid"]) == (2,)
            ((name, raw),) = items(b"queues")
            d = json.loads(raw)
            assert name == b"jobs" and d["id"] == 1 and d["created_at"] == 1
            assert QueueSpec.from_json(d["spec"]) == QueueSpec("jobs", max_history=UNLIMITED)
            assert items(b"state") == [(struct.pack(">I", 1), struct.pack(">QQQ", 3, 1, 1))]
            ((k2, r2),) = items(b"unprocessed")
            ((k1, r1),) = items(b"history")
            assert (k2, k1) == (struct.pack(">IQ", 1, 2), struct.pack(">IQ", 1, 1))
            # A format byte, the CRC32C of key + payload, the payload.
            for k, r in ((k1, r1), (k2, r2)):
                assert r[0] == 1 and r[1:5] == struct.pack(">I", google_crc32c.value(k + r[5:]))
            assert pb.Message.FromString(r2[5:]).tuple[0].int == 1
            assert pb.Message.FromString(r1[5:]).HasField("processed_at")
            assert items(b"times") == [(struct.pack(">IQ", 1, 1_700_000_000), struct.pack(">Q", 1))]
            q1, seq2 = struct.pack(">I", 1), struct.pack(">Q", 2)
            assert items(b"index") == [
                (q1 + b"a", seq2),  # address ""
                (q1 + b"f\x01\x00\x02" + struct.pack(">q", 1), seq2),  # field 0 of 1: int 1
                (q1 + b"s\x01\x02", seq2),  # shape: one int
            ]
    finally:
        env.close()


def test_map_grows_ahead_of_a_reserve(tmp_path: Path) -> None:
    """Given a 1 MiB map, when I write 12 MiB through begin(reserve), I expect
    the map grown first and every message stored."""
    s = DurableStore(tmp_path / "board", map_size=1 << 20)
    try:
        make(s)
        body = b"x" * 4096
        for _ in range(3):
            with s.begin(reserve=1100 * 4200) as txn:
                for _ in range(1000):
                    txn.append("q", Message(body=body), 1)
        info = s.info()
        assert info.map_size > 12 << 20 and info.map_used > 12 << 20
        with s.begin() as txn:
            assert txn.counts("q").unprocessed == 3000
    finally:
        s.close()


def test_map_full_aborts_then_grow_and_retry_succeeds(tmp_path: Path) -> None:
    """Given a 1 MiB map and no reserve, when one transaction writes 40 MiB, I
    expect MapFull with nothing written; after grow() the retry succeeds."""
    s = DurableStore(tmp_path / "board", map_size=1 << 20)
    try:
        make(s)
        body = b"x" * 4096
        failures = 0
        while True:
            try:
                with s.begin() as txn:
                    for _ in range(10_000):
                        txn.append("q", Message(body=body), 1)
                break
            except MapFull:
                failures += 1
                with s.begin() as txn:
                    assert txn.counts("q") == Counts(0, 0, 1)
                s.grow()
        assert failures >= 1
        with s.begin() as txn:
            assert txn.counts("q") == Counts(10_000, 0, 10_001)
    finally:
        s.close()


def test_map_growth_stops_at_max_map_size(tmp_path: Path) -> None:
    """Given a map that may not grow, when it is full, I expect grow() to
    refuse with StoreFull (a full disk, to the engine)."""
    s = DurableStore(tmp_path / "board", map_size=1 << 20, max_map_size=1 << 20)
    try:
        with pytest.raises(StoreFull):
            s.grow()
    finally:
        s.close()


def test_an_lmdb_error_aborts_and_becomes_a_store_error(tmp_path: Path) -> None:
    """Given a queue name longer than LMDB's key limit, when I create it among
    other writes, I expect StoreError, the whole transaction aborted, and a
    commit of it refused."""
    s = DurableStore(tmp_path / "board")
    try:
        make(s)
        with pytest.raises(StoreError), s.begin() as txn:
            txn.append("q", Message(), 1)
            txn.create_queue(QueueSpec("x" * 600), created_at=1)
        txn2 = s.begin()
        txn2.append("q", Message(), 1)
        with pytest.raises(StoreError):
            txn2.create_queue(QueueSpec("x" * 600), created_at=1)
        with pytest.raises(StoreError):
            txn2.commit()
        with s.begin() as txn:
            assert [i.spec.name for i in txn.queues()] == ["q"]
            assert txn.counts("q") == Counts(0, 0, 1)
    finally:
        s.close()


class _Watched:
    """Wraps an lmdb object, counting calls that touch the message sub-dbs."""

    def __init__(self, inner: Any, watch: dict[str, Any]) -> None:
        self._inner, self._watch = inner, watch

    def __enter__(self) -> _Watched:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.__exit__(*exc)

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._inner, attr)
        watch = self._watch

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs = {k: v._inner if isinstance(v, _Watched) else v for k, v in kwargs.items()}
            if any(a is db for a in (*args, *kwargs.values()) for db in watch["dbs"]):
                watch["reads"] += 1
            result = fn(*args, **kwargs)
            if attr == "open_db" and args[0] in (b"unprocessed", b"history"):
                watch["dbs"].append(result)
            return _Watched(result, watch) if attr == "begin" else result

        return call


class _WatchedStore(DurableStore):
    watch: dict[str, Any]

    def _open_env(self, path: str, map_size: int, sync: bool) -> Any:
        return _Watched(super()._open_env(path, map_size, sync), self.watch)


def test_open_reads_no_messages(tmp_path: Path) -> None:
    """Given a board with 20,000 messages in both sections, when I open it, I
    expect no read of the unprocessed or history sub-databases (the counter
    does see the first fetch after)."""
    path = tmp_path / "board"
    s = DurableStore(path)
    make(s, max_history=UNLIMITED)
    for _ in range(4):
        post(s, 5000)
    with s.begin() as txn:
        for seq in range(1, 5000):
            txn.process("q", seq, now=20 * S, max_history=UNLIMITED)
    s.close()
    _WatchedStore.watch = {"dbs": [], "reads": 0}
    s = _WatchedStore(path)
    try:
        assert len(_WatchedStore.watch["dbs"]) == 2
        assert _WatchedStore.watch["reads"] == 0
        with s.begin() as txn:
            assert txn.counts("q") == Counts(15_001, 4999, 20_001)
        assert _WatchedStore.watch["reads"] == 0
        with s.begin() as txn:
            assert txn.fetch("q", 7) is not None
        assert _WatchedStore.watch["reads"] >= 1
    finally:
        s.close()


def test_a_roomy_disk_holds_no_reserve_file(tmp_path: Path) -> None:
    """The disk reserve's file is allocated only when the disk runs low
    (tests/test_diskfull.py); a board on a roomy disk keeps none."""
    s = DurableStore(tmp_path / "board")
    try:
        assert 256 * 1024 <= s.disk_reserve <= 64 << 20
        assert not (tmp_path / "board" / "msgboard.reserve").exists()
    finally:
        s.close()


@pytest.mark.parametrize(
    "value",
    [
        b'{"id": 1, "spec": ',  # cut short
        b'{"id": 1, "spec": {"name": "jobs"}, "created_at": 1} {"id": 2}',  # two objects
        b'[{"id": 1, "spec": {"name": "jobs"}, "created_at": 1}]',  # not an object
        b'{"id": 1, "spec": {"name": "jobs"}, "created_at": 1}\xff',  # not UTF-8
    ],
)
def test_a_queue_entry_that_is_not_one_json_object_is_refused_at_open(
    tmp_path: Path, value: bytes
) -> None:
    """Opening decodes each ``queues`` entry without json.loads (faster for
    100,000 queues); I expect it as strict: anything but one whole JSON
    object is DataFileDamaged naming the queue, and a well-formed entry
    with spaces after it still opens."""
    path = tmp_path / "board"
    DurableStore(path).close()
    damage.put(path, b"queues", b"jobs", value)
    with pytest.raises(DataFileDamaged, match="queue 'jobs': its stored entry does not parse"):
        DurableStore(path)
    good = {"id": 1, "spec": QueueSpec("jobs").to_json(), "created_at": 1}
    damage.put(path, b"queues", b"jobs", json.dumps(good).encode() + b" \n")
    s = DurableStore(path)
    try:
        with s.begin() as txn:
            assert txn.queue("jobs") is not None
    finally:
        s.close()
