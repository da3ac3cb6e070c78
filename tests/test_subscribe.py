"""Selectors, Subscribe and leases through the real gRPC server."""

from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from msgboard.client import Client, Delivery
from msgboard.engine import Limits
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


def test_a_bad_ack_is_information_and_the_other_acks_go_through(client: Client) -> None:
    """Given an ack of a delivery never made, then two acks of a real one,
    I expect the real one acked, the bad id in ``rejected`` (not raised),
    the repeated ack answered NOT_FOUND in ``rejected`` (nothing changed),
    and the stream carrying on."""
    client.create_queue("q")
    with client.subscribe("q") as sub:
        client.post("q", ("a",))
        d = next(sub)
        sub.ack(777)
        sub.ack(d)
        sub.ack(d)
        client.post("q", ("b",))
        assert next(sub).message.tuple == ("b",)
    assert d.id in sub.acked
    assert isinstance(sub.rejected[777], InvalidArgument)
    assert "never delivered" in str(sub.rejected[777])
    assert d.id not in sub.rejected
    assert [m.tuple for m in client.read("q", max=10)] == [("b",)]  # b went back


def test_acks_made_while_one_is_in_flight_go_as_one_request(client: Client) -> None:
    """Given five deliveries acked one by one without reading the stream in
    between, I expect the first ack sent alone and the four made while it
    was in flight held and sent as one request (one ref), all applied."""
    client.create_queue("q")
    client.post_many("q", [("n", i) for i in range(5)])
    with client.subscribe("q", credit=5) as sub:
        got = [next(sub) for _ in range(5)]
        refs = [sub.ack(d) for d in got]
    assert refs[0] != refs[1] and set(refs[1:]) == {refs[1]}
    assert sub.acked == {d.id for d in got} and not sub.rejected
    assert client.get_queue("q").unprocessed == 0


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
    assert client.ack("q", [d]).ids == [d.id]
    again = client.ack("q", [d])  # per lease: answered, not raised
    assert again.ids == [] and isinstance(again.rejected[d.id], NotFound)
    client.post("q", ("b",))
    [d] = client.take_leased("q", lease=30)
    client.ack("q", [d], nack=True)
    [m] = client.take("q", timeout=30)  # after the nack backoff
    assert (m.tuple, m.delivery_count) == (("b",), 2)


@pytest.mark.parametrize("every", [0, 25], ids=["ack-each", "cumulative-25"])
def test_kill_9_while_consuming_loses_nothing_and_redelivers_no_acked(
    tmp_path: Path, every: int
) -> None:
    """Given a subscriber acking as it goes (each delivery, or cumulatively
    every 25, so that acks' credit pulls deliveries that leave before the
    ack's commit) while a poster posts, when the server is killed with
    SIGKILL and restarted, I expect every answered post delivered at least
    once overall, and no delivery whose ack the board confirmed delivered
    again."""
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
                # This consumer dies with the board (a new one drains after).
                with c.subscribe("work", credit=50, reconnect=False) as sub:
                    by_id: dict[int, tuple[object, ...]] = {}
                    for d in sub:
                        t = d.message.tuple
                        with lock:
                            seen[t] = seen.get(t, 0) + 1
                            assert t not in confirmed, f"{t} delivered again after a confirmed ack"
                            by_id[d.id] = t
                            confirmed.update(by_id[i] for i in sub.acked if i in by_id)
                        if not every:
                            sub.ack(d)
                        elif d.id % every == 0:
                            sub.ack(up_to=d)
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


# -- bounded memory: the board caps what one consumer holds -----------------


def _served(tmp_path: Path, **limits: int) -> ServerThread:
    return ServerThread(tmp_path / "board", Limits(**limits)).start()


def test_the_effective_credit_is_capped_and_stated(tmp_path: Path) -> None:
    """Given a board capping credit at 5, when a consumer asks for 1,000,000,
    I expect the answer to say 5, and never more than 5 unacked, even after
    it adds credit."""
    server = _served(tmp_path, max_credit=5, max_outstanding_bytes=1 << 20)
    try:
        with Client(server.address, timeout=30) as client:
            client.create_queue("q")
            with client.subscribe("q", credit=1_000_000) as sub:
                assert (sub.effective_credit, sub.max_outstanding_bytes) == (5, 1 << 20)
                assert sub.selector is not None
                client.post_many("q", [("n", i) for i in range(20)])
                assert client.get_selector(sub.selector.id).outstanding == 5
                assert client.stats("q").queues[0].ready == 15
                sub.credit(1000)
                first = next(sub)
                client.post("q", ("more",))  # after the credit: one commit later
                assert client.get_selector(sub.selector.id).outstanding == 5
                sub.ack(first)
                got = [next(sub) for _ in range(5)]
                assert [d.message.tuple for d in got][-1] == ("n", 5)
                assert client.get_selector(sub.selector.id).outstanding == 5
    finally:
        server.stop()


def test_a_consumer_holds_at_most_max_outstanding_bytes(tmp_path: Path) -> None:
    """Given a cap of 10,000 bytes, when 3 KiB messages wait for a consumer
    with credit 100, I expect deliveries to stop once the cap is reached; a
    message larger than the whole cap still goes to a consumer holding none."""
    server = _served(tmp_path, max_outstanding_bytes=10_000)
    try:
        with Client(server.address, timeout=30) as client:
            client.create_queue("q")
            client.create_queue("big")
            with client.subscribe("q", credit=100) as sub:
                assert sub.selector is not None and sub.max_outstanding_bytes == 10_000
                client.post_many("q", [("m", i, b"x" * 3072) for i in range(10)])
                # 3 messages hold under 10,000 bytes: a 4th goes, then none.
                assert client.get_selector(sub.selector.id).outstanding == 4
                d = next(sub)
                sub.ack(d)
                for _ in range(4):
                    next(sub)
                assert client.get_selector(sub.selector.id).outstanding == 4
            with client.subscribe("big") as sub:
                client.post("big", ("huge", b"y" * 50_000))
                assert next(sub).message.tuple[0] == "huge"
    finally:
        server.stop()


def test_credit_for_a_durable_selector_is_capped_too(tmp_path: Path) -> None:
    server = _served(tmp_path, max_credit=3)
    try:
        with Client(server.address, timeout=30) as client:
            client.create_queue("q")
            sel = client.create_selector("q", credit=50)
            with client.subscribe(selector=sel.id) as sub:
                assert sub.effective_credit == 3
                client.post_many("q", [("n", i) for i in range(10)])
                assert client.get_selector(sel.id).outstanding == 3
    finally:
        server.stop()


def test_a_post_stream_reads_ahead_at_most_its_byte_cap(tmp_path: Path) -> None:
    """Given a writer held busy and a read-ahead cap of 250,000 bytes, when
    a client streams ten batches of 100 KB, I expect the server to have read
    three (the one that crossed the cap included), and every batch answered
    in order once the writer goes on."""
    server = _served(tmp_path, max_read_ahead_bytes=250_000)
    assert server.board is not None
    try:
        with Client(server.address, timeout=30) as client:
            client.create_queue("q")
        gate = threading.Event()
        writer = server.board._writer
        writer.submit(lambda b: gate.wait(30))
        batch = [pb.Message(body=b"x" * 10_000) for _ in range(10)]
        with grpc.insecure_channel(server.address) as ch:
            reqs = Requests(
                [pb.PostStreamRequest(batch_id=i, queue="q", messages=batch) for i in range(10)]
            )
            call = pb_grpc.BoardStub(ch).PostStream(reqs)
            time.sleep(0.5)  # (lets the server read what it will: not needed to pass)
            assert writer._inbox.qsize() <= 3
            gate.set()
            reqs.put(None)
            answers = list(call)
        assert [(r.batch_id, len(r.seqs)) for r in answers] == [(i, 10) for i in range(10)]
    finally:
        server.stop()


# -- answers on a Subscribe stream --------------------------------------------


def test_a_cumulative_ack_is_never_held(client: Client) -> None:
    """Given an ack in flight and one held behind it, when the consumer acks
    cumulatively and then reads nothing more, I expect the board to apply
    all of them anyway: the cumulative ack went at once, carrying the held
    one (a COPY consumer gets its credit back through it)."""
    client.create_queue("q")
    client.post_many("q", [("n", i) for i in range(4)])
    with client.subscribe("q", credit=4) as sub:
        got = [next(sub) for _ in range(4)]
        first = sub.ack(got[0])
        held = sub.ack(got[1])
        assert sub.ack(up_to=got[3]) == held != first
        deadline = time.monotonic() + 30
        while client.get_queue("q").unprocessed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get_queue("q").unprocessed == 0


def test_answers_come_in_request_order_with_their_ref(client: Client) -> None:
    """Given a credit refused on arrival, an ack and a nack of the acked
    delivery, I expect the error answers in the order sent, each carrying
    the ref of its request, and the ack applied before the nack."""
    client.create_queue("q")
    with client.subscribe("q") as sub:
        client.post("q", ("a",))
        d = next(sub)
        refs = [sub.credit(-1), sub.ack(d), sub.nack(d)]
        assert refs == sorted(set(refs))
        with pytest.raises(InvalidArgument, match="credit: must not be negative") as first:
            next(sub)
        with pytest.raises(MsgboardError) as second:  # the nack of an acked delivery
            next(sub)
        assert (first.value.ref, second.value.ref) == (refs[0], refs[2])
        assert d.id in sub.acked


def test_an_ack_request_answers_each_id_it_could_not_ack(server: ServerThread) -> None:
    """Given an ack of a real delivery with an unknown id and an up_to past
    the last delivery, then the same ack again, I expect the first to ack
    the real one and reject the unknown id (the up_to covers what was
    delivered and is not rejected), and the repeat to reject the real one as
    already acked, naming its place: answers, not errors."""
    with Client(server.address) as client:
        client.create_queue("q")
        client.post("q", ("a",))
    with grpc.insecure_channel(server.address) as ch:
        reqs = Requests([pb.SubscribeRequest(open=pb.Subscription(queue="q"))])
        call = pb_grpc.BoardStub(ch).Subscribe(reqs)
        assert next(call).WhichOneof("kind") == "subscribed"
        [d] = next(call).deliveries.items
        reqs.put(pb.SubscribeRequest(ack=pb.Acks(ids=[99, d.id], up_to=50), ref=1))
        reqs.put(pb.SubscribeRequest(ack=pb.Acks(ids=[d.id]), ref=2))
        reqs.put(None)
        first, second = [r for r in call if r.WhichOneof("kind") == "acked"]
        assert (first.ref, list(first.acked.ids)) == (1, [d.id])
        assert [(x.id, x.error.name) for x in first.acked.rejected] == [(99, "InvalidArgument")]
        assert (second.ref, list(second.acked.ids)) == (2, [])
        assert [(x.id, x.error.code, x.error.message) for x in second.acked.rejected] == [
            (
                d.id,
                grpc.StatusCode.NOT_FOUND.value[0],
                f"ack.ids[0]: delivery {d.id} was already acked or given back",
            )
        ]
        assert "already acked" in second.acked.rejected[0].error.message


def test_acks_are_confirmed_with_their_ref(server: ServerThread) -> None:
    with Client(server.address) as client:
        client.create_queue("q")
        client.post_many("q", [("n", i) for i in range(3)])
    with grpc.insecure_channel(server.address) as ch:
        requests: list[pb.SubscribeRequest] = [
            pb.SubscribeRequest(open=pb.Subscription(queue="q", credit=3))
        ]
        reqs = Requests(requests)
        call = pb_grpc.BoardStub(ch).Subscribe(reqs)
        assert next(call).WhichOneof("kind") == "subscribed"
        ids: list[int] = []
        while len(ids) < 3:
            ids += [d.id for d in next(call).deliveries.items]
        for i, ref in zip(ids, (41, 42, 43), strict=True):
            reqs.put(pb.SubscribeRequest(ack=pb.Acks(ids=[i]), ref=ref))
        reqs.put(None)
        answers = [r for r in call if r.WhichOneof("kind") == "acked"]
        assert [(list(r.acked.ids), r.ref) for r in answers] == [
            ([ids[0]], 41),
            ([ids[1]], 42),
            ([ids[2]], 43),
        ]


class Requests:
    """Requests for a raw stream: ``put`` more, ``put(None)`` half-closes."""

    def __init__(self, first: Sequence[Any]) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for r in first:
            self._q.put(r)

    def put(self, r: Any) -> None:
        self._q.put(r)

    def __iter__(self) -> Requests:
        return self

    def __next__(self) -> Any:
        r = self._q.get()
        if r is None:
            raise StopIteration
        return r


def test_a_subscriber_gone_with_acks_in_flight_ends_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a consumer whose acks wait behind a busy writer, when it
    half-closes and disconnects before they commit, I expect its messages
    back in the queue and nothing logged above INFO."""
    caplog.set_level(logging.INFO)
    server = ServerThread(tmp_path / "board").start()
    assert server.board is not None
    try:
        with Client(server.address, timeout=30) as client:
            client.create_queue("q")
            client.post_many("q", [("n", i) for i in range(10)])
            with grpc.insecure_channel(server.address) as ch:
                reqs = Requests([pb.SubscribeRequest(open=pb.Subscription(queue="q", credit=10))])
                call = pb_grpc.BoardStub(ch).Subscribe(reqs)
                sid = next(call).subscribed.id
                ids = [d.id for d in next(call).deliveries.items]
                # Hold the writer thread, so the acks stay in flight.
                gate = threading.Event()
                server.board._writer.submit(lambda b: gate.wait(30))
                for i in ids:
                    reqs.put(pb.SubscribeRequest(ack=pb.Acks(ids=[i])))
                reqs.put(None)  # half-close...
                time.sleep(0.3)  # (lets the server read it: not needed to pass)
                call.cancel()  # ...and gone before the acks commit
                time.sleep(0.3)
                gate.set()
            while True:  # until the board has seen it go
                try:
                    client.get_selector(sid)
                except NotFound:
                    break
                time.sleep(0.01)
            assert client.stats("q").queues[0].outstanding == 0
    finally:
        server.stop()
    gc.collect()
    loud = [r for r in caplog.records if r.levelno > logging.INFO]
    assert not loud, [r.getMessage() for r in loud]


def test_serve_flags_set_the_caps(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "board", "--max-credit", "7", "--max-outstanding-bytes", "5000"
    )
    try:
        with Client(server.address) as client:
            client.create_queue("q")
            with client.subscribe("q", credit=500) as sub:
                assert (sub.effective_credit, sub.max_outstanding_bytes) == (7, 5000)
    finally:
        assert server.stop() == 0
