"""Selectors, Subscribe and leases through the real gRPC server."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import grpc
import pytest

from msgboard.client import Client, Delivery
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    MsgboardError,
    NotFound,
    QueueNotFound,
)
from msgboard.testing import ServerProcess, ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc


def test_subscribe_delivers_and_acks_are_confirmed(client: Client) -> None:
    client.create_queue("jobs")
    with client.subscribe("jobs", credit=10) as sub:
        assert sub.selector is not None and sub.selector.id.startswith("sub-")
        client.post_many("jobs", [("job", i) for i in range(25)], batch=5)
        got: list[Delivery] = []
        for d in sub:
            got.append(d)
            sub.ack(d)
            if len(got) == 25:
                break
        assert [d.message.tuple for d in got] == [("job", i) for i in range(25)]
        while len(sub.acked) < 25:  # confirmations ride the stream
            client.post("jobs", ("more",))
            sub.ack(next(sub))
        assert {d.id for d in got} <= sub.acked
    # Acks still in flight when it closed: those messages went back.
    assert all(m.tuple == ("more",) for m in client.read("jobs", max=100))


def test_a_bad_ack_is_reported_and_the_stream_carries_on(client: Client) -> None:
    client.create_queue("q")
    with client.subscribe("q") as sub:
        client.post("q", ("a",))
        d = next(sub)
        sub.ack(777)
        with pytest.raises(InvalidArgument, match="never delivered"):
            next(sub)
        sub.ack(d)
        sub.ack(d)
        with pytest.raises(NotFound, match="already acked"):
            next(sub)
        client.post("q", ("b",))
        assert next(sub).message.tuple == ("b",)


def test_closing_a_subscription_gives_back_its_messages(client: Client) -> None:
    client.create_queue("q")
    sub = client.subscribe("q")
    client.post("q", ("a",))
    assert next(sub).message.tuple == ("a",)
    sub.close()
    [m] = client.take("q", timeout=5)
    assert (m.tuple, m.delivery_count) == (("a",), 2)


def test_subscribe_errors_are_statuses(client: Client) -> None:
    with pytest.raises(QueueNotFound):
        client.subscribe("nope")
    client.create_queue("q")
    with pytest.raises(InvalidArgument, match="credit"):
        client.subscribe("q", credit=-5)
    with pytest.raises(NotFound):
        client.subscribe(selector="sel-404")


def test_the_first_request_must_open(server: ServerThread) -> None:
    with grpc.insecure_channel(server.address) as ch:
        call = pb_grpc.BoardStub(ch).Subscribe(iter([pb.SubscribeRequest(credit=3)]))
        with pytest.raises(grpc.RpcError) as e:
            next(call)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_async_subscription(client: Client) -> None:
    client.create_queue("q")

    async def consume() -> list[tuple[object, ...]]:
        out = []
        async with client.subscribe_async("q", credit=5) as sub:
            client.post_many("q", [("n", i) for i in range(8)])
            async for d in sub:
                out.append(d.message.tuple)
                await sub.ack(d)
                if len(out) == 8:
                    break
        return out

    assert asyncio.run(consume()) == [("n", i) for i in range(8)]


def test_copy_subscribers_and_selectors_over_grpc(client: Client) -> None:
    client.create_queue("pets", unmatched="discard")
    client.create_queue("cats")
    sel = client.create_selector("pets", to="cats", address="eq:cat")
    assert client.get_selector(sel.id).spec.destination == "cats"
    with client.subscribe("pets", copy=True) as sub:
        client.post("pets", ("tom",), address="cat")
        client.post("pets", ("rex",), address="dog")
        assert [next(sub).message.tuple for _ in range(2)] == [("tom",), ("rex",)]
    assert [m.tuple for m in client.take("cats", max=5)] == [("tom",)]
    assert [s.id for s in client.list_selectors("pets")] == [sel.id]
    with pytest.raises(FailedPrecondition, match="cycle"):
        client.create_selector("cats", to="pets")
    with pytest.raises(QueueNotFound):
        client.create_selector("pets", to="nowhere")
    client.delete_selector(sel.id)
    with pytest.raises(NotFound):
        client.get_selector(sel.id)
    stats = client.stats("pets").queues[0]
    assert (stats.selectors, stats.consumers, stats.unprocessed) == (0, 0, 0)


def test_leased_take_and_ack_over_grpc(client: Client) -> None:
    client.create_queue("q")
    client.post("q", ("a",))
    [d] = client.take_leased("q", lease=30)
    assert client.take("q") == []
    assert client.stats("q").queues[0].outstanding == 1
    client.ack("q", [d])
    with pytest.raises(NotFound):
        client.ack("q", [d])
    client.post("q", ("b",))
    [d] = client.take_leased("q", lease=30)
    client.ack("q", [d], nack=True)
    [m] = client.take("q")
    assert (m.tuple, m.delivery_count) == (("b",), 2)


def test_kill_9_while_consuming_loses_nothing_and_redelivers_no_acked(tmp_path: Path) -> None:
    """Given a subscriber acking as it goes while a poster posts, when the
    server is killed with SIGKILL and restarted, I expect every answered post
    delivered at least once overall, and no delivery whose ack the board
    confirmed delivered again."""
    data = tmp_path / "board"
    server = ServerProcess(data)
    posted: set[tuple[object, ...]] = set()
    seen: dict[tuple[object, ...], int] = {}
    confirmed: set[tuple[object, ...]] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def poster(address: str) -> None:
        with Client(address, timeout=10) as c:
            i = 0
            while not stop.is_set():
                batch = [("m", i + k) for k in range(20)]
                try:
                    c.post_many("work", batch, batch=20)
                except MsgboardError:
                    return
                with lock:
                    posted.update(batch)
                i += 20

    def consume(address: str, until: float) -> None:
        with Client(address, timeout=10) as c:
            try:
                with c.subscribe("work", credit=50) as sub:
                    by_id: dict[int, tuple[object, ...]] = {}
                    for d in sub:
                        t = d.message.tuple
                        with lock:
                            seen[t] = seen.get(t, 0) + 1
                            assert t not in confirmed, f"{t} delivered again after a confirmed ack"
                            by_id[d.id] = t
                            confirmed.update(by_id[i] for i in sub.acked if i in by_id)
                        sub.ack(d)
                        if time.monotonic() > until:
                            return
            except MsgboardError:
                return

    with Client(server.address) as c:
        c.create_queue("work")
    threads = [
        threading.Thread(target=poster, args=(server.address,)),
        threading.Thread(target=consume, args=(server.address, time.monotonic() + 60)),
    ]
    for t in threads:
        t.start()
    time.sleep(1.5)
    server.kill()
    stop.set()
    for t in threads:
        t.join(30)
    assert posted and confirmed
    server = ServerProcess(data)
    try:
        drained = threading.Thread(target=consume, args=(server.address, 0))
        with Client(server.address) as c:
            left = c.get_queue("work").unprocessed
        with lock:
            missing = posted - set(seen)
        # Everything answered and not yet seen is still waiting.
        assert len(missing) <= left
        deadline = time.monotonic() + 30
        with Client(server.address) as c, c.subscribe("work", credit=100) as sub:
            while time.monotonic() < deadline:
                with lock:
                    if posted <= set(seen):
                        break
                d = next(sub)
                t = d.message.tuple
                with lock:
                    assert t not in confirmed, f"{t} delivered again after a confirmed ack"
                    seen[t] = seen.get(t, 0) + 1
                sub.ack(d)
        with lock:
            assert posted <= set(seen)
        del drained
    finally:
        assert server.stop() == 0
