"""Boards for the fault tests with static roles: ``Trio`` starts a primary
(``msgboard serve --replication-token``) and two standbys
(``--standby-of``), each a ``msgboard serve`` child process over its own
temporary directory, started, killed (-9), paused (SIGSTOP) and resumed by
PID. With ``proxied`` each standby reaches the primary through a
``Proxy`` (tests/proxy.py) the test can cut.

``Trio.finish(history)`` ends a test the same way every time: it waits for
the standbys to hold the primary's whole log, reads the primary's queues
(``tests.jepsen.dump``), freezes the primary (SIGSTOP, so it writes
nothing more), lets the standbys reach its last index, stops them, kills
the primary, and runs the checker (``tests.jepsen.check``) over the
history, the dump and the standbys' directories.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import lmdb

from msgboard.lmdbstore.layout import LOG_LAST, LOG_LAST_KEY, MAX_DBS
from tests.jepsen import Dump, check, dump
from tests.proxy import Proxy
from tests.served import Served
from tests.workload import QUEUES, History

TOKEN = "cluster-secret"


def last_index(data: Path) -> int:
    """The last log index a board's directory holds (read-only, while it runs)."""
    env = lmdb.open(str(data), readonly=True, max_dbs=MAX_DBS, lock=True)
    try:
        with env.begin() as txn:
            raw = txn.get(LOG_LAST_KEY, db=env.open_db(b"meta", txn=txn, create=False))
        return 0 if raw is None else int(LOG_LAST.unpack(raw)[0])
    finally:
        env.close()


def wait_for(cond: Callable[[], bool], what: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def pause(s: Served) -> None:
    os.kill(s.proc.pid, signal.SIGSTOP)


def resume(s: Served) -> None:
    os.kill(s.proc.pid, signal.SIGCONT)


class Trio:
    """A primary and two standbys under ``tmp``; every process stopped by
    ``close`` whatever happened."""

    def __init__(self, tmp: Path, *primary_args: str, proxied: bool = False) -> None:
        self.tmp = tmp
        self.everything: list[Served] = []
        self.proxies: list[Proxy] = []
        self.primary = self._serve("p", "--replication-token", TOKEN, *primary_args)
        if proxied:
            self.proxies = [Proxy(self.primary.address) for _ in range(2)]
        self.standbys = [self._standby(i) for i in range(2)]

    def _serve(self, name: str, *args: str) -> Served:
        (self.tmp / name).mkdir(exist_ok=True)
        (self.tmp / name / "ready.json").unlink(missing_ok=True)  # left by a kill -9
        s = Served(self.tmp / name, *args)
        self.everything.append(s)
        return s

    def _standby(self, i: int, of: str = "") -> Served:
        of = of or (self.proxies[i].address if self.proxies else self.primary.address)
        return self._serve(f"s{i}", "--replication-token", TOKEN, "--standby-of", of)

    def restart(self, i: int, of: str = "") -> Served:
        """Starts standby ``i`` again on its directory."""
        self.standbys[i].kill()
        self.standbys[i] = self._standby(i, of)
        return self.standbys[i]

    def promote(self, i: int, *args: str) -> Served:
        """Static promotion: the primary is gone; standby ``i`` is stopped and
        its directory opened as the new primary; the other standby follows
        it. Returns the new primary."""
        for s in self.standbys:
            s.stop()
        self.primary = self._serve(f"s{i}", "--replication-token", TOKEN, *args)
        other = 1 - i
        self.standbys = [self._standby(other, self.primary.address)]
        return self.primary

    def caught_up(self, seconds: float = 90) -> None:
        def done() -> bool:
            last = last_index(self.primary.data)
            return all(last_index(s.data) == last for s in self.standbys)

        wait_for(done, "the standbys hold the primary's whole log", seconds)

    def finish(self, history: History) -> list[str]:
        """The checker's verdict on the run (see the module docstring)."""
        for s in self.standbys:
            resume(s)
        for p in self.proxies:
            p.heal()
        self.caught_up()
        final: Dump = dump(self.primary.address, self.primary.data, QUEUES)
        pause(self.primary)
        self.caught_up()
        for s in self.standbys:
            assert s.stop() == 0, s.log.read_text()
        self.primary.kill()
        print("history:", history.summary())  # shown by pytest when a test fails
        return check(history.ops(), final, [s.data for s in self.standbys])

    def close(self) -> None:
        for s in self.everything:
            if s.proc.poll() is None:
                resume(s)
            s.kill()
        for p in self.proxies:
            p.close()
