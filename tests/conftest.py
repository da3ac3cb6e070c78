"""Fixtures: a real board on a real LMDB directory, served over gRPC on a
loopback port from a thread of the test process (as httpx's TestServer)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.engine import Board, Limits
from msgboard.server import create_server


class ServerThread:
    """Runs ``create_server`` on its own event loop until ``stop()``."""

    def __init__(self, data: Path, limits: Limits | None = None) -> None:
        self.data = data
        self.limits = limits
        self.port = 0
        self.board: Board | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # surfaced by start()
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.board = Board(self.data, limits=self.limits)
        try:
            server, self.port = await create_server(self.board, "127.0.0.1:0")
            await server.start()
            self._ready.set()
            await self._stop.wait()
            await server.stop(0.5)
        finally:
            self.board.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path / "board").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    with Client(server.address, timeout=30) as c:
        yield c


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    with Board(tmp_path / "board") as b:
        yield b
