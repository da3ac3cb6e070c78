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

Built, then run: ``create_server(board, address)`` returns the server and the
port it bound (tests pass port 0); ``serve()`` runs one until SIGTERM or
SIGINT, then stops gracefully, and re-reads certificates and the users file
on SIGHUP. Who may call what is decided before any servicer runs, by the
interceptor ``msgboard.security`` installs; servicers never see credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from msgboard import codec
from msgboard.config import DEFAULT_DATA, DEFAULT_LISTEN, ServeConfig
from msgboard.console import Console
from msgboard.details import abort
from msgboard.engine import BOARD_STOPPING, Board, Limits, SnapshotInfo
from msgboard.errors import InvalidArgument, ListenFailed, MsgboardError, Unavailable
from msgboard.message import Message
from msgboard.results import BoardStats, LeaseView, QueueStats, QueueView
from msgboard.security import Security, permissions
from msgboard.security.auth import caller
from msgboard.security.snapshot_dir import SnapshotDir
from msgboard.server import prebuilt, streams
from msgboard.server.calls import Calls
from msgboard.server.handoff import wait
from msgboard.server.http import Listener
from msgboard.server.metrics import ClusterCollector, Metrics
from msgboard.server.readiness import Readiness
from msgboard.server.reflection import Reflection
from msgboard.server.roles import REPLICATION, RoleCheck
from msgboard.server.streams import consumer_to_pb, selector_to_pb
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster import Replication, ReplicationService

log = logging.getLogger("msgboard.server")
T = TypeVar("T")

__all__ = ["DEFAULT_DATA", "DEFAULT_LISTEN", "BoardService", "create_server", "serve"]

SWITCH_INTERVAL = 0.0005
#: glibc's ``mallopt`` parameter, and the size from which buffers get their
#: own mapping (glibc's default starting value, kept fixed).
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024
SERVICE = pb.DESCRIPTOR.services_by_name["Board"].full_name


Handler = Callable[..., Awaitable[T]]


def _mapped(fn: Handler[T]) -> Handler[T]:
    async def wrapper(
        self: BoardService, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> T:
        try:
            return await fn(self, request, context)
        except MsgboardError as e:
            await abort(context, e)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def queue_to_pb(v: QueueView, q: pb.Queue | None = None) -> pb.Queue:
    """``v`` as a Queue, filled into ``q`` if given."""
    if q is None:
        q = pb.Queue()
    q.spec.CopyFrom(codec.spec_to_pb(v.spec))
    q.unprocessed, q.history, q.next_seq, q.waiting = (
        v.unprocessed,
        v.history,
        v.next_seq,
        v.waiting,
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


def stats_to_pb(s: BoardStats) -> bytes:
    """A StatsResponse, serialized (``prebuilt.py``)."""
    head = pb.StatsResponse(
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
    if d.seconds < 0 or d.nanos < 0:
        raise InvalidArgument(f"{where}: must not be negative")
    return float(d.seconds + d.nanos / 1e9)


def _messages(ps: Any) -> list[Message]:
    return codec.messages_from_pb(ps)


class BoardService(pb_grpc.BoardServicer):
    """The Board service of board.proto, over one engine Board."""

    def __init__(self, board: Board, snapshots: SnapshotDir | None = None) -> None:
        self.board = board
        self.snapshots = snapshots or SnapshotDir()

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
                since=codec.ts_to_us(request.start_time),
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
        return await _built(len(stats.queues), lambda: stats_to_pb(stats))

    # -- selectors ------------------------------------------------------

    @_mapped
    async def CreateSelector(self, request: pb.CreateSelectorRequest, context: Any) -> pb.Selector:
        spec = codec.selector_spec_from_pb(request.spec)
        return selector_to_pb(await wait(self.board.create_selector_async(spec)))

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
        return pb.DeleteSelectorResponse()

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
            request.queue, list(request.seqs), _pattern(request), request.limit, by=caller.get()
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


async def create_server(
    board: Board,
    listen: str = DEFAULT_LISTEN,
    security: Security | None = None,
    *,
    calls: Calls | None = None,
    readiness: Readiness | None = None,
    replication: ReplicationService | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server for ``board``, bound to ``listen`` (port 0: any free
    port) but not started. Returns the server and the bound port. Without
    ``security``: the open plaintext board. ``calls``: the outermost
    interceptor (connections, access log). ``readiness``: the health
    answers, NOT_SERVING until its ``serving()``; without: SERVING at once.
    ``replication``: a primary's replication service, served beside."""
    room = max(64 * 1024 * 1024, 2 * board.limits.max_message_bytes)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", room),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
            # No BDP probing: it grows a stream's receive window to what the
            # link could carry in a round trip (tens of MB on loopback), and
            # gRPC buffers that much of a flat-out PostStream below our
            # read-ahead cap. Without it the window is the default 64 KiB,
            # opened to a whole message while one is being read.
            ("grpc.http2.bdp_probe", 0),
        ],
        interceptors=[
            # A refusal by the role replaces whatever handler the rest made.
            *([RoleCheck(replication.role)] if replication else []),
            prebuilt.Prebuilt(),  # first: the handler it changes is the one run
            *([calls] if calls else []),
            *(security.interceptors(board) if security else []),
        ],
    )
    snapshots = security.snapshots if security else None
    pb_grpc.add_BoardServicer_to_server(BoardService(board, snapshots), server)
    await (readiness or Readiness()).add_to(server, serving=readiness is None)
    names = [SERVICE, "grpc.health.v1.Health"]
    if replication is not None:
        rpb_grpc.add_ReplicationServicer_to_server(replication, server)
        names.append(REPLICATION)
    server.add_generic_rpc_handlers(Reflection(names).handlers())
    credentials = security.credentials() if security else None
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ListenFailed(f"cannot listen on {listen}")
    return server, port


def _return_big_buffers() -> None:
    """Has glibc give every buffer of ``MMAP_THRESHOLD`` bytes or more its
    own mapping, returned to the system when freed. By default glibc raises
    that threshold to the largest buffer freed so far (up to 32 MiB): after
    the first 10 MB PostStream batch, each later one is carved from the
    heap, and what is freed there stays in the process (about 25 MiB of a
    flat-out PostStream's heap peak; docs/operating.md, Bounded memory).
    Elsewhere (musl, macOS) nothing changes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


async def serve(
    config: ServeConfig | None = None,
    *,
    limits: Limits | None = None,
    grace: float = 2.0,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Runs a board as ``config`` says until SIGTERM or SIGINT. Raises
    MsgboardError (Exposed, ConfigError, ListenFailed...) if it cannot start."""
    config = config or ServeConfig()
    if config.cluster_ca:
        from msgboard.cluster.channel import Dialing, use

        use(Dialing(config.cluster_ca, config.tls_cert, config.tls_key))
    if config.standby_of:
        from msgboard.server.standby import serve_standby

        await serve_standby(config, grace=grace, ready=ready)
        return
    # Everything that can refuse the start is checked before the board is
    # opened, so that a refused start leaves no new data directory behind:
    # the files (certificates, users), then the ports.
    security = Security.build(config)
    if config.metrics_listen:
        Metrics.check(config)
    sync = config.sync == "fsync"
    # Threads hand the GIL over every 0.5 ms, not 5: a Post needs a few
    # handovers (event loop, writer, back), and a listing building its
    # answer on a reader thread would otherwise add up to 5 ms to each.
    sys.setswitchinterval(SWITCH_INTERVAL)
    primary: Replication | None = None
    if config.replication_token:
        from msgboard.cluster import Replication

        primary = Replication(
            config.replication_token,
            needed=config.sync_standbys,
            timeout=config.sync_timeout_ms / 1000,
            allow_async=config.allow_async,
            keep=config.log_keep,
            limit=config.log_limit,
            forget=config.log_pin_seconds,
        )
    _return_big_buffers()
    # What opening loads (one object set per queue) lives as long as the
    # board: no collection passes over it while it is made (some 0.15 s of
    # CPU for 100,000 queues), and out of the collector's full passes after,
    # which would otherwise walk it all, the GIL held, some 100 ms per
    # 100,000 queues.
    gc.disable()
    try:
        board = Board(
            config.data,
            sync=sync,
            limits=limits,
            init=config.init,
            accept_rollback=config.accept_rollback,
            log=primary.log if primary else None,
        )
    finally:
        gc.enable()
    replication = primary.attach(board) if primary else None
    gc.freeze()
    # Calls are watched (one interceptor more) only for what needs it.
    calls = None
    if config.metrics_listen or config.access_log:
        calls = Calls(access=bool(config.access_log))
    listener = None
    if config.metrics_listen:
        role = ClusterCollector(primary.role, primary.standbys) if primary else None
        console = Console(
            board,
            users=lambda: security.users,
            tls=config.tls,
            role=primary.role if primary else None,
            standbys=primary.standbys if primary else None,
        )
        listener = Listener(Metrics(board, calls, role), console)
    readiness = Readiness(config.ready_file)
    try:
        metrics_at = await listener.start(config) if listener else ""
        if metrics_at:
            scheme = "https" if config.tls else "http"
            log.info("metrics on %s://%s/metrics", scheme, metrics_at)
            log.info("console on %s://%s/", scheme, metrics_at)
        server, port = await create_server(
            board,
            config.listen,
            security,
            calls=calls,
            readiness=readiness,
            replication=replication,
        )
        await server.start()
        host = config.listen.rsplit(":", 1)[0]
        security.warn()
        # Signals are handled before anyone is told the board serves: a
        # supervisor that stops it once ready gets a graceful stop.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, security.reload)
        # A board whose writer died cannot keep its word: stop serving.
        board.on_failure(lambda e: loop.call_soon_threadsafe(stop.set))
        if board.failure is not None:
            stop.set()
        await readiness.serving(f"{host}:{port}", metrics_at)
        log.info(
            "msgboard serving on %s:%d (data %s, sync %s; %s%s)",
            host,
            port,
            config.data,
            config.sync,
            security.describe(),
            f"; {primary.describe()}" if primary else "",
        )
        if ready is not None:
            ready(port)
        await stop.wait()
        log.info("msgboard stopping")
        await readiness.stopping()
        if board.failure is not None:
            await server.stop(grace)
            raise Unavailable(f"the board stopped: its writer thread failed ({board.failure!r})")
        board.emit(BOARD_STOPPING)
        # Blocked calls get their "nothing in time" answer rather than wait
        # out the grace period and be cancelled.
        await wait(board.release())
        await server.stop(grace)
    finally:
        if listener is not None:
            await listener.close()
        if primary is not None:
            primary.close()
        await asyncio.get_running_loop().run_in_executor(None, board.close)
