"""Open streams during a switchover (msgboard/server/roles.py): a board of a
cluster counts the PostStream and Subscribe streams it let in, and once a
switchover starts (``Role.handover``) a stream takes no new request and
ends with NotPrimary naming the successor, so that its client opens it
again there; nothing it refused was stored. One process, a real board and
a real gRPC server on a loopback port (as tests/test_sync_gate.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from msgboard.client import Client, Message
from msgboard.cluster import Replication
from msgboard.engine import Board
from msgboard.errors import NotPrimary
from msgboard.server import create_server

LONG = 60.0
SUCCESSOR = "10.0.0.9:7878"


def until(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LONG
    while not cond():
        assert time.monotonic() < deadline, f"not within {LONG} s: {what}"
        time.sleep(0.01)


def test_a_switchover_ends_open_streams_with_not_primary(tmp_path: Path) -> None:
    """Given a board of a cluster with an open PostStream and an open
    Subscribe stream, when a switchover starts, I expect a new unary post,
    the publisher's next batch and the subscription each refused with
    NotPrimary naming the successor, no stream left open, and nothing
    refused stored; once the switchover is called off, posts are served."""

    async def main() -> None:
        primary = Replication("token", allow_async=True)
        primary.role.counting = True  # as a node's role
        board = Board(tmp_path / "b", log=primary.log)
        service = primary.attach(board)
        server, port = await create_server(board, "127.0.0.1:0", replication=service)
        await server.start()
        role = primary.role

        def calls() -> None:
            with Client(f"127.0.0.1:{port}") as c:
                c.create_queue("q")
                c.create_queue("jobs")
                pub = c.publisher()
                assert pub.post_messages("q", [Message(body=b"before")]) == [1]
                sub = c.subscribe("jobs", credit=1, reconnect=False)
                c.post("jobs", body=b"job")
                deliveries = iter(sub)
                first = next(deliveries)
                assert first.message.body == b"job"
                until("two streams counted", lambda: role.streams == 2)

                role.handover = SUCCESSOR
                with pytest.raises(NotPrimary) as e:
                    c.post("q", body=b"refused")
                assert e.value.primary == SUCCESSOR
                with pytest.raises(NotPrimary) as e:
                    pub.post_messages("q", [Message(body=b"refused too")])
                assert e.value.primary == SUCCESSOR
                with pytest.raises(NotPrimary) as e:
                    next(deliveries)
                assert e.value.primary == SUCCESSOR
                sub.close(wait=3.0)
                until("no stream open", lambda: role.streams == 0)

                role.handover = None
                assert c.post("q", body=b"after") == 2
                assert [m.body for m in c.browse("q").messages] == [b"before", b"after"]

        try:
            await asyncio.to_thread(calls)
        finally:
            await server.stop(0)
            primary.close()
            board.close()

    asyncio.run(main())
