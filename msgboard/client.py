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
import contextlib
import dataclasses
import os
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
from msgboard.engine.board import BoardStats, Page, QueueStats, QueueView, Start
from msgboard.errors import ERROR_KEY, MsgboardError, Unavailable, from_wire
from msgboard.lmdbstore.store import StoreInfo
from msgboard.message import Message, Section, Value
from msgboard.spec import OverflowPolicy, QueueSpec
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

__all__ = ["ANY", "Client", "Message", "Prefix", "Range", "Start"]

DEFAULT_SERVER = "127.0.0.1:7878"
#: Extra seconds a blocking call's gRPC deadline gets beyond its timeout, so
#: that the server answers "nothing in time" before the deadline cuts it off.
_MARGIN = 30.0

#: QueueStats' fields, named as in the proto's QueueStats.
_QUEUE_STATS = [f.name for f in dataclasses.fields(QueueStats)]

TemplateLike = Template | tuple[Any, ...]
Templates = TemplateLike | Sequence[TemplateLike] | None


def _error(e: grpc.RpcError) -> MsgboardError:
    code = e.code() if isinstance(e, grpc.Call) else None
    details = (e.details() if isinstance(e, grpc.Call) else None) or str(e)
    name = ""
    if isinstance(e, grpc.Call):
        for key, value in e.trailing_metadata() or ():
            if key == ERROR_KEY:
                name = str(value)
    return from_wire(code.name if code is not None else "UNKNOWN", details, name)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """Turns gRPC failures into msgboard errors, in one place."""
    try:
        yield
    except grpc.RpcError as e:
        raise _error(e) from None


def make_pattern(
    templates: Templates = None, address: str | AddressPattern | None = None
) -> Pattern:
    """A Pattern from the client's natural notation."""
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
    return Pattern(address=addr, templates=alts)


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


class Client:
    """A connection to one board."""

    def __init__(self, address: str | None = None, *, timeout: float | None = 60.0) -> None:
        self.address = address or os.environ.get("MSGBOARD_SERVER") or DEFAULT_SERVER
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
            ],
        )
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
    ) -> QueueView:
        """Creates a queue (idempotent for the same properties)."""
        spec = QueueSpec(name, transient, max_unprocessed, OverflowPolicy(overflow), max_history)
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
        """Posts messages in one transaction (one unary Post)."""
        req = pb.PostRequest(queue=queue, messages=[codec.message_to_pb(m) for m in messages])
        with _mapped():
            return list(self._stub.Post(req, timeout=self.timeout).seqs)

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

        def requests() -> Iterator[pb.PostStreamRequest]:
            chunk: list[pb.Message] = []
            n = 0
            for m in messages:
                if not isinstance(m, Message):
                    m = Message(tuple=builtins.tuple(m))
                chunk.append(codec.message_to_pb(m))
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
            e = errors[0]
            raise from_wire(_code_name(e.code), e.message, e.name)
        return seqs

    # -- taking, reading, browsing --------------------------------------

    def take(
        self,
        queue: str,
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Message]:
        """Removes and returns up to ``max`` of the oldest matching messages,
        waiting up to ``timeout`` seconds for a first (0: try once)."""
        req = pb.TakeRequest(queue=queue, max=max)
        return self._match(self._stub.Take, req, templates, address, timeout)

    def read(
        self,
        queue: str,
        templates: Templates = None,
        *,
        address: str | AddressPattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
    ) -> list[Message]:
        """Like take, but leaves the messages on the queue."""
        req = pb.ReadRequest(queue=queue, max=max)
        return self._match(self._stub.Read, req, templates, address, timeout)

    def _match(
        self,
        rpc: Any,
        req: Any,
        templates: Templates,
        address: str | AddressPattern | None,
        timeout: float,
    ) -> list[Message]:
        codec.pattern_to_pb(make_pattern(templates, address), req.pattern)
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
    ) -> Page:
        """One page of the queue in seq order; pass ``Start.SEQ`` with the
        page's ``next_seq`` for the next one. ``since``: µs since the epoch."""
        start = Start(start)
        req = pb.BrowseRequest(
            queue=queue,
            start={
                Start.OLDEST: pb.START_OLDEST,
                Start.LATEST: pb.START_LATEST,
                Start.SEQ: pb.START_SEQ,
                Start.TIME: pb.START_TIME,
            }[start],
            seq=seq,
            direction=pb.DIRECTION_BACKWARD if reverse else pb.DIRECTION_FORWARD,
            limit=limit,
            pattern=codec.pattern_to_pb(make_pattern(templates, address)),
        )
        if since:
            codec.us_to_ts(since, req.since)
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

    def snapshot(self, path: str, *, timeout: float | None = None) -> Snapshot:
        """Has the server write a snapshot to ``path`` (absolute, on the
        server's file system); waits for it as long as ``timeout`` (None: as
        long as the copy takes)."""
        with _mapped():
            r = self._stub.Snapshot(pb.SnapshotRequest(path=path), timeout=timeout)
        return Snapshot(r.path, r.schema, codec.ts_to_us(r.taken_at), r.bytes, r.messages, r.queues)

    def _deadline(self, timeout: float) -> float | None:
        return None if self.timeout is None else max(self.timeout, timeout + _MARGIN)


def _code_name(number: int) -> str:
    """The name of a gRPC status code number."""
    for c in grpc.StatusCode:
        if c.value[0] == number:
            return c.name
    return "UNKNOWN"
