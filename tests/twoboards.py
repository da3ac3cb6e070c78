"""Two boards for the links' tests: ``site`` and ``central``, each a
ServerThread over its own LMDB directory on a loopback port, and a client
of each (the ``boards`` fixture of conftest.py)."""

from __future__ import annotations

from pathlib import Path

from msgboard.client import Client
from msgboard.results import LinkView
from msgboard.testing import ServerThread


class Boards:
    """Two boards, ``site`` and ``central``, and a client of each."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.site = ServerThread(tmp / "site").start()
        self.central = ServerThread(tmp / "central").start()
        self.s = Client(self.site.address, timeout=30)
        self.c = Client(self.central.address, timeout=30)

    def link(self, name: str = "central") -> LinkView:
        [v] = [v for v in self.s.list_links() if v.spec.name == name]
        return v

    def restart_site(self) -> None:
        self.s.close()
        self.site.stop()
        self.site = ServerThread(self.tmp / "site").start()
        self.s = Client(self.site.address, timeout=30)

    def close(self) -> None:
        self.s.close()
        self.c.close()
        self.site.stop()
        self.central.stop()
