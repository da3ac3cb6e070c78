"""What a primary keeps for its standbys is bounded, and a standby past the
bounds is seeded again rather than stuck: told with real processes.

The stories: a standby paused (SIGSTOP) while the primary writes more than
``--log-limit`` entries is told LogTruncated when it wakes, seeds itself
and ends equal to the primary (it got empty heartbeats forever); a standby
that went away stops pinning the log after ``--log-pin-seconds``; a seed
pins the log at the copy's index until the seeded standby follows, however
much the primary writes meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import lmdb
import pytest

from msgboard.client import Client
from msgboard.cluster.replica import reason
from msgboard.lmdbstore.compare import differences
from msgboard.lmdbstore.layout import LOG_FIRST_KEY, LOG_LAST, LOG_LAST_KEY, MAX_DBS, U64
from msgboard.lmdbstore.oplog import identity
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc
from tests.served import Served
from tests.test_replication import TOKEN, caught_up, primary, standby, wait_for

META = (("x-msgboard-replication-token", TOKEN),)


def log_bounds(data: Path) -> tuple[int, int]:
    """(first, last) of a board's log, read from its directory while it runs."""
    env = lmdb.open(str(data), readonly=True, max_dbs=MAX_DBS, lock=True)
    try:
        with env.begin() as txn:
            meta = env.open_db(b"meta", txn=txn, create=False)
            raw = txn.get(LOG_LAST_KEY, db=meta)
            last = 0 if raw is None else int(LOG_LAST.unpack(raw)[0])
            raw = txn.get(LOG_FIRST_KEY, db=meta)
            first = last + 1 if raw is None else int(U64.unpack(raw)[0])
        return first, last
    finally:
        env.close()


def saying(hello: rpb.Hello, done: threading.Event) -> Iterator[rpb.FollowRequest]:
    """A Follow stream's requests: ``hello``, then nothing until ``done``."""
    yield rpb.FollowRequest(hello=hello)
    done.wait(120)


def posts(address: str, n: int, size: int = 0) -> None:
    """``n`` posts to queue q, one group commit each."""
    with Client(address, timeout=60) as c:
        c.create_queue("q")
        for i in range(n):
            c.post("q", body=str(i).encode().ljust(size, b"."))


def test_a_standby_past_the_log_limit_is_seeded_again(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary keeping at most 100 log entries and its standby,
    when the standby is paused while the primary commits 4,300 groups (more
    than the log's limit, and than the shipper kept in memory before), I
    expect the standby, let go, to be told LogTruncated, seed itself and
    end holding the primary's records."""
    p = primary(
        tmp_path,
        *("--sync-standbys", "0", "--log-keep", "10", "--log-limit", "100"),
        *("--sync", "weaker-no-fsync"),
    )
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    posts(p.address, 5)
    caught_up(p, s)
    os.kill(s.proc.pid, signal.SIGSTOP)
    try:
        posts(p.address, 4300, size=2000)
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
    caught_up(p, s)
    assert differences(p.data, s.data) == []
    assert "seeding this standby" in s.log.read_text()


def test_a_standby_gone_longer_than_the_pin_bound_stops_pinning_the_log(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary keeping 5 entries, and a standby that followed it
    and was killed, I expect the log to keep what the standby needs at
    first, and after --log-pin-seconds (1) to keep only 5 entries."""
    p = primary(tmp_path, *("--sync-standbys", "0", "--log-keep", "5", "--log-pin-seconds", "1"))
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    posts(p.address, 3)
    caught_up(p, s)
    s.kill()
    had = log_bounds(p.data)[1]

    def trimmed() -> bool:
        posts(p.address, 1)
        first, last = log_bounds(p.data)
        return last > had + 5 and first == last - 4

    wait_for(trimmed, "the log trimmed to 5 entries once the standby is forgotten")
    assert "gone for 1 s" in p.log.read_text()


def test_a_seed_pins_the_log_until_the_standby_follows(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary keeping 5 entries, when a standby (played by the
    test) takes a Seed copy while the primary commits 50 groups, I expect
    it to follow from the copy's last entry afterwards (not LogTruncated)."""
    p = primary(tmp_path, *("--sync-standbys", "0", "--log-keep", "5"))
    stopped.append(p)
    posts(p.address, 10)
    copy = tmp_path / "copy"
    copy.mkdir()
    with grpc.insecure_channel(p.address) as ch:
        stub = rpb_grpc.ReplicationStub(ch)
        chunks = stub.Seed(rpb.SeedRequest(board="t", board_id="seeded"), metadata=META)
        with open(copy / "data.mdb", "wb") as out:
            out.write(next(chunks).data)  # the copy is made: its index pinned
            posts(p.address, 50)
            for chunk in chunks:
                out.write(chunk.data)
        env = lmdb.open(str(copy), max_dbs=MAX_DBS)
        with env.begin() as txn:
            meta = env.open_db(b"meta", txn=txn, create=False)
            last = int(LOG_LAST.unpack(txn.get(LOG_LAST_KEY, db=meta))[0])
            oplog = env.open_db(b"oplog", txn=txn, create=False)
            _, epoch, crc = identity(txn.get(U64.pack(last), db=oplog))
        env.close()
        assert log_bounds(p.data)[1] >= last + 50
        hello = rpb.Hello(
            board="t", board_id="seeded", from_index=last + 1, last_epoch=epoch, last_crc=crc
        )
        done = threading.Event()
        call = stub.Follow(saying(hello, done), metadata=META, timeout=60)
        try:
            got = next(r for r in call if r.entries)
        except grpc.RpcError as e:
            raise AssertionError(f"refused: {reason(e)}: {e.details()}") from None
        finally:
            done.set()
            call.cancel()
        assert identity(got.entries[0])[0] == last + 1


def test_the_shipper_tells_a_stream_past_the_log_limit(tmp_path: Path) -> None:
    """Given a board keeping at most 5 log entries and 13 commits, I expect
    the shipper to answer None (the stream must end LogTruncated) for an
    index more than 5 behind, and entries for one within the limit: it
    answered [] and the stream sent empty heartbeats forever."""
    from msgboard.cluster import Shipper
    from msgboard.engine import Board
    from msgboard.lmdbstore import Log
    from msgboard.message import Message
    from msgboard.spec import QueueSpec

    log = Log(keep=2, limit=5)
    log.pin = 1  # a standby far behind: the limit alone trims
    with Board(tmp_path / "b", log=log) as board:
        shipper = Shipper(board)
        board.create_queue_async(QueueSpec(name="q")).result(30)
        for i in range(11):
            board.post_async("q", [Message(body=str(i).encode())]).result(30)
        # 13 commits: the data's id (the first open), the queue, 11 posts.
        assert board.log_bounds() == (9, 13)
        assert asyncio.run(shipper.read(1)) is None
        assert asyncio.run(shipper.read(8)) is None
        assert [identity(e)[0] for e in asyncio.run(shipper.read(9))] == [9, 10, 11, 12, 13]


def test_the_shipper_keeps_entries_in_memory_up_to_a_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a shipper keeping 10,000 bytes of entries, when 30 entries of
    1,000 bytes are logged, I expect it to hold 10 (their bytes at most the
    bound), the newest; and a single entry larger than the bound to be
    kept alone."""
    from msgboard.cluster import Shipper, shipper
    from msgboard.engine import Board

    monkeypatch.setattr(shipper, "RING_BYTES", 10_000)
    with Board(tmp_path / "b") as board:
        ship = Shipper(board)
        for i in range(1, 31):
            ship.logged(i, b"x" * 1000)
        assert ship.held() == (10, 10_000)
        ship.logged(31, b"y" * 50_000)
        assert ship.held() == (1, 50_000)
