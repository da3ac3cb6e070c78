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

import abc
import builtins
import collections
import contextlib
import dataclasses
import os
import queue as queue_
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from msgboard import codec
from msgboard.associative import (
    ALL,
    ANY,
    AddressPattern,
    Pattern,
    Prefix,
    Range,
    Template,
    parse_address,
    template,
)
from msgboard.errors import InvalidArgument, Unavailable
from msgboard.message import Message, Section, Value
from msgboard.results import (
    BoardStats,
    ConsumerView,
    Page,
    QueueStats,
    QueueView,
    SelectorView,
    Start,
    StoreInfo,
)
from msgboard.spec import (
    Delivery,
    Disposition,
    Op,
    OverflowPolicy,
    Position,
    QueueSpec,
    Receipt,
    Role,
    SelectorSpec,
    UnmatchedPolicy,
)
from msgboard.subscription import AsyncSubscription, Subscription
from msgboard.tls import Connection
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from msgboard.wire import _consumer_view, _in_stream, _mapped, _selector_view

__all__ = [
    "ANY",
    "AsyncSubscription",
    "Client",
    "Delivery",
    "Disposition",
    "Message",
    "Prefix",
    "Range",
    "Receipt",
    "Start",
    "Subscription",
]

DEFAULT_SERVER = "127.0.0.1:7878"
#: Extra seconds a blocking call's gRPC deadline gets beyond its timeout, so
#: that the server answers "nothing in time" before the deadline cuts it off.
_MARGIN = 30.0

#: QueueStats' fields, named as in the proto's QueueStats.
_QUEUE_STATS = [f.name for f in dataclasses.fields(QueueStats)]

TemplateLike = Template | tuple[Any, ...]
Templates = TemplateLike | Sequence[TemplateLike] | None


def make_pattern(
    templates: Templates = None, address: str | AddressPattern | None = None, filter: str = ""
) -> Pattern:
    """A Pattern from the client's natural notation; ``filter`` is a JMS-style
    selector expression (docs/concepts.md, Filters)."""
    if templates is None:
        alts: tuple[Template, ...] = ()
    elif isinstance(templates, Template):
        alts = (templates,)
    elif isinstance(templates, tuple):
        alts = (template(*templates),)
    else:
        alts = tuple(t if isinstance(t, Template) else template(*t) for t in templates)
    if address is None:
        addr = ALL
    elif isinstance(address, AddressPattern):
        addr = address
    else:
        addr = parse_address(address)
    return Pattern(address=addr, templates=alts, filter=filter)


def _position(start: Position | str | int) -> tuple[Position, int]:
    """A start position from ``Position``, a name or a seq number."""
    if isinstance(start, int):
        return Position.SEQ, start
    return Position(start), 0


def _view(q: pb.Queue) -> QueueView:
    return QueueView(
        codec.spec_from_pb(q.spec),
        codec.ts_to_us(q.created_at),
        q.unprocessed,
        q.history,
        q.next_seq,
        q.waiting,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot the server wrote (its manifest is in the directory)."""

    path: str
    schema: str
    #: µs since the epoch, UTC.
    taken_at: int
    bytes: int
    messages: int
    queues: int


class _Poster(abc.ABC):
    """``post`` for whatever posts a batch of messages: a Client (one unary
    Post each) or a Publisher (one request of its open stream each)."""

    def post(
        self,
        queue: str,
        tuple: Sequence[Value] = (),
        *,
        address: str = "",
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        body: bytes | str = b"",
        content_type: str = "",
        reply_to: str = "",
        expires_at: int = 0,
    ) -> int:
        """Posts one message and returns its seq once it is durable."""
        m = Message(
            tuple=builtins.tuple(tuple),
            address=address,
            priority=priority,
            headers=dict(headers or {}),
            reply_to=reply_to,
            expires_at=expires_at,
            content_type=content_type,
            body=body.encode() if isinstance(body, str) else body,
        )
        return self.post_messages(queue, [m])[0]

    def post_messages(self, queue: str, messages: Sequence[Message]) -> list[int]:
        """Posts messages in one transaction; returns their seqs once durable
        (0 for one that found the queue full: ``post_receipts`` says where
        it went)."""
        return [r.seq for r in self.post_receipts(queue, messages)]

    @abc.abstractmethod
    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction; returns, once durable, each one's
        seq and what became of it (stored, overflowed, dead-lettered, dropped)."""


class Client(_Poster):
    """A connection to one board."""

    def __init__(
        self,
        address: str | None = None,
        *,
        timeout: float | None = 60.0,
        token: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls: bool = False,
    ) -> None:
        """``token``: a bearer token (default ``$MSGBOARD_TOKEN``), sent only
        over TLS or to loopback. ``tls_ca``: connect with TLS trusting this
        CA file (default ``$MSGBOARD_TLS_CA``; ``tls=True``: the system's
        roots). ``tls_cert`` and ``tls_key``: a client certificate for
        mutual TLS."""
        env = os.environ
        self.address = address or env.get("MSGBOARD_SERVER") or DEFAULT_SERVER
        self.timeout = timeout
        self.connection = Connection(
            self.address,
            token=token if token is not None else env.get("MSGBOARD_TOKEN", ""),
            tls_ca=tls_ca if tls_ca is not None else env.get("MSGBOARD_TLS_CA", ""),
            tls_cert=tls_cert or "",
            tls_key=tls_key or "",
            tls=tls,
        )
        self._channel = self.connection.channel()
        self._stub = pb_grpc.BoardStub(self._channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the server answers; Unavailable if it does not in time."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise Unavailable(f"no board answers at {self.address}") from None

    # -- queues ---------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        transient: bool = False,
        max_unprocessed: int = 0,
        overflow: OverflowPolicy | str = OverflowPolicy.REJECT,
        max_history: int = 0,
        dead_letter: str = "",
        unmatched: UnmatchedPolicy | str = UnmatchedPolicy.HOLD,
        auto_delete: bool = False,
        max_deliveries: int = 0,
    ) -> QueueView:
        """Creates a queue (idempotent for the same properties)."""
        spec = QueueSpec(
            name,
            transient,
            max_unprocessed,
            OverflowPolicy(overflow),
            max_history,
            dead_letter,
            UnmatchedPolicy(unmatched),
            auto_delete,
            max_deliveries,
        )
        with _mapped():
            q = self._stub.CreateQueue(
                pb.CreateQueueRequest(spec=codec.spec_to_pb(spec)), timeout=self.timeout
            )
        return _view(q)

    def get_queue(self, name: str) -> QueueView:
        with _mapped():
            return _view(self._stub.GetQueue(pb.GetQueueRequest(name=name), timeout=self.timeout))

    def list_queues(self) -> list[QueueView]:
        with _mapped():
            r = self._stub.ListQueues(pb.ListQueuesRequest(), timeout=self.timeout)
        return [_view(q) for q in r.queues]

    def delete_queue(self, name: str) -> None:
        with _mapped():
            self._stub.DeleteQueue(pb.DeleteQueueRequest(name=name), timeout=self.timeout)

    # -- posting --------------------------------------------------------

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction (one unary Post)."""
        req = pb.PostRequest(queue=queue, messages=codec.messages_to_pb(messages))
        with _mapped():
            r = self._stub.Post(req, timeout=self.timeout)
        return codec.receipts_from_pb(r.seqs, r.dispositions)

    def post_many(
        self,
        queue: str,
        messages: Iterable[Message | Sequence[Value]],
        *,
        batch: int = 500,
    ) -> list[int]:
        """Posts many messages over one PostStream, ``batch`` per request,
        without waiting for each batch; returns every seq. A batch the
        board refuses raises its error after the stream ends (batches before
        it are stored)."""
        errors: list[pb.Error] = []
        bad: list[InvalidArgument] = []

        def requests() -> Iterator[pb.PostStreamRequest]:
            chunk: list[pb.Message] = []
            n = 0
            for i, m in enumerate(messages):
                if not isinstance(m, Message):
                    m = Message(tuple=builtins.tuple(m))
                try:
                    chunk.append(codec.message_to_pb(m, record=True))  # as a post keeps it
                except InvalidArgument as e:  # ends the stream; raised after it
                    bad.append(e.within(f"messages[{i}]"))
                    return
                if len(chunk) >= batch:
                    n += 1
                    yield pb.PostStreamRequest(batch_id=n, queue=queue, messages=chunk)
                    chunk = []
            if chunk:
                yield pb.PostStreamRequest(batch_id=n + 1, queue=queue, messages=chunk)

        seqs: list[int] = []
        with _mapped():
            for r in self._stub.PostStream(requests()):
                if r.HasField("error"):
                    errors.append(r.error)
                else:
                    seqs.extend(r.seqs)
        if errors:
            raise _in_stream(errors[0])
        if bad:
            raise bad[0]
        return seqs

    def publisher(self) -> Publisher:
        """Opens a PostStream for posting one batch at a time, each answered
        once durable before the next is sent: a producer that needs every
        message confirmed keeps one open rather than pay a call's set-up per
        unary Post (RabbitMQ's confirm channel, Redis's connection)::

            with client.publisher() as pub:
                for job in jobs:
                    pub.post("jobs", ("job", job.id), body=job.data)
        """
        return Publisher(self._stub)

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
        return self._match(self._stub.Take, req, make_pattern(templates, address, filter), timeout)

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
        return self._match(self._stub.Read, req, make_pattern(templates, address, filter), timeout)

    def _match(self, rpc: Any, req: Any, pattern: Pattern, timeout: float) -> list[Message]:
        codec.pattern_to_pb(pattern, req.pattern)
        req.timeout.FromNanoseconds(int(timeout * 1e9))
        with _mapped():
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
            req.section = (
                pb.SECTION_HISTORY
                if Section(section) is Section.HISTORY
                else pb.SECTION_UNPROCESSED
            )
        with _mapped():
            r = self._stub.Browse(req, timeout=self.timeout)
        return Page([codec.message_from_pb(m) for m in r.messages], r.next_seq)

    def stats(self, queue: str = "") -> BoardStats:
        with _mapped():
            r = self._stub.Stats(pb.StatsRequest(queue=queue), timeout=self.timeout)
        return BoardStats(
            StoreInfo(True, r.sync, r.map_size, r.map_used, r.commits),
            r.commits,
            r.committed_ops,
            [QueueStats(*(getattr(q, f) for f in _QUEUE_STATS)) for q in r.queues],
        )

    # -- leases -----------------------------------------------------------

    def take_leased(
        self,
        queue: str,
        templates: Templates = None,
        *,
        lease: float,
        address: str | AddressPattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Delivery]:
        """Like take, but the messages stay invisible in the queue until
        ``ack``ed by delivery id; if the lease runs out first they come back."""
        req = pb.TakeRequest(queue=queue, max=max)
        req.lease.FromNanoseconds(int(lease * 1e9))
        codec.pattern_to_pb(make_pattern(templates, address), req.pattern)
        req.timeout.FromNanoseconds(int(timeout * 1e9))
        with _mapped():
            r = self._stub.Take(req, timeout=self._deadline(timeout))
        return [
            Delivery(i, codec.message_from_pb(m))
            for i, m in zip(r.lease_ids, r.messages, strict=True)
        ]

    def ack(self, queue: str, leases: Iterable[Delivery | int], *, nack: bool = False) -> None:
        """Acks leased messages (processed for good); with ``nack`` gives
        them back now."""
        ids = [d.id if isinstance(d, Delivery) else d for d in leases]
        with _mapped():
            self._stub.Ack(
                pb.AckRequest(queue=queue, lease_ids=ids, nack=nack), timeout=self.timeout
            )

    # -- selectors ------------------------------------------------------

    def create_selector(
        self,
        source: str,
        *,
        op: Op | str = Op.MOVE,
        to: str = "",
        templates: Templates = None,
        address: str | AddressPattern | None = None,
        pattern: Pattern | None = None,
        filter: str = "",
        credit: int = 0,
        unlimited_credit: bool = False,
        start: Position | str | int = Position.CURRENT,
        start_time: int = 0,
        role: Role | str = Role.NORMAL,
    ) -> SelectorView:
        """Creates a selector on ``source``: MOVE (default), COPY, DELETE or
        BOUNCE, to queue ``to`` or, with none, terminal (attach with
        ``subscribe(selector=...)``). ``start``: a Position, its name, or a
        seq."""
        position, seq = _position(start)
        spec = SelectorSpec(
            source,
            pattern or make_pattern(templates, address, filter),
            Op(op),
            to,
            credit,
            unlimited_credit,
            position,
            seq,
            start_time,
            Role(role),
        )
        req = pb.CreateSelectorRequest(spec=codec.selector_spec_to_pb(spec))
        with _mapped():
            return _selector_view(self._stub.CreateSelector(req, timeout=self.timeout))

    def get_selector(self, sid: str) -> SelectorView:
        with _mapped():
            r = self._stub.GetSelector(pb.GetSelectorRequest(id=sid), timeout=self.timeout)
        return _selector_view(r)

    def list_selectors(self, queue: str = "") -> list[SelectorView]:
        with _mapped():
            r = self._stub.ListSelectors(pb.ListSelectorsRequest(queue=queue), timeout=self.timeout)
        return [_selector_view(p) for p in r.selectors]

    def delete_selector(self, sid: str) -> None:
        with _mapped():
            self._stub.DeleteSelector(pb.DeleteSelectorRequest(id=sid), timeout=self.timeout)

    # -- consumers --------------------------------------------------------

    def list_consumers(self, queue: str = "") -> list[ConsumerView]:
        """Who is connected: the consumers of ``queue`` (or of every queue),
        oldest first. Needs the admin verb."""
        with _mapped():
            r = self._stub.ListConsumers(pb.ListConsumersRequest(queue=queue), timeout=self.timeout)
        return [_consumer_view(p) for p in r.consumers]

    def kick_consumer(self, cid: str) -> ConsumerView:
        """Ends consumer ``cid`` as if it had disconnected (its outstanding
        messages go back); returns it as it was. Needs the admin verb."""
        with _mapped():
            r = self._stub.KickConsumer(pb.KickConsumerRequest(id=cid), timeout=self.timeout)
        return _consumer_view(r.consumer)

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
    ) -> Subscription:
        """Opens a subscription: a session MOVE (or ``copy``) selector on
        ``queue``, or attaches to the durable terminal selector ``selector``.
        Iterate it for deliveries and ack or nack each::

            with client.subscribe("jobs", credit=10) as sub:
                for d in sub:
                    work(d.message)
                    sub.ack(d)
        """
        return Subscription(
            self._stub,
            _open(
                queue,
                pattern or make_pattern(templates, address, filter),
                copy,
                credit,
                start,
                start_time,
                selector,
            ),
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
    ) -> AsyncSubscription:
        """``subscribe`` for asyncio::

        async with client.subscribe_async("jobs") as sub:
            async for d in sub:
                await sub.ack(d)
        """
        return AsyncSubscription(
            self.connection,
            _open(
                queue,
                pattern or make_pattern(templates, address, filter),
                copy,
                credit,
                start,
                start_time,
                selector,
            ),
        )

    def snapshot(self, path: str, *, timeout: float | None = None) -> Snapshot:
        """Has the server write a snapshot to ``path``: a name under the
        server's snapshot directory, or (an open board without one) an
        absolute path on the server's file system; waits for it as long as ``timeout`` (None: as
        long as the copy takes)."""
        with _mapped():
            r = self._stub.Snapshot(pb.SnapshotRequest(path=path), timeout=timeout)
        return Snapshot(r.path, r.schema, codec.ts_to_us(r.taken_at), r.bytes, r.messages, r.queues)

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
) -> pb.Subscription:
    position, seq = _position(start)
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
    if not pat.matches_all:
        codec.pattern_to_pb(pat, o.pattern)
    return o


class Publisher(_Poster):
    """One open PostStream, one batch in flight (see ``Client.publisher``).
    Not for several threads at once."""

    def __init__(self, stub: pb_grpc.BoardStub) -> None:
        self._requests: queue_.SimpleQueue[pb.PostStreamRequest | None] = queue_.SimpleQueue()
        call: Any = stub.PostStream(iter(self._requests.get, None))
        self._call = call
        self._batches = 0
        self._closed = False

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction; returns their receipts once durable."""
        if self._closed:
            raise Unavailable("the publisher is closed")
        self._batches += 1
        self._requests.put(
            pb.PostStreamRequest(
                batch_id=self._batches,
                queue=queue,
                messages=codec.messages_to_pb(messages),
            )
        )
        with _mapped():
            r = next(self._call, None)
        if r is None:
            self._closed = True
            raise Unavailable("the board ended the post stream")
        if r.HasField("error"):
            raise _in_stream(r.error)
        return codec.receipts_from_pb(r.seqs, r.dispositions)

    def close(self) -> None:
        """Ends the stream (every post was already answered)."""
        if self._closed:
            return
        self._closed = True
        self._requests.put(None)
        with contextlib.suppress(grpc.RpcError):
            collections.deque(self._call, maxlen=0)  # to the stream's end
