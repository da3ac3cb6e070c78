"""Snapshots: a consistent hot copy of a running board, through the engine,
the store, gRPC and the command line."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest

from msgboard import Message, QueueSpec
from msgboard.cli import main
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import FailedPrecondition, InvalidArgument
from msgboard.lmdbstore import DurableStore, MapFull
from msgboard.lmdbstore import snapshot as snapshots
from msgboard.lmdbstore.layout import SCHEMA
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.spec import UNLIMITED
from msgboard.testing import ServerThread


def contents(path: Path) -> dict[str, dict[str, Any]]:
    """Per queue, what a snapshot holds: its state counters and the seqs in
    each section, read straight from the copy (read-only, no lock file)."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=32, subdir=True)
    try:
        dbs = {n: env.open_db(n.encode(), create=False) for n in ("queues", "state")}
        sections = {n: env.open_db(n.encode(), create=False) for n in ("unprocessed", "history")}
        out: dict[str, dict[str, Any]] = {}
        with env.begin() as txn:
            for name, value in txn.cursor(db=dbs["queues"]):
                prefix = struct.pack(">I", json.loads(value)["id"])
                state = txn.get(prefix, db=dbs["state"])
                assert state is not None
                q: dict[str, Any] = {"state": struct.unpack(">QQQ", state)}
                for section, db in sections.items():
                    cur = txn.cursor(db=db)
                    seqs = []
                    if cur.set_range(prefix):
                        for k in cur.iternext(values=False):
                            if k[:4] != prefix:
                                break
                            seqs.append(struct.unpack_from(">Q", k, 4)[0])
                    q[section] = seqs
                out[name.decode()] = q
        return out
    finally:
        env.close()


def assert_consistent(path: Path, info: SnapshotInfo) -> int:
    """Every queue's seqs are 1..next_seq-1 with none missing or doubled (no
    queue here trims history), and the counters agree with the records and
    the manifest. Returns the number of messages."""
    total = 0
    for name, q in contents(path).items():
        next_seq, unprocessed, history = q["state"]
        assert (len(q["unprocessed"]), len(q["history"])) == (unprocessed, history), name
        assert sorted(q["unprocessed"] + q["history"]) == list(range(1, next_seq)), name
        counts = info.queues[name]
        assert (counts.next_seq, counts.unprocessed, counts.history) == q["state"], name
        total += unprocessed + history
    assert set(info.queues) == set(contents(path))
    return total


def test_a_snapshot_during_continuous_posting_is_consistent(tmp_path: Path) -> None:
    """Given posters and a taker running on a board, when I take snapshots
    while they run, I expect each copy to be one commit's state: every
    queue's seqs contiguous, the counters agreeing with the records, every
    post answered before the snapshot in it, and the posters never stopped."""
    stop = threading.Event()
    answered = {"a": 0, "b": 0}
    with Board(tmp_path / "board", sync=False) as board:
        for name in answered:
            board.create_queue(QueueSpec(name, max_history=UNLIMITED))

        def post(name: str) -> None:
            i = 0
            while not stop.is_set():
                batch = [Message(tuple=(name, i + j), body=b"x" * 200) for j in range(50)]
                i += len(board.post(name, batch))
                answered[name] = i

        def take() -> None:
            while not stop.is_set():
                board.take("a", max=20)

        workers = [threading.Thread(target=post, args=(n,)) for n in answered]
        workers.append(threading.Thread(target=take))
        for w in workers:
            w.start()
        try:
            for i in range(3):
                while sum(answered.values()) < 2000 * (i + 1):
                    stop.wait(0.01)
                before = dict(answered)
                info = board.snapshot(tmp_path / f"snap{i}")
                total = assert_consistent(tmp_path / f"snap{i}", info)
                assert total == info.messages
                for name, n in before.items():
                    assert info.queues[name].next_seq - 1 >= n
        finally:
            stop.set()
            for w in workers:
                w.join()
    assert snapshots.load(tmp_path / "snap2").queues == info.queues


def test_the_manifest_records_the_schema_and_the_time(board: Board, tmp_path: Path) -> None:
    board.create_queue(QueueSpec("jobs"))
    board.post("jobs", [Message(tuple=(i,)) for i in range(5)])
    before = board.stats().store
    info = board.snapshot(tmp_path / "snap")
    d = json.loads((tmp_path / "snap" / "snapshot.json").read_text())
    assert d["format"] == "msgboard-snapshot" and d["schema"] == SCHEMA.decode()
    assert d["taken_at_us"] == info.taken_at and d["taken_at"].endswith("Z")
    assert d["messages"] == 5 and d["queues"]["jobs"]["next_seq"] == 6
    assert d["source"] == board.path and d["bytes"] <= before.map_used
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == ["data.mdb", "snapshot.json"]
    # A snapshot opens as a board.
    with Board(tmp_path / "snap") as copy:
        assert [m.tuple for m in copy.take("jobs", max=10)] == [(i,) for i in range(5)]


def test_a_snapshot_refuses_a_taken_or_relative_path(board: Board, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FailedPrecondition, match="not an empty directory"):
        board.snapshot(tmp_path / "full")
    with pytest.raises(InvalidArgument, match="absolute"):
        board.snapshot("relative/snap")
    (tmp_path / "empty").mkdir()
    board.snapshot(tmp_path / "empty")  # an empty directory is fine
    assert snapshots.load(tmp_path / "empty").schema == SCHEMA.decode()
    with pytest.raises(FailedPrecondition, match="not a msgboard snapshot"):
        snapshots.load(tmp_path / "full")
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


class HeldStore(DurableStore):
    """A store whose snapshot copy waits for ``release`` once its read
    transaction is open, and which says when map growth is asked for."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.copying = threading.Event()
        self.release = threading.Event()
        self.resize_asked = threading.Event()

    def _copy(self, txn: lmdb.Transaction[bytes], path: str) -> SnapshotInfo:
        self.copying.set()
        self.release.wait()
        return super()._copy(txn, path)

    def _resize(self, size: int, *, wait: bool) -> None:
        if wait:
            self.resize_asked.set()
        super()._resize(size, wait=wait)


def test_map_growth_waits_for_a_running_copy(tmp_path: Path) -> None:
    """Given a snapshot whose copy is held open, when writes fill the map, I
    expect writes to go on while they fit, growth to wait for the copy, then
    everything stored, and the snapshot to show the board as it was when it
    began."""
    s = HeldStore(tmp_path / "board", map_size=1 << 20)
    try:
        with s.begin() as txn:
            txn.create_queue(QueueSpec("q"), 1)
            txn.append("q", Message(tuple=(0,)), 1)
        result: list[SnapshotInfo] = []
        snap = threading.Thread(target=lambda: result.append(s.snapshot(str(tmp_path / "s"))))
        snap.start()
        assert s.copying.wait(60)
        with s.begin() as txn:  # a small write commits during the copy
            txn.append("q", Message(tuple=(1,)), 1)

        def fill() -> None:  # as the writer does: grow after MapFull, retry
            while True:
                try:
                    with s.begin() as txn:
                        for i in range(10_000):
                            txn.append("q", Message(tuple=(i,), body=b"x" * 4096), 1)
                    return
                except MapFull:
                    s.grow()

        writer = threading.Thread(target=fill)
        writer.start()
        assert s.resize_asked.wait(60)
        s.release.set()
        writer.join()
        snap.join()
        with s.begin() as txn:
            assert txn.counts("q").unprocessed == 10_002
        assert s.info().map_size > 40 << 20
        [info] = result
        assert info.queues["q"].next_seq == 2
        assert contents(tmp_path / "s")["q"]["unprocessed"] == [1]
    finally:
        s.release.set()
        s.close()


def test_snapshot_over_grpc_and_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ServerThread(tmp_path / "board").start()
    try:
        with Client(server.address) as c:
            c.create_queue("jobs")
            c.post_many("jobs", [(i,) for i in range(100)])
            snap = c.snapshot(str(tmp_path / "one"))
            assert (snap.schema, snap.messages, snap.queues) == (SCHEMA.decode(), 100, 1)
            assert snap.path == str(tmp_path / "one") and snap.bytes > 0
            with pytest.raises(FailedPrecondition):
                c.snapshot(str(tmp_path / "one"))
            with pytest.raises(InvalidArgument):
                c.snapshot("relative")
        monkeypatch.chdir(tmp_path)
        assert main(["snapshot", "two", "--json", "--server", server.address]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["path"] == str(tmp_path / "two") and out["messages"] == 100
        assert out["taken_at"].endswith("Z")
        assert main(["snapshot", "two", "--server", server.address]) == 1
        assert "FAILED_PRECONDITION" in capsys.readouterr().err
    finally:
        server.stop()
