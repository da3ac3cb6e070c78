"""``msgboard serve`` in a child process, found by its ready file (for the
logs and readiness tests, whose server logs may not say where it listens)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from msgboard.testing import ServerProcess
from tests.ports import free_ports


def free_port() -> int:
    """A loopback port free now (for a server that cannot say which it took;
    outside the ephemeral range: tests/ports.py)."""
    return free_ports(1)[0]


class Served(ServerProcess):
    """``msgboard serve --ready-file`` on a free loopback port; its standard
    error goes to ``log``. Stopped as a ServerProcess is."""

    def __init__(self, tmp: Path, *args: str, wait: bool = True) -> None:
        # Not ServerProcess's: it waits for the log line, this for the file.
        self.data = tmp / "board"
        self.ready_file = tmp / "ready.json"
        self.log = tmp / f"serve-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "msgboard", "serve"),
                    *("--data", str(tmp / "board"), "--listen", "127.0.0.1:0"),
                    *("--ready-file", str(self.ready_file)),
                    *args,
                ],
                stderr=out,
            )
        self.address = ""
        if wait:
            self.wait_ready()

    def wait_ready(self) -> dict[str, object]:
        """The ready file's object, once it is there."""
        deadline = time.monotonic() + 90  # a loaded machine starts Python slowly
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start: {self.log.read_text()}")
            time.sleep(0.05)
        ready: dict[str, object] = json.loads(self.ready_file.read_text())
        self.address = str(ready["listen"])
        return ready
