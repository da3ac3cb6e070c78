"""The board's HTTP listener (``--metrics-listen``): ``/metrics`` and the console.

One listener, one aiohttp application, run by an ``AppRunner`` and a
``TCPSite`` in the board's own event loop (the gRPC server's): ``/metrics``
answers Prometheus (``generate_latest`` on the metrics' registry, built on
a worker thread, since a scrape waits on the board's Stats), and the
console (``msgboard.console``) answers everything else.

Its rules are the metrics' (``Metrics.check``): plain HTTP on loopback;
outside loopback TLS with the board's ``--tls-cert``/``--tls-key`` (client
certificates required when ``--tls-client-ca`` is set), or ``--insecure``,
which logs a warning. The console adds its own sign-in on a board with a
users file (``msgboard.console.auth``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from msgboard.config import ServeConfig
from msgboard.console import Console, create_app
from msgboard.engine import Board
from msgboard.errors import ListenFailed
from msgboard.server.metrics import Metrics
from msgboard.tls import is_loopback

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster.status import Standbys

log = logging.getLogger("msgboard.metrics")


class Listener:
    """The HTTP listener of one served board: its metrics and its console."""

    def __init__(self, metrics: Metrics, console: Console) -> None:
        self.metrics = metrics
        self.console = console
        self.address = ""
        self._runner: web.AppRunner | None = None

    def use(self, board: Board | None, standbys: Standbys | None = None) -> None:
        """A board of a cluster opened ``board`` (promoted; ``standbys``: its
        replication's), or closed its own (None: a standby again)."""
        self.metrics.use(board, standbys)
        self.console.use(board, standbys)

    async def scrape(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, c: ServeConfig) -> str:
        """Serves at ``c.metrics_listen``; returns HOST:PORT it bound. Raises
        Exposed (outside loopback without TLS or --insecure), ListenFailed."""
        Metrics.check(c)
        host, _, port = c.metrics_listen.rpartition(":")
        bare = host[1:-1] if host.startswith("[") else host
        context = _tls(c) if c.tls else None
        app = create_app(self.console, [web.get("/metrics", self.scrape)])
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, bare or None, int(port), ssl_context=context, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise ListenFailed(
                f"cannot serve metrics on {c.metrics_listen}: {e.strerror or e}"
            ) from None
        self._runner = runner
        bound = runner.addresses[0]
        self.address = f"{host}:{bound[1]}"
        if not is_loopback(c.metrics_listen) and not c.tls:
            log.warning(
                "WARNING: --insecure: metrics and the console on %s without TLS: anyone who "
                "can reach it sees every queue's name and traffic",
                self.address,
            )
        return self.address

    async def close(self) -> None:
        self.metrics.close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def _tls(c: ServeConfig) -> ssl.SSLContext:
    """The listener's TLS: the board's certificate, and client certificates
    signed by ``--tls-client-ca`` required when it is set."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(c.tls_cert, c.tls_key)
    if c.tls_client_ca:
        context.load_verify_locations(c.tls_client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
