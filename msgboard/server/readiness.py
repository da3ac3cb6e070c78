"""Is the board ready: the health service's answer and the ready file.

A served board answers the standard health service (``grpc.health.v1``,
for ``""`` and ``msgboard.v1.Board``) NOT_SERVING until everything is up
(the listener, the metrics listener, the ready file), SERVING while it
serves, and NOT_SERVING again from the moment it starts stopping, so that a
load balancer or ``grpc_health_probe`` stops sending calls before the
listener closes (a Watch call sees the change as it happens). The data
directory is opened before the port is bound: while a big board loads, the
port refuses connections, which probes read as not serving too.

``--ready-file PATH`` is written (atomically) once the board serves: one
JSON object with ``pid``, ``listen`` (HOST:PORT bound, with port 0 resolved)
and ``metrics`` (HOST:PORT, or "" without metrics). It is removed as the
board starts stopping. A board killed with ``kill -9`` leaves it behind:
``pid`` tells whose it was.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]

from msgboard.v1 import board_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Board"].full_name
#: The health service's names: the whole server and the Board service.
NAMES = ("", SERVICE)


class Readiness:
    """The health service of one server, and its ready file."""

    def __init__(self, ready_file: str = "") -> None:
        self.health: Any = health_aio.HealthServicer()
        self.path = Path(ready_file) if ready_file else None

    async def add_to(self, server: grpc.aio.Server, *, serving: bool) -> None:
        """Serves the health service on ``server``, answering as ``serving``."""
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        await self._set(serving)

    async def _set(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse
        for name in NAMES:
            await self.health.set(name, status.SERVING if serving else status.NOT_SERVING)

    async def serving(self, listen: str, metrics: str = "") -> None:
        """The board serves: SERVING, and the ready file written."""
        if self.path is not None:
            text = json.dumps({"pid": os.getpid(), "listen": listen, "metrics": metrics})
            # Off the event loop: the health service answers meanwhile.
            await asyncio.to_thread(_write, self.path, text + "\n")
        await self._set(True)

    async def stopping(self) -> None:
        """The board stops: NOT_SERVING from now on, the ready file gone."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        await self.health.enter_graceful_shutdown()


def _write(path: Path, text: str) -> None:
    """Writes ``path`` whole or not at all (a reader never sees half)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.replace(path)
