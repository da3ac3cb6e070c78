"""Replication with static roles, told with real processes on loopback: a
primary (``--replication-token``) and a standby (``--standby-of``), each a
``msgboard serve`` of its own, started and stopped by PID, over temporary
directories.

The stories: every write the primary answered is on the standby when the
primary is killed (-9), and the standby's directory opened as a board
serves it, exactly once, with nothing taken or acked waiting again; the
two directories hold the same records; a standby killed and restarted
catches up from the log; with the only standby gone a write waits, then
fails UNAVAILABLE (strict), and is answered with ``--allow-async``; a
standby refuses clients with NotPrimary and the primary's address. The
checker the failover story uses is itself shown to catch what it checks.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import lmdb
import pytest

from msgboard.client import Client
from msgboard.errors import NotPrimary, Unavailable
from msgboard.lmdbstore.boardid import stable_id
from msgboard.lmdbstore.compare import differences
from msgboard.lmdbstore.layout import BOARD_ID_KEY, LOG_LAST, LOG_LAST_KEY, MAX_DBS
from msgboard.message import Message
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc
from tests.served import Served

TOKEN = "cluster-secret"
#: Generous: the machine is shared, a standby may take seconds to start.
PATIENT = ("--sync-timeout-ms", "60000")


def primary(tmp: Path, *args: str) -> Served:
    (tmp / "p").mkdir(exist_ok=True)
    return Served(tmp / "p", "--replication-token", TOKEN, *args)


def standby(tmp: Path, of: Served) -> Served:
    (tmp / "s").mkdir(exist_ok=True)
    (tmp / "s" / "ready.json").unlink(missing_ok=True)  # left by a kill -9
    return Served(tmp / "s", "--replication-token", TOKEN, "--standby-of", of.address)


def last_index(data: Path) -> int:
    """The last log index a board's directory holds (read-only, while it runs)."""
    env = lmdb.open(str(data), readonly=True, max_dbs=MAX_DBS)
    try:
        for _ in range(10):
            try:
                with env.begin() as txn:
                    raw = txn.get(LOG_LAST_KEY, db=env.open_db(b"meta", txn=txn, create=False))
                return 0 if raw is None else int(LOG_LAST.unpack(raw)[0])
            except lmdb.MapResizedError:  # the board grew its map since we opened
                env.set_mapsize(0)
        raise AssertionError(f"{data}: the map kept growing under the reader")
    finally:
        env.close()


def data_id(data: Path) -> str:
    """The id a board's data holds (``meta/board_id``), read-only."""
    env = lmdb.open(str(data), readonly=True, max_dbs=MAX_DBS)
    try:
        with env.begin() as txn:
            raw = txn.get(BOARD_ID_KEY, db=env.open_db(b"meta", txn=txn, create=False))
        return "" if raw is None else raw.decode()
    finally:
        env.close()


def wait_for(cond: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def caught_up(p: Served, s: Served) -> None:
    wait_for(lambda: last_index(s.data) == last_index(p.data), "the standby caught up")


# -- the checker ------------------------------------------------------------

Board = dict[str, list[bytes]]


def violations(board: Board, answered: dict[bytes, str], gone: set[bytes]) -> list[str]:
    """What breaks the guarantee on a board after a failover: ``board``
    holds each queue's waiting bodies; ``answered``: each body whose post
    was answered OK, and the queue it must wait on; ``gone``: bodies whose
    take or ack was answered OK. Every answered body waits exactly once on
    its queue unless it is gone; nothing gone waits again."""
    out = []
    where: dict[bytes, list[str]] = {}
    for queue, bodies in board.items():
        for b in bodies:
            where.setdefault(b, []).append(queue)
    for body, queue in sorted(answered.items()):
        found = where.get(body, [])
        if body in gone:
            if found:
                out.append(f"{body!r} was taken or acked, and waits again on {found}")
        elif found != [queue]:
            out.append(f"{body!r} was answered on {queue}, and waits on {found or 'none'}")
    return out


def test_the_checker_catches_a_lost_a_doubled_a_misplaced_and_a_returned_message() -> None:
    answered = {b"a": "q", b"b": "q", b"c": "out", b"d": "q"}
    gone = {b"d"}
    assert violations({"q": [b"a", b"b"], "out": [b"c"]}, answered, gone) == []
    assert violations({"q": [b"a"], "out": [b"c"]}, answered, gone) == [
        "b'b' was answered on q, and waits on none"
    ]
    assert violations({"q": [b"a", b"b", b"b"], "out": [b"c"]}, answered, gone) == [
        "b'b' was answered on q, and waits on ['q', 'q']"
    ]
    assert violations({"q": [b"a", b"b", b"c"]}, answered, gone) == [
        "b'c' was answered on out, and waits on ['q']"
    ]
    assert violations({"q": [b"a", b"b", b"d"], "out": [b"c"]}, answered, gone) == [
        "b'd' was taken or acked, and waits again on ['q']"
    ]


class Poster(threading.Thread):
    """Posts to ``queue`` one at a time until a post fails; ``answered``:
    the bodies answered OK."""

    def __init__(self, address: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.address, self.queue = address, queue
        self.answered: list[bytes] = []
        self.start()

    def run(self) -> None:
        with Client(self.address, timeout=30) as c:
            for i in itertools.count():
                body = f"{self.queue}-{i}".encode()
                try:
                    c.post(self.queue, body=body)
                except Unavailable:
                    return
                self.answered.append(body)


def waiting(c: Client, queues: list[str]) -> Board:
    out: Board = {}
    for q in queues:
        page = c.browse(q, limit=10_000, section="unprocessed")
        out[q] = [m.body for m in page.messages]
    return out


# -- the stories ------------------------------------------------------------


def test_every_answered_write_survives_a_kill_of_the_primary(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and its standby, when I post (unary and streamed),
    take, take leased and ack, create and delete selectors and queues on
    the primary, then kill -9 it, I expect the standby to refuse clients
    with NotPrimary, the two directories to hold the same records, and the
    standby's directory, opened as a board, to hold every answered post
    exactly once and nothing taken or acked."""
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    answered: dict[bytes, str] = {}
    gone: set[bytes] = set()
    with Client(p.address) as c:
        c.create_queue("jobs")
        c.create_queue("in")
        c.create_queue("out")
        c.create_queue("scratch")
        c.create_selector("in", to="out")
        doomed = c.create_selector("jobs", op="copy", to="scratch")
        for i in range(40):
            body = f"job-{i}".encode()
            c.post("jobs", body=body)
            answered[body] = "jobs"
        bodies = [f"in-{i}".encode() for i in range(200)]
        c.post_many("in", [Message(body=b) for b in bodies], batch=50)
        answered.update((b, "out") for b in bodies)
        for m in c.take("jobs", max=5):
            gone.add(m.body)
        leased = c.take_leased("jobs", lease=60, max=5)
        c.ack("jobs", leased[:3])
        gone.update(d.message.body for d in leased[:3])
        c.delete_selector(doomed.id)
        c.delete_queue("scratch")
        c.create_queue("later")
        selectors = sorted((v.id, v.spec) for v in c.list_selectors())
        # The leased, unacked two come back as waiting after the failover.
        # Posts go on in a thread of their own while the primary is killed.
        posted = Poster(p.address, "later")
        wait_for(lambda: len(posted.answered) >= 20, "posts answered before the kill")
        p.kill()
        posted.join()
        answered.update(dict.fromkeys(posted.answered, "later"))
    with Client(s.address) as c, pytest.raises(NotPrimary) as e:
        c.post("jobs", body=b"to a standby")
    assert e.value.primary == p.address
    s.kill()
    # Every commit of the primary was answered (or was the post in flight).
    assert last_index(p.data) - last_index(s.data) in (0, 1)
    if last_index(p.data) == last_index(s.data):
        assert differences(p.data, s.data) == []
    (tmp_path / "s" / "ready.json").unlink(missing_ok=True)  # left by the kill
    board = Served(tmp_path / "s")  # the standby's directory, as a board
    stopped.append(board)
    with Client(board.address) as c:
        names = sorted(q.spec.name for q in c.list_queues())
        assert names == ["in", "jobs", "later", "out"]
        assert sorted((v.id, v.spec) for v in c.list_selectors()) == selectors
        assert violations(waiting(c, ["jobs", "in", "out", "later"]), answered, gone) == []
        c.post("jobs", body=b"the new primary writes")


def test_a_restarted_standby_catches_up_and_strict_writes_wait_for_it(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a strict primary (1 sync standby, a 1.5 s wait) and its
    standby, when I kill -9 the standby, I expect a write to fail
    UNAVAILABLE naming the reason after the wait; when the standby comes
    back, I expect it to catch up from the log (the failed write too: it
    was committed on the primary) and writes to be answered again."""
    p = primary(tmp_path, "--sync-timeout-ms", "1500")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    with Client(p.address) as c:
        wait_for(lambda: _answered(c, "first"), "a first write answered")
        s.kill()
        with pytest.raises(Unavailable, match="no standby in sync"):
            c.post("q", body=b"while the standby is down")
        s = standby(tmp_path, p)
        stopped.append(s)
        wait_for(lambda: _answered(c, "after"), "a write answered once it is back")
    caught_up(p, s)
    assert differences(p.data, s.data) == []
    assert last_index(s.data) > 3


def _answered(c: Client, body: str) -> bool:
    try:
        c.create_queue("q")
        c.post("q", body=body.encode())
    except Unavailable:
        return False
    return True


def test_allow_async_answers_without_a_standby_and_a_new_one_catches_up(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary with --allow-async and no standby, I expect writes
    answered, and the choice logged; when a standby with an empty
    directory starts, I expect it to apply the whole log (more than gRPC's
    default 4 MiB in one go) and hold the same records."""
    p = primary(tmp_path, "--allow-async", "--sync-timeout-ms", "60000")
    stopped.append(p)
    with Client(p.address) as c:
        c.create_queue("q")
        assert c.post("q", body=b"unreplicated") == 1
        c.post_many("q", [Message(body=b"x" * 500) for _ in range(20_000)], batch=1000)
    assert "--allow-async" in p.log.read_text()
    s = standby(tmp_path, p)
    stopped.append(s)
    caught_up(p, s)
    assert differences(p.data, s.data) == []


def test_the_log_needs_the_clusters_token(tmp_path: Path, stopped: list[Served]) -> None:
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    with grpc.insecure_channel(p.address) as ch:
        stub = rpb_grpc.ReplicationStub(ch)
        hello = rpb.FollowRequest(hello=rpb.Hello(board="intruder", from_index=1))
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Follow(iter([hello]), timeout=30))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        bad = (("x-msgboard-replication-token", "guess"),)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Follow(iter([hello]), metadata=bad, timeout=30))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_standby_seeds_itself_from_a_primary_that_wrote_before_it_logged(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a board that served without replication, then restarted as a
    primary, when an empty standby starts, I expect the primary's log not
    to reach back far enough (LogTruncated), the standby to seed itself
    from a hot copy of the primary, follow its log from there, and hold the
    same records."""
    (tmp_path / "p").mkdir()
    single = Served(tmp_path / "p")
    stopped.append(single)
    with Client(single.address) as c:
        c.create_queue("q")
        c.post_many("q", [Message(body=b"before") for _ in range(1000)])
        alone = c.stats().board_id  # the id links key with: its directory's first
    assert alone == stable_id(str(single.data))
    assert single.stop() == 0
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    with Client(p.address) as c:
        c.post("q", body=b"after")  # answered once the seeded standby has it
        assert c.stats().board_id == alone
    caught_up(p, s)
    assert differences(p.data, s.data) == []
    assert "seeding this standby" in s.log.read_text()
    # The seed carried the data's id; the standby's directory keeps its own.
    assert data_id(s.data) == alone != stable_id(str(s.data))
    seeds = tmp_path / "p"
    wait_for(lambda: not list(seeds.glob(".msgboard-seed-*")), "the primary's copy removed")
