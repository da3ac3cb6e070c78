"""The Python client: ``Client(address)`` over gRPC.

::

    from msgboard.client import ANY, Client, Range

    with Client("127.0.0.1:7878") as c:
        c.create_queue("jobs")
        c.post("jobs", ("job", 7, "resize", 3), body=b"...")
        [msg] = c.take("jobs", ("job", int, ANY, Range(1, 10)), timeout=5)

Python tuples are board tuples. A template is written as a tuple in which a
type (``int``, ``str`` …) is a formal, ``ANY`` matches anything, ``Range``
and ``Prefix`` are patterns and anything else is an actual value; a list of
templates is a set of alternatives. Address patterns are strings in the CLI
notation (``"topic:rec.pets.*"``, ``"prefix:rec."``, ``"eq:a"`` or a bare
name). Errors are the classes of ``msgboard.errors``, never a raw RpcError.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import grpc

from msgboard import codec
from msgboard.associative import AddressPattern, Pattern
from msgboard.client.admin import Admin
from msgboard.client.failover import DEFAULT_SERVER, Calls, Failover, addresses_of, new_key
from msgboard.client.patterns import Templates, make_pattern, start_position
from msgboard.client.publisher import Poster, Publisher
from msgboard.client.subscription import AsyncSubscription, OnReconnect, Subscription
from msgboard.client.wire import in_stream, mapped
from msgboard.errors import InvalidArgument, Unavailable
from msgboard.message import Message, Section, Value
from msgboard.results import (
    Acked,
    Page,
    Start,
)
from msgboard.spec import (
    Delivery,
    Disposition,
    Position,
    Receipt,
    Redelivery,
)
from msgboard.tls import Connection
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

__all__ = ["DEFAULT_SERVER", "Client"]
#: Extra seconds a blocking call's gRPC deadline gets beyond its timeout, so
#: that the server answers "nothing in time" before the deadline cuts it off.
_MARGIN = 30.0


class Client(Admin, Poster):
    """A connection to one board: posting, taking, reading, browsing,
    leases and subscriptions here; queues, selectors, consumers, stats and
    snapshots from ``Admin`` (msgboard/client/admin.py)."""

    def __init__(
        self,
        address: str | Sequence[str] | None = None,
        *,
        timeout: float | None = 60.0,
        token: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls: bool = False,
        failover: float | None = None,
    ) -> None:
        """``address``: HOST:PORT, or several (``"a,b,c"`` or a list; default
        ``$MSGBOARD_SERVER``, which may be a list too, else 127.0.0.1:7878).
        ``failover``: seconds a call keeps looking for the primary among
        them after a failure (None: 30 with more than one address, else 0,
        off; see ``msgboard.client.failover``). With failover on, a post
        gets an idempotency key when it has none, so that it may be sent
        again. ``token``: a bearer token (default ``$MSGBOARD_TOKEN``), sent only
        over TLS or to loopback. ``tls_ca``: connect with TLS trusting this
        CA file (default ``$MSGBOARD_TLS_CA``; ``tls=True``: the system's
        roots). ``tls_cert`` and ``tls_key``: a client certificate for
        mutual TLS."""
        env = os.environ
        addresses = addresses_of(address)
        self.timeout = timeout
        self._failover = Failover(
            Connection(
                addresses[0],
                token=token if token is not None else env.get("MSGBOARD_TOKEN", ""),
                tls_ca=tls_ca if tls_ca is not None else env.get("MSGBOARD_TLS_CA", ""),
                tls_cert=tls_cert or "",
                tls_key=tls_key or "",
                tls=tls,
            ),
            addresses,
            failover,
        )
        self._calls = Calls(self._failover)

    @property
    def _stub(self) -> pb_grpc.BoardStub:
        """The current board's plain gRPC stub (no failover, RpcErrors)."""
        return self._failover.channel()[2]

    @property
    def address(self) -> str:
        """The board this client talks to now (the primary, once found)."""
        return self._failover.address

    @property
    def addresses(self) -> list[str]:
        """The boards this client was given."""
        return list(self._failover.addresses)

    @property
    def connection(self) -> Connection:
        """How this client reaches the board it talks to now."""
        return self._failover.connection()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._failover.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the current board answers (with failover on: any of
        the boards, which becomes the current one); Unavailable if none
        does in time."""
        deadline = time.monotonic() + timeout
        while True:
            address, channel, _ = self._failover.channel()
            wait = deadline - time.monotonic()
            if self._failover.on:
                wait = min(wait, 0.5)  # then the next address
            try:
                grpc.channel_ready_future(channel).result(timeout=max(wait, 0.0))
                return
            except grpc.FutureTimeoutError:
                if time.monotonic() >= deadline:
                    raise Unavailable(f"no board answers at {self.address}") from None
                self._failover.moved(address, Unavailable("failed to connect to all addresses"))

    # -- posting --------------------------------------------------------

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction (one unary Post)."""
        # With failover on, keyed so that it may be sent again; a duplicate
        # of a key the client made is its own earlier attempt, stored.
        mine = [self._failover.on and not m.key for m in messages]
        if any(mine):
            messages = [m if m.key else dataclasses.replace(m, key=new_key()) for m in messages]
        req = pb.PostRequest(queue=queue, messages=codec.messages_to_pb(messages))
        r = self._calls.Post(req, timeout=self.timeout)
        return [
            Receipt(x.seq, Disposition.STORED)
            if own and x.seq and x.disposition is Disposition.DUPLICATE
            else x
            for own, x in zip(mine, codec.receipts_from_pb(r.seqs, r.dispositions), strict=True)
        ]

    def post_many(
        self,
        queue: str,
        messages: Iterable[Message | Sequence[Value]],
        *,
        batch: int = 500,
        progress: Callable[[int], None] | None = None,
    ) -> list[int]:
        """Posts many messages over one PostStream, ``batch`` per request,
        without waiting for each batch; returns every seq. A batch the
        board refuses raises its error after the stream ends (batches before
        it are stored). ``progress`` is called with the number of messages
        stored so far as each batch is answered. With failover on, the
        first batch goes as one unary Post (keyed and sent again as ``post``
        is), which finds the primary; the stream of the rest is not sent
        again if it breaks (the batches answered are stored)."""
        errors: list[pb.Error] = []
        bad: list[InvalidArgument] = []

        def chunks() -> Iterator[list[pb.Message]]:
            chunk: list[pb.Message] = []
            for i, m in enumerate(messages):
                if not isinstance(m, Message):
                    m = Message(tuple=builtins.tuple(m))
                if first and i < batch and not m.key:
                    m = dataclasses.replace(m, key=new_key())
                try:
                    chunk.append(codec.message_to_pb(m, record=True))  # as a post keeps it
                except InvalidArgument as e:  # ends the stream; raised after it
                    bad.append(e.within(f"messages[{i}]"))
                    return
                if len(chunk) >= batch:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk

        first = self._failover.on
        parts = chunks()
        seqs: list[int] = []
        if first and (head := next(parts, None)) is not None:
            r = self._calls.Post(pb.PostRequest(queue=queue, messages=head), timeout=self.timeout)
            seqs.extend(r.seqs)
            if progress is not None:
                progress(len(seqs))

        def requests() -> Iterator[pb.PostStreamRequest]:
            for n, chunk in enumerate(parts, 1):
                yield pb.PostStreamRequest(batch_id=n, queue=queue, messages=chunk)

        with mapped():
            for r in self._stub.PostStream(requests()):
                if r.HasField("error"):
                    errors.append(r.error)
                else:
                    seqs.extend(r.seqs)
                    if progress is not None:
                        progress(len(seqs))
        if errors:
            raise in_stream(errors[0])
        if bad:
            raise bad[0]
        return seqs

    def publisher(self, *, idempotent: bool | None = None, retry_for: float = 60.0) -> Publisher:
        """Opens a PostStream for posting one batch at a time, each answered
        once durable before the next is sent: a producer that needs every
        message confirmed keeps one open rather than pay a call's set-up per
        unary Post (RabbitMQ's confirm channel, Redis's connection)::

            with client.publisher() as pub:
                for job in jobs:
                    pub.post("jobs", ("job", job.id), body=job.data)

        ``idempotent``: each message gets a key if it has none, and a batch
        whose answer is lost is sent again with the same keys, for up to
        ``retry_for`` seconds (``Publisher``), on the primary wherever it
        moved: stored once, whatever fails. Default: on when failover is.
        """
        if idempotent is None:
            idempotent = self._failover.on
        return Publisher(self._failover, idempotent=idempotent, retry_for=retry_for)

    # -- taking, reading, browsing --------------------------------------

    def take(
        self,
        queue: str,
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        filter: str = "",
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Message]:
        """Removes and returns up to ``max`` of the oldest matching messages,
        waiting up to ``timeout`` seconds for a first (0: try once)."""
        req = pb.TakeRequest(queue=queue, max=max)
        return self._match(self._calls.Take, req, make_pattern(templates, address, filter), timeout)

    def read(
        self,
        queue: str,
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        filter: str = "",
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Message]:
        """Like take, but leaves the messages on the queue."""
        req = pb.ReadRequest(queue=queue, max=max)
        return self._match(self._calls.Read, req, make_pattern(templates, address, filter), timeout)

    def _match(self, rpc: Any, req: Any, pattern: Pattern, timeout: float) -> list[Message]:
        codec.pattern_to_pb(pattern, req.pattern)
        req.timeout.FromNanoseconds(int(timeout * 1e9))
        with mapped():
            r = rpc(req, timeout=self._deadline(timeout))
        return [codec.message_from_pb(m) for m in r.messages]

    def browse(
        self,
        queue: str,
        start: Start | str = Start.OLDEST,
        *,
        seq: int = 0,
        since: int = 0,
        reverse: bool = False,
        limit: int = 100,
        section: Section | str | None = None,
        templates: Templates = None,
        address: str | AddressPattern | None = None,
        filter: str = "",
    ) -> Page:
        """One page of the queue in seq order; pass ``Start.SEQ`` with the
        page's ``next_seq`` for the next one. ``since``: µs since the epoch."""
        start = Start(start)
        req = pb.BrowseRequest(
            queue=queue,
            start=codec.browse_start_to_pb(start),
            start_seq=seq,
            direction=pb.DIRECTION_BACKWARD if reverse else pb.DIRECTION_FORWARD,
            limit=limit,
            pattern=codec.pattern_to_pb(make_pattern(templates, address, filter)),
        )
        if since:
            codec.us_to_ts(since, req.start_time)
        if section is not None:
            req.section = codec.SECTION.to_pb[Section(section)]
        with mapped():
            r = self._calls.Browse(req, timeout=self.timeout)
        return Page([codec.message_from_pb(m) for m in r.messages], r.next_seq)

    # -- leases -----------------------------------------------------------

    def take_leased(
        self,
        queue: str,
        templates: Templates = None,
        *,
        lease: float,
        address: str | AddressPattern | None = None,
        filter: str = "",
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Delivery]:
        """Like take, but the messages stay invisible in the queue until
        ``ack``ed by delivery id; if the lease runs out first they come back."""
        req = pb.TakeRequest(queue=queue, max=max)
        req.lease.FromNanoseconds(int(lease * 1e9))
        codec.pattern_to_pb(make_pattern(templates, address, filter), req.pattern)
        req.timeout.FromNanoseconds(int(timeout * 1e9))
        with mapped():
            r = self._calls.Take(req, timeout=self._deadline(timeout))
        return [
            Delivery(i, codec.message_from_pb(m))
            for i, m in zip(r.lease_ids, r.messages, strict=True)
        ]

    def ack(self, queue: str, leases: Iterable[Delivery | int], *, nack: bool = False) -> Acked:
        """Acks leased messages (processed for good); with ``nack`` gives
        them back (after the nack backoff). Acks are per lease: the answer's ``ids`` are the
        leases applied, its ``rejected`` each one that could not be, by
        lease id, with why (NotFound: already acked or given back, or run
        out; InvalidArgument: never given, or on another queue)."""
        ids = [d.id if isinstance(d, Delivery) else d for d in leases]
        with mapped():
            r = self._calls.Ack(
                pb.AckRequest(queue=queue, lease_ids=ids, nack=nack), timeout=self.timeout
            )
        return Acked(list(r.lease_ids), {x.id: in_stream(x.error) for x in r.rejected})

    # -- subscriptions --------------------------------------------------

    def subscribe(
        self,
        queue: str = "",
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        pattern: Pattern | None = None,
        filter: str = "",
        copy: bool = False,
        credit: int = 0,
        start: Position | str | int = Position.CURRENT,
        start_time: int = 0,
        selector: str = "",
        reconnect: bool = True,
        on_reconnect: OnReconnect | None = None,
        redelivery: Redelivery | None = None,
    ) -> Subscription:
        """Opens a subscription: a session MOVE (or ``copy``) selector on
        ``queue``, or attaches to the durable terminal selector ``selector``.
        Iterate it for deliveries and ack or nack each::

            with client.subscribe("jobs", credit=10) as sub:
                for d in sub:
                    work(d.message)
                    sub.ack(d)

        A stream lost to UNAVAILABLE (the board restarted) is opened again
        with backoff unless ``reconnect`` is False; ``on_reconnect`` is
        called with the error when it is lost and with None once back (see
        ``msgboard.client.subscription``). ``redelivery``: how its nacked or
        lost deliveries are delayed before they are delivered again
        (default: the queue's policy).
        """
        return Subscription(
            self._failover,
            _open(
                queue,
                pattern or make_pattern(templates, address, filter),
                copy,
                credit,
                start,
                start_time,
                selector,
                redelivery,
            ),
            reconnect=reconnect,
            on_reconnect=on_reconnect,
        )

    def subscribe_async(
        self,
        queue: str = "",
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        pattern: Pattern | None = None,
        filter: str = "",
        copy: bool = False,
        credit: int = 0,
        start: Position | str | int = Position.CURRENT,
        start_time: int = 0,
        selector: str = "",
        reconnect: bool = True,
        on_reconnect: OnReconnect | None = None,
    ) -> AsyncSubscription:
        """``subscribe`` for asyncio (it subscribes again after a lost
        stream in the same way)::

        async with client.subscribe_async("jobs") as sub:
            async for d in sub:
                await sub.ack(d)
        """
        return AsyncSubscription(
            self._failover,
            _open(
                queue,
                pattern or make_pattern(templates, address, filter),
                copy,
                credit,
                start,
                start_time,
                selector,
            ),
            reconnect=reconnect,
            on_reconnect=on_reconnect,
        )

    def _deadline(self, timeout: float) -> float | None:
        return None if self.timeout is None else max(self.timeout, timeout + _MARGIN)


def _open(
    queue: str,
    pat: Pattern,
    copy: bool,
    credit: int,
    start: Position | str | int,
    start_time: int,
    selector: str,
    redelivery: Redelivery | None = None,
) -> pb.Subscription:
    position, seq = start_position(start)
    o = pb.Subscription(
        queue=queue,
        op=pb.OPERATION_COPY if copy else pb.OPERATION_UNSPECIFIED,
        credit=credit,
        start_seq=seq,
        selector_id=selector,
    )
    if position is not Position.CURRENT:
        o.start = codec.position_to_pb(position)
    if start_time:
        codec.us_to_ts(start_time, o.start_time)
    if redelivery is not None:
        o.redelivery.CopyFrom(codec.redelivery_to_pb(redelivery))
    if not pat.matches_all:
        codec.pattern_to_pb(pat, o.pattern)
    return o
