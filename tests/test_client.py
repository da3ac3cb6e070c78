"""The Python client's promises that are its own, against a real server.

Closing a subscription is a half-close: the board applies every ack and
nack sent before it, then gives back what is still unacked
(docs/routing.md, Subscribe). Both clients, the blocking one and the
asyncio one, keep that promise even when the acks were sent an instant
before the close.
"""

from __future__ import annotations

import asyncio

import pytest

from msgboard.client import Client, Delivery
from msgboard.errors import InvalidArgument, NotFound

N = 200


def _post(client: Client) -> None:
    client.create_queue("jobs")
    client.post_many("jobs", [("job", i) for i in range(N)], batch=50)


def _nothing_comes_back(client: Client) -> None:
    q = client.get_queue("jobs")
    assert (q.unprocessed, q.waiting) == (0, 0)
    assert client.take("jobs", max=N) == []


def test_acks_sent_just_before_a_close_are_applied(client: Client) -> None:
    """Given N messages delivered to a subscriber, when it acks each and
    leaves the ``with`` block at once, I expect every ack applied and
    confirmed: nothing goes back to the queue."""
    _post(client)
    got: list[Delivery] = []
    with client.subscribe("jobs", credit=N) as sub:
        for d in sub:
            got.append(d)
            if len(got) == N:
                break
        for d in got:
            sub.ack(d)
    assert sub.acked == {d.id for d in got}
    _nothing_comes_back(client)


def test_acks_sent_just_before_an_async_close_are_applied(client: Client) -> None:
    """The same with ``async with client.subscribe_async(...)``: its close
    half-closes and waits for the board's answers before it cancels."""
    _post(client)

    async def consume() -> tuple[set[int], set[int]]:
        got: list[Delivery] = []
        async with client.subscribe_async("jobs", credit=N) as sub:
            async for d in sub:
                got.append(d)
                if len(got) == N:
                    break
            for d in got:
                await sub.ack(d)
        return {d.id for d in got}, sub.acked

    ids, acked = asyncio.run(consume())
    assert len(ids) == N and acked == ids
    _nothing_comes_back(client)


def test_an_async_close_gives_back_what_is_unacked(client: Client) -> None:
    """Given an async subscriber that acks only the first of two
    deliveries, when it closes, I expect the second back on the queue,
    delivered once."""
    client.create_queue("jobs")
    client.post_many("jobs", [("a",), ("b",)])

    async def consume() -> None:
        async with client.subscribe_async("jobs", credit=2) as sub:
            first = await anext(sub)
            await anext(sub)
            await sub.ack(first)

    asyncio.run(consume())
    [m] = client.take("jobs", timeout=5)
    assert (m.tuple, m.delivery_count) == (("b",), 2)


def test_ack_answers_as_the_proto_says(client: Client) -> None:
    """Board.Ack, as its proto comment states: INVALID_ARGUMENT for a lease
    never given or one on another queue, NOT_FOUND for a lease already
    acked, and nothing changed unless every lease is good."""
    client.create_queue("jobs")
    client.create_queue("other")
    client.post_many("jobs", [("a",), ("b",)])
    first, second = client.take_leased("jobs", lease=30, max=2)
    with pytest.raises(InvalidArgument, match="never given"):
        client.ack("jobs", [first, 999])
    with pytest.raises(InvalidArgument, match="other"):
        client.ack("other", [first])
    client.ack("jobs", [first])
    with pytest.raises(NotFound, match="already acked"):
        client.ack("jobs", [second, first])
    client.ack("jobs", [second])  # untouched by the refused request
    assert client.get_queue("jobs").unprocessed == 0


def test_the_client_loads_neither_the_engine_nor_lmdb() -> None:
    """Given a fresh interpreter, when I import msgboard.client and use its
    result types, I expect no module of the engine or the store, and no lmdb,
    loaded: the client speaks only gRPC."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from msgboard.client import Client, Start\n"
        "from msgboard.results import BoardStats, Page, QueueStats\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    assert "msgboard.client" in loaded and "grpc" in loaded
    below = [m for m in loaded if m.startswith(("msgboard.engine", "msgboard.lmdbstore", "lmdb"))]
    assert below == []


def test_the_client_split_keeps_its_surface() -> None:
    """Client is split by concern (admin.py, publisher.py, patterns.py);
    its methods and what msgboard.client exports stay as they were."""
    import msgboard.client as module

    assert sorted(n for n in dir(Client) if not n.startswith("_")) == [
        *("ack", "browse", "close", "create_queue", "create_selector", "delete_queue"),
        *(
            "delete_selector",
            "drop_damaged",
            "get_queue",
            "get_selector",
            "kick_consumer",
            "list_consumers",
        ),
        *("list_queues", "list_selectors", "post", "post_many", "post_messages"),
        *("post_receipts", "publisher", "read", "snapshot", "stats", "subscribe"),
        *("subscribe_async", "take", "take_leased", "wait_ready"),
    ]
    for name in ("Publisher", "Snapshot", "make_pattern", "Templates", "QueueView", "Start"):
        assert name in module.__all__ and hasattr(module, name), name
