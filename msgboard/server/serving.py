"""Building and running a board's gRPC server: ``create_server(board,
address)`` returns the server and the port it bound (tests pass port 0);
``serve()`` opens the board a ``ServeConfig`` describes, starts its links,
its metrics and console listener and its server, runs until SIGTERM or
SIGINT, then stops gracefully, and re-reads certificates and the users file
on SIGHUP. The calls themselves are ``msgboard.server.service``'s."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc

from msgboard.config import DEFAULT_LISTEN, ServeConfig
from msgboard.console import Console, LinkRow
from msgboard.engine import BOARD_STOPPING, Board, Limits
from msgboard.errors import ListenFailed, Unavailable
from msgboard.links import Links
from msgboard.security import Security
from msgboard.server import gcstress, prebuilt
from msgboard.server.calls import Calls
from msgboard.server.decoding import Decoding
from msgboard.server.handoff import wait
from msgboard.server.http import Listener
from msgboard.server.metrics import ClusterCollector, Metrics
from msgboard.server.readiness import Readiness
from msgboard.server.reflection import Reflection
from msgboard.server.roles import REPLICATION, RoleCheck
from msgboard.server.service import SERVICE, BoardService
from msgboard.server.switchboard import Pipeline
from msgboard.v1 import board_pb2_grpc as pb_grpc
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster import Replication, ReplicationService

log = logging.getLogger("msgboard.server")

SWITCH_INTERVAL = 0.0005
#: glibc's ``mallopt`` parameter, and the size from which buffers get their
#: own mapping (glibc's default starting value, kept fixed).
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def link_rows(links: Links) -> list[LinkRow]:
    """The board's links as the console's Cluster and Links page lists them."""
    return [
        LinkRow(v.spec.name, v.spec.server, v.state, v.lag_messages, v.lag_seconds)
        for v in links.views()
    ]


async def create_server(
    board: Board,
    listen: str = DEFAULT_LISTEN,
    security: Security | None = None,
    *,
    calls: Calls | None = None,
    readiness: Readiness | None = None,
    replication: ReplicationService | None = None,
    links: Links | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server for ``board``, bound to ``listen`` (port 0: any free
    port) but not started. Returns the server and the bound port. Without
    ``security``: the open plaintext board. ``calls``: the outermost
    interceptor (connections, access log). ``readiness``: the health
    answers, NOT_SERVING until its ``serving()``; without: SERVING at once.
    ``replication``: a primary's replication service, served beside.
    ``links``: the board's running links (default: started here, closed
    when the board closes)."""
    pipeline = await board_pipeline(
        board, security, calls=calls, readiness=readiness, replication=replication, links=links
    )
    server = grpc.aio.server(
        options=server_options(board.limits), interceptors=pipeline.interceptors
    )
    pipeline.install(server)
    return server, bind(server, listen, security)


def bind(server: grpc.aio.Server, listen: str, security: Security | None) -> int:
    """Binds ``server`` to ``listen`` (TLS if ``security`` has
    certificates); the port bound. ListenFailed if it cannot."""
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
    return port


def server_options(limits: Limits) -> list[tuple[str, Any]]:
    """The gRPC server's options for a board with ``limits``."""
    room = max(64 * 1024 * 1024, 2 * limits.max_message_bytes)
    return [
        ("grpc.max_receive_message_length", room),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
        # No BDP probing: it grows a stream's receive window to what the
        # link could carry in a round trip (tens of MB on loopback), and
        # gRPC buffers that much of a flat-out PostStream below our
        # read-ahead cap. Without it the window is the default 64 KiB,
        # opened to a whole message while one is being read.
        ("grpc.http2.bdp_probe", 0),
    ]


async def board_pipeline(
    board: Board,
    security: Security | None = None,
    *,
    calls: Calls | None = None,
    readiness: Readiness | None = None,
    replication: ReplicationService | None = None,
    links: Links | None = None,
) -> Pipeline:
    """The services that serve ``board`` and their interceptors (as
    ``create_server`` says), not yet on any server."""
    pipeline = Pipeline(
        [
            # Outermost: a request that does not parse is refused before
            # any other interceptor or servicer could see it.
            Decoding(),
            # A refusal by the role replaces whatever handler the rest made.
            *([RoleCheck(replication.role)] if replication else []),
            prebuilt.Prebuilt(),  # first: the handler it changes is the one run
            *([calls] if calls else []),
            *(security.interceptors(board) if security else []),
        ]
    )
    snapshots = security.snapshots if security else None
    if links is None:
        links = Links(board).start()
    server: Any = pipeline  # the generated code adds services to it as to a server
    pb_grpc.add_BoardServicer_to_server(BoardService(board, snapshots, links), server)
    await (readiness or Readiness()).add_to(server, serving=readiness is None)
    names = [SERVICE, "grpc.health.v1.Health"]
    if replication is not None:
        rpb_grpc.add_ReplicationServicer_to_server(replication, server)
        names.append(REPLICATION)
    pipeline.add_generic_rpc_handlers(Reflection(names).handlers())
    return pipeline


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
    gcstress.start()  # a test aid, off unless MSGBOARD_GC_STRESS is set
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
    links = Links(board).start()
    listener = None
    if config.metrics_listen:
        role = ClusterCollector(primary.role, primary.standbys) if primary else None
        console = Console(
            board,
            users=lambda: security.users,
            tls=config.tls,
            role=primary.role if primary else None,
            standbys=primary.standbys if primary else None,
            links=partial(link_rows, links),
        )
        listener = Listener(Metrics(board, calls, role, links), console)
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
            links=links,
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
