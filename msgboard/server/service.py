"""The gRPC server: a thin shell around ``msgboard.engine.Board``.

Each RPC converts its protobuf request (``msgboard.codec``), calls the
board, awaits the operation's future (``msgboard.server.handoff.wait``) and
converts the answer back (a big answer on a worker thread, off the event
loop: ``_built``); the two streaming calls live in
``msgboard.server.streams``; engine errors become status codes and
``google.rpc`` details in one place, ``msgboard.details``. The server also
serves the standard gRPC health service and server reflection (v1 and
v1alpha, with the proto's comments: ``msgboard.server.reflection``), so
stock tools such as grpcurl, Postman and grpc_health_probe work.

Built and run by ``msgboard.server.serving`` (``create_server``, ``serve``).
Who may call what is decided before any servicer runs, by the
interceptor ``msgboard.security`` installs; servicers never see credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import grpc

from msgboard import codec
from msgboard.config import DEFAULT_DATA, DEFAULT_LISTEN
from msgboard.details import abort
from msgboard.engine import Board, SnapshotInfo
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    MsgboardError,
)
from msgboard.links import Links, selector_translator
from msgboard.message import Message
from msgboard.results import BoardStats, LeaseView, QueueStats, QueueView
from msgboard.security import permissions
from msgboard.security.auth import blame, caller
from msgboard.security.snapshot_dir import SnapshotDir
from msgboard.server import prebuilt, streams
from msgboard.server.handoff import wait
from msgboard.server.streams import consumer_to_pb, selector_to_pb
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

log = logging.getLogger("msgboard.server")
T = TypeVar("T")

__all__ = ["DEFAULT_DATA", "DEFAULT_LISTEN", "SERVICE", "BoardService"]

SERVICE = pb.DESCRIPTOR.services_by_name["Board"].full_name


Handler = Callable[..., Awaitable[T]]


def _mapped(fn: Handler[T]) -> Handler[T]:
    async def wrapper(
        self: BoardService, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> T:
        try:
            return await fn(self, request, context)
        except MsgboardError as e:
            await abort(context, blame(e))

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def queue_to_pb(v: QueueView, q: pb.Queue | None = None) -> pb.Queue:
    """``v`` as a Queue, filled into ``q`` if given."""
    if q is None:
        q = pb.Queue()
    q.spec.CopyFrom(codec.spec_to_pb(v.spec))
    q.unprocessed, q.history, q.next_seq, q.waiting, q.scheduled = (
        v.unprocessed,
        v.history,
        v.next_seq,
        v.waiting,
        v.scheduled,
    )
    codec.us_to_ts(v.created_at, q.created_at)
    return q


def queues_to_pb(views: Sequence[QueueView]) -> bytes:
    """A ListQueuesResponse, serialized (``prebuilt.py``)."""
    return prebuilt.pieces(pb.ListQueuesResponse(), views, _add_queues)


def _add_queues(r: pb.ListQueuesResponse, views: Sequence[QueueView]) -> None:
    # Filled in place, one small call per queue: one call building the
    # whole list would hold the GIL, and every other thread, throughout.
    add = r.queues.add
    for v in views:
        queue_to_pb(v, add())


_STATS_FIELDS = tuple(f.name for f in dataclasses.fields(QueueStats))


def stats_to_pb(s: BoardStats, board_id: str = "") -> bytes:
    """A StatsResponse, serialized (``prebuilt.py``)."""
    head = pb.StatsResponse(
        board_id=board_id or s.board_id,
        map_size=s.store.map_size,
        map_used=s.store.map_used,
        sync=s.store.sync,
        commits=s.commits,
        committed_ops=s.committed_ops,
    )
    return prebuilt.pieces(head, s.queues, _add_stats)


def _add_stats(r: pb.StatsResponse, queues: Sequence[QueueStats]) -> None:
    add = r.queues.add
    names = _STATS_FIELDS
    for q in queues:
        add(**{k: getattr(q, k) for k in names})


def snapshot_to_pb(s: SnapshotInfo) -> pb.SnapshotResponse:
    r = pb.SnapshotResponse(
        path=s.path, schema=s.schema, bytes=s.bytes, messages=s.messages, queues=len(s.queues)
    )
    codec.us_to_ts(s.taken_at, r.taken_at)
    return r


def _seconds(d: Any, where: str) -> float:
    us = codec.checked_duration(d, where)
    if us < 0 or d.nanos < 0:
        raise InvalidArgument(f"{where}: must not be negative")
    return float(d.seconds + d.nanos / 1e9)


def _messages(ps: Any) -> list[Message]:
    return codec.messages_from_pb(ps)


class BoardService(pb_grpc.BoardServicer):
    """The Board service of board.proto, over one engine Board."""

    def __init__(
        self, board: Board, snapshots: SnapshotDir | None = None, links: Links | None = None
    ) -> None:
        self.board = board
        self.snapshots = snapshots or SnapshotDir()
        #: The board's running links (None: links are not served).
        self.links = links

    @_mapped
    async def CreateQueue(self, request: pb.CreateQueueRequest, context: Any) -> pb.Queue:
        view = await wait(self.board.create_queue_async(codec.spec_from_pb(request.spec)))
        return queue_to_pb(view)

    @_mapped
    async def GetQueue(self, request: pb.GetQueueRequest, context: Any) -> pb.Queue:
        return queue_to_pb(await wait(self.board.get_queue_async(request.name)))

    @_mapped
    async def ListQueues(self, request: Any, context: Any) -> Any:  # bytes: prebuilt.py
        views = await wait(self.board.list_queues_async())
        return await _built(len(views), lambda: queues_to_pb(views))

    @_mapped
    async def DeleteQueue(self, request: pb.DeleteQueueRequest, context: Any) -> Any:
        await wait(self.board.delete_queue_async(request.name))
        return pb.DeleteQueueResponse()

    @_mapped
    async def Post(self, request: pb.PostRequest, context: Any) -> pb.PostResponse:
        receipts = self.board.post_receipts_async(request.queue, _messages(request.messages))
        seqs, dispositions = codec.receipts_to_pb(await wait(receipts))
        return pb.PostResponse(seqs=seqs, dispositions=dispositions)

    async def PostStream(
        self, request_iterator: AsyncIterator[pb.PostStreamRequest], context: Any
    ) -> AsyncIterator[pb.PostStreamResponse]:
        async for r in streams.post_stream(self.board, request_iterator):
            yield r

    @_mapped
    async def Take(self, request: pb.TakeRequest, context: Any) -> pb.TakeResponse:
        pattern = codec.pattern_from_pb(request.pattern)
        timeout = _seconds(request.timeout, "timeout")
        lease = _seconds(request.lease, "lease")
        fut: Future[Any]
        if lease:
            fut = self.board.take_leased_async(
                request.queue, pattern, timeout, request.max, lease=lease
            )
        else:
            fut = self.board.take_async(request.queue, pattern, timeout, request.max)
        try:
            got: list[Any] = await wait(fut)
        except asyncio.CancelledError:
            # The client went away (or its deadline passed): whatever the
            # board already took for it goes back to the queue.
            with contextlib.suppress(MsgboardError):
                self.board.abandon(request.queue, fut)
            raise
        if lease:
            return pb.TakeResponse(
                messages=[codec.message_to_pb(d.message) for d in got],
                lease_ids=[d.id for d in got],
            )
        return pb.TakeResponse(messages=[codec.message_to_pb(m) for m in got])

    @_mapped
    async def Ack(self, request: pb.AckRequest, context: Any) -> pb.AckResponse:
        acked = await wait(
            self.board.ack_leases_async(request.queue, list(request.lease_ids), request.nack)
        )
        return pb.AckResponse(lease_ids=acked.ids, rejected=streams.rejected_to_pb(acked))

    @_mapped
    async def Read(self, request: pb.ReadRequest, context: Any) -> pb.ReadResponse:
        pattern = codec.pattern_from_pb(request.pattern)
        timeout = _seconds(request.timeout, "timeout")
        msgs = await wait(self.board.read_async(request.queue, pattern, timeout, request.max))
        return await _built(
            len(msgs), lambda: pb.ReadResponse(messages=map(codec.message_to_pb, msgs))
        )

    @_mapped
    async def Browse(self, request: pb.BrowseRequest, context: Any) -> pb.BrowseResponse:
        reverse = request.direction == pb.DIRECTION_BACKWARD
        if request.direction not in (
            pb.DIRECTION_UNSPECIFIED,
            pb.DIRECTION_FORWARD,
            pb.DIRECTION_BACKWARD,
        ):
            raise InvalidArgument(f"direction: unknown value {request.direction}")
        start = codec.browse_start_from_pb(request.start, reverse)
        section = codec.section_from_pb(request.section)
        page = await wait(
            self.board.browse_async(
                request.queue,
                start,
                seq=request.start_seq,
                since=codec.checked_ts(request.start_time, "start_time"),
                reverse=reverse,
                limit=request.limit,
                section=section,
                pattern=codec.pattern_from_pb(request.pattern),
            )
        )
        return await _built(
            len(page.messages),
            lambda: pb.BrowseResponse(
                messages=map(codec.message_to_pb, page.messages), next_seq=page.next_seq
            ),
        )

    @_mapped
    async def Stats(self, request: pb.StatsRequest, context: Any) -> Any:  # bytes: prebuilt.py
        stats = await wait(self.board.stats_async(request.queue))
        board_id = self.board.board_id
        return await _built(len(stats.queues), lambda: stats_to_pb(stats, board_id))

    # -- selectors ------------------------------------------------------

    @_mapped
    async def CreateSelector(self, request: pb.CreateSelectorRequest, context: Any) -> pb.Selector:
        spec = codec.selector_spec_from_pb(request.spec)
        # Compiled here so that a bad one is refused before anything is made;
        # a selector that crosses a link is the only one that may have one.
        selector_translator(spec.translator, bool(spec.destination_link or spec.source_link))
        view = await wait(self.board.create_selector_async(spec))
        if (spec.crossing or spec.source_link) and self.links is not None:
            self.links.refresh_soon()
        return selector_to_pb(view)

    @_mapped
    async def GetSelector(self, request: pb.GetSelectorRequest, context: Any) -> pb.Selector:
        return selector_to_pb(await wait(self.board.get_selector_async(request.id)))

    @_mapped
    async def ListSelectors(
        self, request: pb.ListSelectorsRequest, context: Any
    ) -> pb.ListSelectorsResponse:
        views = await wait(self.board.list_selectors_async(request.queue))
        return await _built(
            len(views), lambda: pb.ListSelectorsResponse(selectors=map(selector_to_pb, views))
        )

    @_mapped
    async def DeleteSelector(self, request: pb.DeleteSelectorRequest, context: Any) -> Any:
        await wait(self.board.delete_selector_async(request.id))
        if self.links is not None:
            self.links.refresh_soon()
        return pb.DeleteSelectorResponse()

    # -- links --------------------------------------------------------------

    def _links(self) -> Links:
        if self.links is None:
            raise FailedPrecondition("this server does not run links")
        return self.links

    @_mapped
    async def CreateLink(self, request: pb.CreateLinkRequest, context: Any) -> pb.Link:
        links = self._links()
        view = await asyncio.to_thread(links.create, codec.link_spec_from_pb(request.spec))
        return codec.link_to_pb(view)

    @_mapped
    async def ListLinks(self, request: pb.ListLinksRequest, context: Any) -> pb.ListLinksResponse:
        views = await asyncio.to_thread(self._links().views)
        return pb.ListLinksResponse(links=map(codec.link_to_pb, views))

    @_mapped
    async def DeleteLink(self, request: pb.DeleteLinkRequest, context: Any) -> Any:
        await asyncio.to_thread(self._links().delete, request.name)
        return pb.DeleteLinkResponse()

    # -- subscriptions --------------------------------------------------

    async def Subscribe(
        self,
        request_iterator: AsyncIterator[pb.SubscribeRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.SubscribeResponse]:
        async for r in streams.subscribe(self.board, request_iterator, context):
            yield r

    @_mapped
    async def Snapshot(self, request: pb.SnapshotRequest, context: Any) -> pb.SnapshotResponse:
        path = self.snapshots.resolve(request.path)
        return snapshot_to_pb(await wait(self.board.snapshot_async(path)))

    # -- consumers ------------------------------------------------------

    @_mapped
    async def ListConsumers(
        self, request: pb.ListConsumersRequest, context: Any
    ) -> pb.ListConsumersResponse:
        views = await wait(self.board.list_consumers_async(request.queue))
        return pb.ListConsumersResponse(consumers=map(consumer_to_pb, views))

    @_mapped
    async def KickConsumer(
        self, request: pb.KickConsumerRequest, context: Any
    ) -> pb.KickConsumerResponse:
        view = await wait(self.board.kick_consumer_async(request.id))
        return pb.KickConsumerResponse(consumer=consumer_to_pb(view))

    @_mapped
    async def DropDamaged(
        self, request: pb.DropDamagedRequest, context: Any
    ) -> pb.DropDamagedResponse:
        fut = self.board.drop_damaged_async(request.queue, request.seq, request.after)
        seq, section = await wait(fut)
        return pb.DropDamagedResponse(seq=seq, section=codec.SECTION.to_pb[section])

    # -- maintenance ----------------------------------------------------

    @_mapped
    async def PurgeQueue(
        self, request: pb.PurgeQueueRequest, context: Any
    ) -> pb.PurgeQueueResponse:
        fut = self.board.purge_queue_async(request.queue, request.history, by=caller.get())
        got = await wait(fut)
        return pb.PurgeQueueResponse(purged=got.purged, history_purged=got.history)

    @_mapped
    async def MoveMessages(
        self, request: pb.MoveMessagesRequest, context: Any
    ) -> pb.MoveMessagesResponse:
        fut = self.board.move_messages_async(
            request.source,
            request.destination,
            list(request.seqs),
            _pattern(request),
            request.limit,
            every=request.all,
            by=caller.get(),
            may=permissions.manages(),
        )
        moved = await wait(fut)
        return await _built(
            len(moved),
            lambda: pb.MoveMessagesResponse(
                moved=len(moved),
                seqs=[m.seq for m in moved],
                messages=[
                    pb.MovedMessage(seq=m.seq, queue=m.queue, new_seq=m.new_seq) for m in moved
                ],
            ),
        )

    @_mapped
    async def DeleteMessages(
        self, request: pb.DeleteMessagesRequest, context: Any
    ) -> pb.DeleteMessagesResponse:
        fut = self.board.delete_messages_async(
            request.queue,
            list(request.seqs),
            _pattern(request),
            request.limit,
            every=request.all,
            by=caller.get(),
        )
        seqs = await wait(fut)
        return pb.DeleteMessagesResponse(deleted=len(seqs), seqs=seqs)

    @_mapped
    async def ReleaseMessages(
        self, request: pb.ReleaseMessagesRequest, context: Any
    ) -> pb.ReleaseMessagesResponse:
        fut = self.board.release_messages_async(request.queue, list(request.seqs), by=caller.get())
        seqs: list[int] = await wait(fut)
        return pb.ReleaseMessagesResponse(seqs=seqs)

    @_mapped
    async def ListLeases(
        self, request: pb.ListLeasesRequest, context: Any
    ) -> pb.ListLeasesResponse:
        views = await wait(self.board.list_leases_async(request.queue))
        return await _built(len(views), lambda: pb.ListLeasesResponse(leases=map(_lease, views)))


def _lease(v: LeaseView) -> pb.LeaseInfo:
    p = pb.LeaseInfo(id=v.id, queue=v.queue, seq=v.seq)
    codec.us_to_ts(v.since, p.since)
    codec.us_to_ts(v.until, p.until)
    return p


def _pattern(request: Any) -> Any:
    """A request's pattern; None when it gives none."""
    return codec.pattern_from_pb(request.pattern) if request.HasField("pattern") else None


#: Answers of more items than this are built on a worker thread, so that one
#: big listing does not hold the event loop, and every other call, for long.
BIG_ANSWER = 1000


async def _built(n: int, build: Callable[[], T]) -> T:
    if n < BIG_ANSWER:
        return build()
    return await asyncio.to_thread(build)
