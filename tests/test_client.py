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
from msgboard.errors import InvalidArgument, NotFound, QueueNotFound

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
    """Board.Ack, as its proto comment states: acks are per lease, as a
    stream's acks are per delivery. One bad lease (never given, on another
    queue, already acked) does not stop the others: it comes back in
    ``rejected`` with why and its place in the request, and the call
    succeeds. Only a bad request fails the call."""
    client.create_queue("jobs")
    client.create_queue("other")
    client.post_many("jobs", [("a",), ("b",), ("c",)])
    first, second, third = client.take_leased("jobs", lease=30, max=3)
    got = client.ack("jobs", [first, 999])
    assert got.ids == [first.id] and list(got.rejected) == [999]
    never = got.rejected[999]
    assert isinstance(never, InvalidArgument) and never.field == "lease_ids[1]"
    assert "never given" in str(never)
    elsewhere = client.ack("other", [second]).rejected[second.id]
    assert isinstance(elsewhere, InvalidArgument) and "'other'" in str(elsewhere)
    got = client.ack("jobs", [second, first, third.id])
    assert got.ids == [second.id, third.id]
    gone = got.rejected[first.id]
    assert isinstance(gone, NotFound) and gone.field == "lease_ids[1]"
    assert "already acked" in str(gone)
    assert client.get_queue("jobs").unprocessed == 0
    with pytest.raises(InvalidArgument, match=r"^lease_ids: "):
        client.ack("jobs", [])
    with pytest.raises(QueueNotFound):
        client.ack("nosuch", [first])


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
    its methods and what msgboard.client exports stay as they were (the
    address, the list given and the connection are properties: they
    follow the primary)."""
    import msgboard.client as module

    assert sorted(n for n in dir(Client) if not n.startswith("_")) == [
        *("ack", "address", "addresses", "browse", "close", "connection", "create_link"),
        *("create_queue", "create_selector", "delete_link", "delete_messages", "delete_queue"),
        *(
            "delete_selector",
            "drop_damaged",
            "get_queue",
            "get_selector",
            "kick_consumer",
            "list_consumers",
            "list_leases",
            "list_links",
        ),
        *("list_queues", "list_selectors", "move_messages", "post", "post_many"),
        *("post_messages", "post_receipts", "publisher", "purge_queue", "read"),
        *("release_messages", "snapshot", "stats", "subscribe"),
        *("subscribe_async", "take", "take_leased", "wait_ready"),
    ]
    for name in (
        *("Publisher", "Snapshot", "make_pattern", "Templates", "QueueView", "Start"),
        *("Moved", "Purged", "LeaseView"),
    ):
        assert name in module.__all__ and hasattr(module, name), name
