"""A consumer's stream: ``Subscription`` (blocking) and
``AsyncSubscription`` (asyncio), which ``Client.subscribe`` and
``Client.subscribe_async`` open. Deliveries come in batches; acks made
while an ack request is in flight are held and go as one request.

A subscription (either kind) whose stream is lost to UNAVAILABLE (the
board stopped or restarted) subscribes again by itself, waiting between attempts
(``RECONNECT_WAIT`` doubling up to ``MAX_RECONNECT_WAIT``, jittered), and
its iteration carries on: the deliveries left unacked come again, under new
ids. Delivery ids keep increasing across streams, so an id of a lost stream
never names a delivery of the new one: acking one is rejected (NotFound,
in ``rejected``), and an ack in flight when the stream broke is rejected as
Unavailable (applied or not; if not, its message comes again).

A subscription follows the primary with its client (``Failover``): a
stream refused by a standby (NotPrimary) is opened at once on the primary
it names, one lost with its board on the next address. On the new primary
the deliveries left unacked on the old one are waiting messages again and
come again (at-least-once); an ack of one made on the old primary is
rejected as above (NotFound, or Unavailable when in flight), never
reported acked unless the board said so.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import itertools
import queue as queue_
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import grpc

from msgboard import codec
from msgboard.client.failover import Failover
from msgboard.client.wire import in_stream, mapped, rpc_error, selector_view
from msgboard.errors import MsgboardError, NotFound, StoreError, Unavailable
from msgboard.results import SelectorView
from msgboard.spec import (
    Delivery,
)
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

#: Jitter of its own: a client never draws from (or moves) the application's
#: global random state, which threads of a client may touch at any time.
JITTER = random.Random()

#: Seconds between attempts to subscribe again: the first wait, doubled
#: after each failed attempt up to the second, each less up to half of it
#: at random (so that many consumers do not come back at once).
RECONNECT_WAIT = 0.1
MAX_RECONNECT_WAIT = 5.0

#: What grpc.aio says for a write to a stream the board has ended.
_CORE_INTERNAL = "Internal error from Core"

#: Called when a stream is lost (with the error) and when it is open again
#: (with None).
OnReconnect = Callable[[MsgboardError | None], None]


def _ids(items: Iterable[Delivery | int]) -> list[int]:
    return [d.id if isinstance(d, Delivery) else d for d in items]


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt`` (0: at once)."""
    if attempt == 0:
        return 0.0
    wait = min(MAX_RECONNECT_WAIT, RECONNECT_WAIT * 2.0 ** (attempt - 1))
    return wait / 2 + JITTER.uniform(0, wait / 2)


def _next_wait(at_once: bool, attempt: int, quick: int) -> tuple[float, int, int]:
    """The wait before the next attempt to subscribe again, and the counts
    after it: none to follow a standby to its primary (up to three times in
    a row), else ``backoff``."""
    if at_once and quick < 3:
        return 0.0, attempt, quick + 1
    return backoff(attempt), attempt + 1, 0


class _Stream(abc.ABC):
    """What both subscription kinds share: turning responses into
    deliveries, acks and errors, and coalescing acks: while one ack request
    is in flight (sent, not yet answered), the acks made meanwhile are held
    and go as one request when it is answered, or before any other request
    (so requests keep their order). A cumulative ack (``up_to``) is never
    held: it goes at once, carrying what was held."""

    def __init__(self, reconnect: bool, on_reconnect: OnReconnect | None) -> None:
        self._reconnect = reconnect
        self._on_reconnect = on_reconnect
        self._call: Any = None
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
        #: The ack requests sent and not yet answered, by ref.
        self._in_flight: dict[int, pb.SubscribeRequest] = {}
        #: This stream's delivery ids are ``_base`` + the board's;
        #: ``_last`` is the highest id given out.
        self._base = 0
        self._last = 0
        #: The ack request being filled while another is in flight.
        self._held: pb.SubscribeRequest | None = None

    @abc.abstractmethod
    def _send(self, r: pb.SubscribeRequest | None) -> None:
        """Queues ``r`` for the stream (None: half-close); never blocks."""

    def _take(self, r: pb.SubscribeResponse) -> None:
        kind = r.WhichOneof("kind")
        if kind == "deliveries":
            base = self._base
            self._buffer.extend(
                Delivery(base + d.id, codec.message_from_pb(d.message)) for d in r.deliveries.items
            )
            if r.deliveries.items:
                self._last = max(self._last, base + r.deliveries.items[-1].id)
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
        self.acked.update(self._base + i for i in acks.ids)
        for x in acks.rejected:
            self.rejected[self._base + x.id] = in_stream(x.error)

    def _answered(self, ref: int) -> None:
        with self._lock:
            if self._in_flight.pop(ref, None) is not None and not self._in_flight:
                self._release()

    def _release(self) -> None:
        """Sends the held acks (lock held)."""
        r, self._held = self._held, None
        if r is not None:
            self._in_flight[r.ref] = r
            self._send(r)

    def _board(self, ids: Iterable[int], note: bool) -> list[int]:
        """The ids as the current stream's, leaving out those of a lost
        stream (put in ``rejected`` when ``note``)."""
        out = []
        for i in ids:
            if i > self._base:
                out.append(i - self._base)
            elif i > 0 and note:
                self.rejected[i] = NotFound(
                    f"delivery {i} came on a stream that was lost: its message comes again "
                    "under a new id"
                )
        return out

    def _lose(self, cause: MsgboardError) -> None:
        """Ends the lost call, forgets its stream, and says so."""
        self._call.cancel()
        self._forget()
        if self._on_reconnect is not None:
            self._on_reconnect(cause)

    def _forget(self) -> None:
        """Forgets a lost stream: its acks in flight or held are rejected
        (Unavailable), its deliveries not yet read dropped (they come again),
        and the next stream's ids start above the last one given out."""
        lost = Unavailable(
            "the stream was lost before the board answered this ack; its message comes "
            "again unless the ack was applied"
        )
        with self._lock:
            requests = [*self._in_flight.values(), *([self._held] if self._held else [])]
            for r in requests:
                for i in [*r.ack.ids, *([r.ack.up_to] if r.ack.up_to else [])]:
                    self.rejected[self._base + i] = lost
            self._in_flight.clear()
            self._held = None
            self._buffer.clear()
            self._base = self._last

    def _ack(self, items: Iterable[Delivery | int], up_to: Delivery | int) -> int:
        with self._lock:
            asked = up_to.id if isinstance(up_to, Delivery) else up_to
            ids = self._board(_ids(items), True)
            last = next(iter(self._board([asked], True)), 0) if asked else 0
            if not ids and not last:
                return 0  # only deliveries of a lost stream: nothing to send
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
        asked = _ids(items)
        ids = self._board(asked, False)
        if asked and not ids:
            return 0  # deliveries of a lost stream come again anyway
        n = pb.Nacks(ids=ids, reject=reject)
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
    from the iteration, which can go on after it. A stream lost to
    UNAVAILABLE is opened again (unless ``reconnect`` is False; see the
    module's docstring); ``on_reconnect`` hears of it."""

    def __init__(
        self,
        failover: Failover,
        open_: pb.Subscription,
        *,
        reconnect: bool = True,
        on_reconnect: OnReconnect | None = None,
    ) -> None:
        super().__init__(reconnect, on_reconnect)
        self._failover = failover
        self._address = failover.address
        self._open = open_
        self._closed = False
        self._ended = False
        #: Set by ``end``: wakes a wait between attempts to subscribe again.
        self._woken = threading.Event()
        #: A read was interrupted (Ctrl-C) while under way: gRPC allows no
        #: second read on the call, and its locks may be left held.
        self._interrupted = False
        # Opening is safe to do again: a refused or broken opening leaves
        # no selector behind (a session selector ends with its stream).
        failover.run(lambda _: self._start(), again=True)

    def _start(self) -> None:
        """Opens a stream on the current board and reads its answer to the
        opening."""
        self._half_closed = False
        self._requests: queue_.SimpleQueue[pb.SubscribeRequest | None] = queue_.SimpleQueue()
        self._requests.put(pb.SubscribeRequest(open=self._open))
        self._address, _, stub = self._failover.channel()
        call: Any = stub.Subscribe(iter(self._requests.get, None))
        self._call = call
        try:
            with mapped():
                self._take(next(call))
        except BaseException:
            self._requests.put(None)  # lets gRPC's thread of the failed call go
            raise

    def _reopen(self, cause: MsgboardError) -> None:
        """Opens a new stream after ``cause`` lost the last, waiting between
        attempts; raises StopIteration once ended, or the error of an
        attempt that is no outage (NotFound, PermissionDenied...)."""
        self._requests.put(None)  # lets gRPC's thread of the lost call go
        self._lose(cause)
        at_once = self._failover.moved(self._address, cause)
        attempt = quick = 0
        while True:
            wait, attempt, quick = _next_wait(at_once, attempt, quick)
            self._woken.wait(wait)
            if self._ended or self._closed:
                raise StopIteration
            try:
                self._start()
            except Unavailable as e:
                at_once = self._failover.moved(self._address, e)
                continue
            if self._ended:  # end() came while this stream was being opened
                self._half_close()
            if self._on_reconnect is not None:
                self._on_reconnect(None)
            return

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
                error = rpc_error(e)
                if not self._reconnect or self._ended or not isinstance(error, Unavailable):
                    raise error from None
                self._reopen(error)
                continue
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
            self._woken.set()
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
    """``Subscription`` for asyncio, over its own channel; it subscribes
    again after a lost stream as ``Subscription`` does."""

    def __init__(
        self,
        failover: Failover,
        open_: pb.Subscription,
        *,
        reconnect: bool = True,
        on_reconnect: OnReconnect | None = None,
    ) -> None:
        super().__init__(reconnect, on_reconnect)
        self._failover = failover
        self._address = ""
        self._open = open_
        self._requests: asyncio.Queue[pb.SubscribeRequest | None] | None = None
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> AsyncSubscription:
        await self._connect()
        deadline = 0.0
        attempt = 0
        while True:
            try:
                await self._start()
                return self
            except Unavailable as e:
                if not self._failover.on:
                    await self.close()
                    raise
                at_once = self._failover.moved(self._address, e)
                now = time.monotonic()
                deadline = deadline or now + self._failover.seconds
                wait = 0.0 if at_once and attempt < 3 else backoff(attempt)
                if now + wait > deadline:
                    await self.close()
                    raise
                attempt += 1
                await asyncio.sleep(wait)
                await self._connect()

    async def _connect(self) -> None:
        """A channel to the board the client's failover names now."""
        address = self._failover.address
        if self._channel is not None and address == self._address:
            return
        old, self._address = self._channel, address
        self._channel = self._failover.connection(address).aio_channel()
        if old is not None:
            await old.close(None)

    async def _start(self) -> None:
        """Opens a stream and reads the board's answer to the opening."""
        assert self._channel is not None
        requests: asyncio.Queue[pb.SubscribeRequest | None] = asyncio.Queue()
        self._requests = requests
        await requests.put(pb.SubscribeRequest(open=self._open))

        async def gen() -> AsyncIterator[pb.SubscribeRequest]:
            while (r := await requests.get()) is not None:
                yield r

        stub = pb_grpc.BoardStub(self._channel)
        self._call = stub.Subscribe(gen())
        try:
            with mapped():
                self._take(await self._call.read())
        except StoreError as e:
            # grpc.aio reports a board that ends the stream before the
            # opening is written (a standby's refusal) as this INTERNAL
            # instead of the board's status (grpc/grpc#36066): an outage of
            # the opening, which is safe to try again.
            if str(e) != _CORE_INTERNAL:
                raise
            raise Unavailable(f"the board ended the stream as it opened ({e})") from None

    async def _reopen(self, cause: MsgboardError) -> None:
        """``Subscription._reopen`` for asyncio: raises StopAsyncIteration
        once closed, or the error of an attempt that is no outage."""
        self._lose(cause)
        at_once = self._failover.moved(self._address, cause)
        attempt = quick = 0
        while True:
            wait, attempt, quick = _next_wait(at_once, attempt, quick)
            await asyncio.sleep(wait)
            if self._channel is None:  # closed meanwhile
                raise StopAsyncIteration
            await self._connect()
            try:
                await self._start()
            except Unavailable as e:
                at_once = self._failover.moved(self._address, e)
                continue
            if self._on_reconnect is not None:
                self._on_reconnect(None)
            return

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Delivery:
        while not self._buffer:
            try:
                with mapped():
                    r = await self._call.read()
            except Unavailable as e:
                if not self._reconnect or self._channel is None:
                    raise
                await self._reopen(e)
                continue
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
