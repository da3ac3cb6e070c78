"""The sync gate in one process, over a real board: a replicated board's
answers wait for its standbys' acknowledgements while its writer goes on
committing the next groups; they go in index order; strict, a write that
waited too long fails UNAVAILABLE; with --allow-async and no standby, it
is answered at once. (tests/test_replication.py tells the same with real
processes and a real standby.) And the server asks the board's role
before each client call, and ends a cluster board's open streams with
NotPrimary once a switchover starts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.cluster import Replication, Role, SyncGate
from msgboard.engine import Board
from msgboard.errors import NotPrimary, Unavailable
from msgboard.lmdbstore import Log
from msgboard.message import Message
from msgboard.server import create_server
from msgboard.spec import QueueSpec

LONG = 60.0


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    with Board(tmp_path / "board", log=Log()) as b:
        b.create_queue(QueueSpec("q"))
        yield b


def gated(board: Board, **kw: object) -> SyncGate:
    assert board.log is not None
    gate = SyncGate(board.log, board.call_soon, **kw)  # type: ignore[arg-type]
    board.hold_answers(gate.hold)
    return gate


def until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LONG
    while not cond():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


def test_answers_wait_for_the_standby_and_the_writer_goes_on(board: Board) -> None:
    gate = gated(board, needed=1, timeout=LONG)
    oplog = board.log
    assert oplog is not None
    base = oplog.last
    gate.connected("s", base)
    first = board.post_async("q", [Message(body=b"1")])
    until(lambda: oplog.last == base + 1)
    # The writer goes on: the next group commits, neither is answered.
    second = board.post_async("q", [Message(body=b"2")])
    until(lambda: oplog.last == base + 2)
    assert not first.done() and not second.done()
    gate.ack("s", base + 1)
    assert first.result(LONG) == [1]
    assert not second.done()
    gate.ack("s", base + 2)
    assert second.result(LONG) == [2]
    gate.close()


def test_strict_a_write_fails_after_the_wait(board: Board) -> None:
    gate = gated(board, needed=1, timeout=0.2)
    with pytest.raises(Unavailable, match=r"no standby in sync.*none connected"):
        board.post_async("q", [Message(body=b"alone")]).result(LONG)
    gate.close()


def test_allow_async_answers_without_a_standby(board: Board) -> None:
    gate = gated(board, needed=1, timeout=LONG, allow_async=True)
    assert board.post_async("q", [Message(body=b"alone")]).result(LONG) == [1]
    gate.close()


def test_closing_the_gate_answers_what_waits(board: Board) -> None:
    gate = gated(board, needed=1, timeout=LONG)
    oplog = board.log
    assert oplog is not None
    base = oplog.last
    f = board.post_async("q", [Message(body=b"held")])
    until(lambda: oplog.last == base + 1)
    assert not f.done()
    gate.close()
    with pytest.raises(Unavailable, match="stopping"):
        f.result(LONG)


def serving(path: Path, calls: Callable[[int, Role], None], *, counting: bool = False) -> None:
    """Runs ``calls(port, role)`` on a thread against a replicating primary
    served in this process (``counting``: its role counts calls and streams,
    as a node's does)."""

    async def main() -> None:
        primary = Replication("token", allow_async=True)
        primary.role.counting = counting
        board = Board(path, log=primary.log)
        service = primary.attach(board)
        server, port = await create_server(board, "127.0.0.1:0", replication=service)
        await server.start()
        try:
            await asyncio.to_thread(calls, port, primary.role)
        finally:
            await server.stop(0)
            primary.close()
            board.close()

    asyncio.run(main())


def test_the_server_asks_the_role_before_each_client_call(tmp_path: Path) -> None:
    """Given a replicating primary served in this process, when its role
    says another board is the primary (as leadership through etcd will),
    I expect unary and streamed calls refused with NotPrimary naming that
    board, and served again once it is the primary again."""

    def calls(port: int, role: Role) -> None:
        with Client(f"127.0.0.1:{port}") as c:
            c.create_queue("q")
            role.primary = "10.0.0.9:7878"
            with pytest.raises(NotPrimary) as e:
                c.post("q", body=b"refused")
            assert e.value.primary == "10.0.0.9:7878"
            with pytest.raises(NotPrimary):
                c.post_many("q", [Message(body=b"refused too")])
            role.primary = None
            assert c.post("q", body=b"served") == 1

    serving(tmp_path / "b", calls)


def test_a_switchover_ends_open_streams_with_not_primary(tmp_path: Path) -> None:
    """Given a board of a cluster with an open PostStream and an open
    Subscribe stream, when a switchover starts (``Role.handover``), I
    expect a new unary post, the publisher's next batch and the
    subscription each refused with NotPrimary naming the successor (the
    client opens its stream again there), no stream left open, and
    nothing refused stored; once the switchover is called off, posts are
    served again."""
    successor = "10.0.0.9:7878"

    def calls(port: int, role: Role) -> None:
        with Client(f"127.0.0.1:{port}") as c:
            c.create_queue("q")
            c.create_queue("jobs")
            pub = c.publisher()
            assert pub.post_messages("q", [Message(body=b"before")]) == [1]
            sub = c.subscribe("jobs", credit=1, reconnect=False)
            c.post("jobs", body=b"job")
            deliveries = iter(sub)
            assert next(deliveries).message.body == b"job"
            until(lambda: role.streams == 2)

            role.handover = successor
            with pytest.raises(NotPrimary) as e:
                c.post("q", body=b"refused")
            assert e.value.primary == successor
            with pytest.raises(NotPrimary) as e:
                pub.post_messages("q", [Message(body=b"refused too")])
            assert e.value.primary == successor
            with pytest.raises(NotPrimary) as e:
                next(deliveries)
            assert e.value.primary == successor
            sub.close(wait=3.0)
            until(lambda: role.streams == 0)

            role.handover = None
            assert c.post("q", body=b"after") == 2
            assert [m.body for m in c.browse("q").messages] == [b"before", b"after"]

    serving(tmp_path / "b", calls, counting=True)
