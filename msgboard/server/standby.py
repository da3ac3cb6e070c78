"""``msgboard serve --standby-of HOST:PORT``: a standby board.

It opens its directory as a standby's store (it only applies its primary's
log: ``DurableStore(standby=True)``), follows the primary
(``msgboard.cluster.Replica``) and serves on its port only what tells
clients where to go: every Board call answers UNAVAILABLE with ErrorInfo
reason ``NotPrimary`` and the primary's address (metadata ``primary``),
as does the replication service; health and reflection answer. Killed or
stopped, its directory opened as a board (``msgboard serve --data DIR``)
holds everything the primary answered. It always fsyncs what it applies
before it acknowledges it (``--sync weaker-no-fsync`` is refused), and
names itself to its primary by a stable id kept in its directory
(``board-id``, ``msgboard.cluster.replica.stable_id``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any

import grpc

from msgboard.cluster import Replica, ReplicationService, Role
from msgboard.config import ServeConfig
from msgboard.details import abort
from msgboard.errors import ConfigError, ListenFailed, NotPrimary, Unavailable
from msgboard.lmdbstore import DurableStore, Log
from msgboard.security import Security
from msgboard.server.readiness import Readiness
from msgboard.server.reflection import Reflection
from msgboard.server.roles import REPLICATION
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

BOARD = pb.DESCRIPTOR.services_by_name["Board"]


def refusing(role: Role, here: Callable[[], str] = str) -> pb_grpc.BoardServicer:
    """A Board servicer whose every method answers ``role.refusal()``;
    ``here()``: this board's address, named as the primary's to a call that
    reached these refusals just as the board became the primary (it was
    not run: the client sends it again, to the pipeline that serves now)."""

    async def unary(self: Any, request: Any, context: Any) -> Any:
        await abort(context, _refusal(role, here))

    async def stream(self: Any, request: Any, context: Any) -> Any:
        await abort(context, _refusal(role, here))
        yield  # an async generator: the method streams its answers

    methods = {m.name: stream if m.server_streaming else unary for m in BOARD.methods}
    cls = type("Refusing", (pb_grpc.BoardServicer,), methods)
    servicer: pb_grpc.BoardServicer = cls()
    return servicer


def _refusal(role: Role, here: Callable[[], str]) -> Any:
    refusal = role.refusal()
    if refusal is None:  # promoted: this board serves now
        address = here()
        if address:
            return NotPrimary(address)
        return Unavailable("this board's role is changing; connect again")
    return refusal


async def serve_standby(
    config: ServeConfig, *, grace: float = 2.0, ready: Callable[[int], None] | None = None
) -> None:
    """Runs a standby as ``config`` says until SIGTERM or SIGINT. A
    standby acknowledges only what it has fsynced: ``--sync
    weaker-no-fsync`` is refused (ConfigError)."""
    if config.sync != "fsync":
        raise ConfigError(
            f"--sync {config.sync} with --standby-of: a standby fsyncs every batch before it "
            "acknowledges it (its primary answers clients on that word); leave --sync out"
        )
    security = Security.build(config)

    def opened() -> DurableStore:
        return DurableStore(
            config.data,
            sync=True,
            log=Log(keep=config.log_keep, limit=config.log_limit),
            standby=True,
        )

    store = opened()
    role = Role(config.standby_of)
    replica: Replica | None = None
    readiness = Readiness(config.ready_file)
    try:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_BoardServicer_to_server(refusing(role), server)
        rpb_grpc.add_ReplicationServicer_to_server(
            ReplicationService(config.replication_token, role), server
        )
        await readiness.add_to(server, serving=False)
        names = (BOARD.full_name, REPLICATION, "grpc.health.v1.Health")
        server.add_generic_rpc_handlers(Reflection(names).handlers())
        credentials = security.credentials()
        try:
            if credentials is None:
                port = server.add_insecure_port(config.listen)
            else:
                port = server.add_secure_port(config.listen, credentials)
        except RuntimeError:
            port = 0
        if port == 0:
            raise ListenFailed(f"cannot listen on {config.listen}")
        host = config.listen.rsplit(":", 1)[0]
        await server.start()
        replica = Replica(
            store, config.standby_of, config.replication_token, f"{host}:{port}", reopen=opened
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await readiness.serving(f"{host}:{port}")
        log.info(
            "msgboard standby serving on %s:%d (data %s, log index %d), following %s",
            host,
            port,
            config.data,
            replica.applied,
            config.standby_of,
        )
        if ready is not None:
            ready(port)
        await stop.wait()
        log.info("msgboard standby stopping at log index %d", replica.applied)
        await readiness.stopping()
        await server.stop(grace)
    finally:
        if replica is not None:
            await asyncio.to_thread(replica.stop)
            store = replica.store  # seeding may have opened it again
        store.close()
