"""Real servers for tests and benchmarks: in a thread of this process, or
as a child process that can be killed.

``ServerThread`` runs ``create_server`` on its own event loop, as httpx's
TestServer does; ``ServerProcess`` runs ``msgboard serve`` in a child on a
free loopback port (its log goes to a file, where the bound address is
read), for tests that ``kill -9`` it and for benchmarks.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from msgboard.engine import Board, Limits
from msgboard.security import Security
from msgboard.server import create_server


class ServerThread:
    """Runs ``create_server`` on its own event loop until ``stop()``."""

    def __init__(
        self, data: Path, limits: Limits | None = None, security: Security | None = None
    ) -> None:
        """``security``: TLS, users and snapshot dir (default: the open board)."""
        self.data = data
        self.limits = limits
        self.security = security
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
            server, self.port = await create_server(self.board, "127.0.0.1:0", self.security)
            await server.start()
            self._ready.set()
            await self._stop.wait()
            await server.stop(0.5)
        finally:
            self.board.close()


class ServerProcess:
    """``msgboard serve`` in a child process on a free loopback port."""

    def __init__(self, data: Path, *args: str, prefix: Sequence[str] = ()) -> None:
        """``args`` go to ``msgboard serve``; ``prefix`` runs before it (e.g.
        nsenter into a namespace with the data directory on a small disk)."""
        self.data = data
        self.log = data.parent / f"server-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    *prefix,
                    *(sys.executable, "-m", "msgboard", "serve"),
                    *("--data", str(data), "--listen", "127.0.0.1:0"),
                    *args,
                ],
                stderr=out,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(r"serving on (\S+:\d+)", self.log.read_text())
            if found:
                self.address = found.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the server did not start: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no chance to clean up."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(20)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then waits; returns the exit code (SIGKILL if it hangs)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode
