"""A consumer's stream: ``Subscription`` (blocking) and
``AsyncSubscription`` (asyncio), which ``Client.subscribe`` and
``Client.subscribe_async`` open. Deliveries come in batches; acks made
while an ack request is in flight are held and go as one request.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import itertools
import queue as queue_
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc

from msgboard import codec
from msgboard.client.wire import in_stream, mapped, rpc_error, selector_view
from msgboard.errors import MsgboardError
from msgboard.results import SelectorView
from msgboard.spec import (
    Delivery,
)
from msgboard.tls import Connection
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc


def _ids(items: Iterable[Delivery | int]) -> list[int]:
    return [d.id if isinstance(d, Delivery) else d for d in items]


class _Stream(abc.ABC):
    """What both subscription kinds share: turning responses into
    deliveries, acks and errors, and coalescing acks: while one ack request
    is in flight (sent, not yet answered), the acks made meanwhile are held
    and go as one request when it is answered, or before any other request
    (so requests keep their order). A cumulative ack (``up_to``) is never
    held: it goes at once, carrying what was held."""

    def __init__(self) -> None:
        self._buffer: collections.deque[Delivery] = collections.deque()
        #: Delivery ids whose acks the board has made durable.
        self.acked: set[int] = set()
        #: Delivery ids the board could not ack, with why (NotFound: already
        #: acked or given back; InvalidArgument: never delivered). Acks are
        #: per delivery: these are information, the other acks went through.
        self.rejected: dict[int, MsgboardError] = {}
        self.selector: SelectorView | None = None
        #: The credit the board applies (what was asked, capped by the
        #: server) and the most message bytes it lets this consumer hold.
        self.effective_credit = 0
        self.max_outstanding_bytes = 0
        self._refs = itertools.count(1)
        self._lock = threading.Lock()
        #: Refs of the ack requests sent and not yet answered.
        self._in_flight: set[int] = set()
        #: The ack request being filled while another is in flight.
        self._held: pb.SubscribeRequest | None = None

    @abc.abstractmethod
    def _send(self, r: pb.SubscribeRequest | None) -> None:
        """Queues ``r`` for the stream (None: half-close); never blocks."""

    def _take(self, r: pb.SubscribeResponse) -> None:
        kind = r.WhichOneof("kind")
        if kind == "deliveries":
            self._buffer.extend(
                Delivery(d.id, codec.message_from_pb(d.message)) for d in r.deliveries.items
            )
        elif kind == "acked":
            self._answered(r.ref)
            self._note(r.acked)
        elif kind == "subscribed":
            self.selector = selector_view(r.subscribed)
            self.effective_credit = r.credit
            self.max_outstanding_bytes = r.max_outstanding_bytes
        elif kind == "error":
            self._answered(r.ref)
            e = in_stream(r.error)
            e.ref = r.ref
            raise e

    def _note(self, acks: pb.Acks) -> None:
        self.acked.update(acks.ids)
        for x in acks.rejected:
            self.rejected[x.id] = in_stream(x.error)

    def _answered(self, ref: int) -> None:
        with self._lock:
            if ref in self._in_flight:
                self._in_flight.discard(ref)
                if not self._in_flight:
                    self._release()

    def _release(self) -> None:
        """Sends the held acks (lock held)."""
        r, self._held = self._held, None
        if r is not None:
            self._in_flight.add(r.ref)
            self._send(r)

    def _ack(self, items: Iterable[Delivery | int], up_to: Delivery | int) -> int:
        last = up_to.id if isinstance(up_to, Delivery) else up_to
        ids = _ids(items)
        with self._lock:
            r = self._held
            if r is not None:
                r.ack.ids.extend(ids)
                r.ack.up_to = max(r.ack.up_to, last)
            else:
                r = pb.SubscribeRequest(ack=pb.Acks(ids=ids, up_to=last), ref=next(self._refs))
                self._held = r
            # A cumulative ack is a batch already, and what gives a COPY
            # consumer its credit back: it goes at once, with what was held.
            if not self._in_flight or last:
                self._release()
            return r.ref

    def _request(self, r: pb.SubscribeRequest | None) -> int:
        """Sends ``r`` after the held acks; returns its ref."""
        with self._lock:
            self._release()
            if r is not None:
                r.ref = next(self._refs)
            self._send(r)
        return 0 if r is None else r.ref

    def _nack(self, items: Iterable[Delivery | int], reject: bool, delay: float | None) -> int:
        n = pb.Nacks(ids=_ids(items), reject=reject)
        if delay is not None:
            n.delay.CopyFrom(codec.us_to_duration(round(delay * 1_000_000)))
        return self._request(pb.SubscribeRequest(nack=n))

    def _credit(self, n: int) -> int:
        return self._request(pb.SubscribeRequest(credit=n))

    def unread(self) -> list[Delivery]:
        """The deliveries received and not yet iterated, oldest first: a
        consumer that stops early can nack them rather than leave them to go
        back when the stream ends."""
        return list(self._buffer)


class Subscription(_Stream):
    """A consumer's stream (see ``Client.subscribe``). Iterating yields
    deliveries; an error the board reports about an ack or nack is raised
    from the iteration, which can go on after it."""

    def __init__(self, stub: pb_grpc.BoardStub, open_: pb.Subscription) -> None:
        super().__init__()
        self._requests: queue_.SimpleQueue[pb.SubscribeRequest | None] = queue_.SimpleQueue()
        self._requests.put(pb.SubscribeRequest(open=open_))
        call: Any = stub.Subscribe(iter(self._requests.get, None))
        self._call = call
        self._closed = False
        self._ended = False
        self._half_closed = False
        #: A read was interrupted (Ctrl-C) while under way: gRPC allows no
        #: second read on the call, and its locks may be left held.
        self._interrupted = False
        with mapped():
            self._take(next(call))

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Delivery]:
        return self

    def __next__(self) -> Delivery:
        while not self._buffer:
            try:
                r = next(self._call)
            except grpc.RpcError as e:
                if self._closed:
                    raise StopIteration from None
                raise rpc_error(e) from None
            except BaseException:  # KeyboardInterrupt in the middle of a read
                self._interrupted = True
                raise
            self._take(r)
        return self._buffer.popleft()

    def _send(self, r: pb.SubscribeRequest | None) -> None:
        self._requests.put(r)

    def ack(self, *items: Delivery | int, up_to: Delivery | int = 0) -> int:
        """Acks deliveries (and, with ``up_to``, every one up to it). Returns
        the ref of the request that carries it: while an ack request is in
        flight, acks are held and go together as one. Acks are per delivery:
        one the board cannot apply lands in ``rejected``, the others go
        through."""
        return self._ack(items, up_to)

    def nack(self, *items: Delivery | int, reject: bool = False, delay: float | None = None) -> int:
        """Gives deliveries back for redelivery, or dead-letters them;
        ``delay``: seconds before they are delivered again (default: the
        redelivery policy's next step). Returns the request's ref."""
        return self._nack(items, reject, delay)

    def credit(self, n: int) -> int:
        """Raises the credit by ``n`` messages (the board's cap still
        applies). Returns the request's ref."""
        return self._credit(n)

    def end(self) -> None:
        """Asks the board to end the stream (a half-close): it applies the
        acks and nacks sent so far, gives back the unacked deliveries, and
        the iteration ends once the deliveries already on their way are
        read. Safe from a signal handler or another thread, so a Ctrl-C
        handler can stop a consumer blocked in ``next``::

            signal.signal(signal.SIGINT, lambda *_: sub.end())
        """
        if not self._ended:
            self._ended = True
            # Acks held while another was in flight go first: ``_release``
            # sends them and then the half-close. Lock-free, so that a
            # signal handler never waits on the thread it interrupted.
            if self._held is None:
                self._half_close()

    def _release(self) -> None:
        super()._release()
        if self._ended:
            self._half_close()

    def _half_close(self) -> None:
        if not self._half_closed:
            self._half_closed = True
            self._requests.put(None)  # SimpleQueue.put is reentrant

    def close(self, wait: float = 5.0) -> None:
        """Ends the subscription: the board first applies the acks and nacks
        sent so far (waiting up to ``wait`` seconds), then gives back the
        unacked deliveries."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._release()  # the held acks go now, not after their turn
        self.end()
        if self._interrupted:
            return  # touching the call again could raise or hang
        timer = threading.Timer(wait, self._call.cancel)
        timer.start()
        try:
            with contextlib.suppress(grpc.RpcError):  # cancelled after ``wait``
                for r in self._call:
                    if r.WhichOneof("kind") == "acked":
                        self._note(r.acked)
        finally:
            timer.cancel()


class AsyncSubscription(_Stream):
    """``Subscription`` for asyncio, over its own channel."""

    def __init__(self, connection: Connection, open_: pb.Subscription) -> None:
        super().__init__()
        self._connection = connection
        self._open = open_
        self._requests: asyncio.Queue[pb.SubscribeRequest | None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._call: Any = None

    async def __aenter__(self) -> AsyncSubscription:
        self._channel = self._connection.aio_channel()
        requests: asyncio.Queue[pb.SubscribeRequest | None] = asyncio.Queue()
        self._requests = requests
        await requests.put(pb.SubscribeRequest(open=self._open))

        async def gen() -> AsyncIterator[pb.SubscribeRequest]:
            while (r := await requests.get()) is not None:
                yield r

        stub = pb_grpc.BoardStub(self._channel)
        self._call = stub.Subscribe(gen())
        with mapped():
            self._take(await self._call.read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Delivery:
        while not self._buffer:
            with mapped():
                r = await self._call.read()
            if r is grpc.aio.EOF:  # type: ignore[attr-defined]
                raise StopAsyncIteration
            self._take(r)
        return self._buffer.popleft()

    def _send(self, r: pb.SubscribeRequest | None) -> None:
        assert self._requests is not None
        self._requests.put_nowait(r)

    async def ack(self, *items: Delivery | int, up_to: Delivery | int = 0) -> int:
        return self._ack(items, up_to)

    async def nack(
        self, *items: Delivery | int, reject: bool = False, delay: float | None = None
    ) -> int:
        return self._nack(items, reject, delay)

    async def credit(self, n: int) -> int:
        return self._credit(n)

    async def close(self, wait: float = 5.0) -> None:
        """Ends the subscription as ``Subscription.close`` does: half-closes,
        reads the stream to its end so that the board applies every ack and
        nack sent so far (waiting up to ``wait`` seconds, then cancelling),
        and closes the channel."""
        if self._channel is None:
            return
        channel, self._channel = self._channel, None
        try:
            if self._requests is not None and self._call is not None:
                self._request(None)  # the held acks, then the half-close
                with contextlib.suppress(grpc.RpcError, TimeoutError):
                    await asyncio.wait_for(self._drain(), wait)
        finally:
            if self._call is not None:
                self._call.cancel()
            await channel.close(None)

    async def _drain(self) -> None:
        """Reads the stream to its end, keeping the acks it confirms."""
        while (r := await self._call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
            if r.WhichOneof("kind") == "acked":
                self.acked.update(r.acked.ids)
