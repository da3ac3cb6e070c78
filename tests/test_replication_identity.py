"""A standby follows only the log it has: its Hello names its last entry
(index, epoch, CRC32C) and the primary lets it go on only from that same
entry; otherwise it is seeded again, its old data moved aside.

The stories, with real processes: a standby whose directory served as a
board of its own for a while (a deposed primary, as far as its log goes)
rejoins its primary, is told LogDiverged, keeps its old data aside, seeds
itself and ends holding the primary's records byte for byte; a standby that
has seen a higher epoch refuses (and is refused by) a lower one. And the
rule itself (``judge``), case by case, with the apply side refusing an
entry whose epoch goes down.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest

from msgboard.client import Client
from msgboard.cluster.service import judge
from msgboard.errors import LogDiverged, LogTruncated
from msgboard.lmdbstore import DurableStore, Log
from msgboard.lmdbstore.boardid import stable_id
from msgboard.lmdbstore.compare import differences
from msgboard.lmdbstore.oplog import LogGap, encode, identity
from msgboard.message import Message
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc
from tests.served import Served
from tests.test_replication import TOKEN, caught_up, last_index, primary, standby
from tests.test_replication_bounds import saying


def post(address: str, queue: str, n: int, tag: str) -> None:
    with Client(address, timeout=60) as c:
        c.create_queue(queue)
        c.post_many(queue, [Message(body=f"{tag}-{i}".encode()) for i in range(n)], batch=1)


def test_a_diverged_standby_moves_its_data_aside_and_seeds_itself(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and its standby in step, when the standby stops and
    its directory serves as a board of its own (writing entries the
    primary does not have), while the primary writes more than that, and
    then it starts again as the primary's standby, I expect it to be told
    its log diverged, to keep its old data as data.mdb.diverged-*, to seed
    itself and to end holding the primary's records exactly."""
    p = primary(tmp_path, "--allow-async", "--sync-timeout-ms", "60000")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    post(p.address, "q", 5, "before")
    caught_up(p, s)
    assert s.stop() == 0
    # The standby's directory, as a board with a log of its own.
    alone = Served(tmp_path / "s", "--replication-token", TOKEN, "--allow-async")
    stopped.append(alone)
    post(alone.address, "q", 3, "alone")
    assert alone.stop() == 0
    post(p.address, "q", 20, "after")  # the primary goes further than it
    (tmp_path / "s" / "ready.json").unlink(missing_ok=True)
    s = standby(tmp_path, p)
    stopped.append(s)
    post(p.address, "q", 1, "rejoined")
    caught_up(p, s)
    assert differences(p.data, s.data) == []
    text = s.log.read_text()
    assert "LogDiverged" in text or "diverged" in text
    kept = list(s.data.glob("data.mdb.diverged-*"))
    assert len(kept) == 1, sorted(x.name for x in s.data.iterdir())


def test_a_primary_refuses_a_standby_that_has_seen_a_higher_epoch(
    tmp_path: Path, stopped: list[Served]
) -> None:
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    with grpc.insecure_channel(p.address) as ch:
        stub = rpb_grpc.ReplicationStub(ch)
        hello = rpb.FollowRequest(hello=rpb.Hello(board="later", from_index=1, epoch=7))
        with pytest.raises(grpc.RpcError) as e:
            list(
                stub.Follow(
                    iter([hello]), metadata=((("x-msgboard-replication-token", TOKEN),)), timeout=30
                )
            )
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "epoch 7" in (e.value.details() or "")


def test_probe_says_whether_the_primary_holds_an_entry(
    tmp_path: Path, stopped: list[Served]
) -> None:
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    post(p.address, "q", 3, "x")
    with grpc.insecure_channel(p.address) as ch:
        stub = rpb_grpc.ReplicationStub(ch)
        meta = (("x-msgboard-replication-token", TOKEN),)
        done = threading.Event()
        call = stub.Follow(saying(rpb.Hello(board="t", from_index=1), done), metadata=meta)
        first = next(r for r in call if r.entries).entries[0]
        done.set()
        call.cancel()
        _, epoch, crc = identity(first)
        found = stub.Probe(rpb.ProbeRequest(index=1, epoch=epoch, crc=crc), metadata=meta)
        assert found.found and found.first == 1 and found.last >= 1
        other = stub.Probe(rpb.ProbeRequest(index=1, epoch=epoch, crc=crc ^ 1), metadata=meta)
        assert not other.found
        past = stub.Probe(rpb.ProbeRequest(index=999, epoch=0, crc=0), metadata=meta)
        assert not past.found


# -- the rule, case by case ------------------------------------------------


def entry(index: int, epoch: int = 0, body: bytes = b"x") -> bytes:
    return encode(index, epoch, [(1, 0, b"k", body)])


def hello(last: int, of: bytes | None = None) -> rpb.Hello:
    h = rpb.Hello(board="s", from_index=last + 1)
    if of is not None:
        _, h.last_epoch, h.last_crc = identity(of)
    return h


def test_judge_lets_a_standby_follow_only_from_the_same_entry() -> None:
    mine = entry(5)
    # An empty standby: from a log that starts at 1 (or is empty).
    assert judge(hello(0), "s", 1, 9, None) is None
    assert judge(hello(0), "s", 0, 0, None) is None
    assert isinstance(judge(hello(0), "s", 3, 9, None), LogTruncated)
    # The same entry 5: follows; another entry 5 (other bytes, other epoch): diverged.
    assert judge(hello(5, mine), "s", 1, 9, mine) is None
    assert isinstance(judge(hello(5, entry(5, body=b"y")), "s", 1, 9, mine), LogDiverged)
    assert isinstance(judge(hello(5, entry(5, epoch=2)), "s", 1, 9, mine), LogDiverged)
    # Past the primary's last: it holds what the primary does not.
    assert isinstance(judge(hello(12, entry(12)), "s", 1, 9, None), LogDiverged)
    # Below the log's front: cannot be checked, seeded again.
    assert isinstance(judge(hello(2, entry(2)), "s", 3, 9, None), LogTruncated)
    # Seeded at the start of a log that keeps no entry (a hole at 9): only
    # from a copy this primary made.
    assert judge(hello(9), "s", 10, 9, None, seeded=True) is None
    assert isinstance(judge(hello(9), "s", 10, 9, None), LogTruncated)
    assert isinstance(judge(hello(9, entry(9)), "s", 10, 9, None, seeded=True), LogTruncated)


def test_a_standby_refuses_an_entry_whose_epoch_goes_down(tmp_path: Path) -> None:
    store = DurableStore(tmp_path / "s", log=Log(), standby=True)
    try:
        store.apply([entry(1, epoch=3)])
        with pytest.raises(LogGap, match="epoch 2"):
            store.apply([entry(2, epoch=2)])
        assert store.apply([entry(2, epoch=3), entry(3, epoch=4)]) == 3
    finally:
        store.close()


def test_a_board_keeps_its_id(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    first = stable_id(str(tmp_path / "d"))
    assert stable_id(str(tmp_path / "d")) == first
    (tmp_path / "e").mkdir()
    assert stable_id(str(tmp_path / "e")) != first


def test_a_standby_that_has_seen_a_higher_epoch_does_not_follow_a_lower_one(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a standby's directory whose last entry has epoch 3 (it
    followed a primary of epoch 3), when it starts as the standby of a
    primary of epoch 0 (a deposed one, as far as it can tell), I expect it
    to be refused, say so, and apply nothing of that primary's log."""
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    post(p.address, "q", 3, "deposed")
    (tmp_path / "s").mkdir()
    store = DurableStore(tmp_path / "s" / "board", log=Log(), standby=True)
    store.apply([entry(1, epoch=3)])
    store.close()
    s = standby(tmp_path, p)
    stopped.append(s)
    text = ""
    for _ in range(600):
        text = s.log.read_text()
        if "no longer the primary" in text:
            break
        time.sleep(0.05)
    assert "has seen epoch 3" in text, text
    assert last_index(s.data) == 1
