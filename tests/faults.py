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
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from tests.cluster import wait_until
from tests.jepsen import Dump, check, dump
from tests.proxy import Proxy
from tests.served import Served
from tests.test_replication import last_index
from tests.workload import QUEUES, History

TOKEN = "cluster-secret"


def wait_for(cond: Callable[[], bool], what: str, seconds: float = 90) -> None:
    wait_until(what, cond, seconds)


def pause(s: Served) -> None:
    """SIGSTOP, and waits until the process is stopped."""
    os.kill(s.proc.pid, signal.SIGSTOP)
    stat = Path(f"/proc/{s.proc.pid}/stat")
    wait_for(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", "the process stopped")


def resume(s: Served) -> None:
    os.kill(s.proc.pid, signal.SIGCONT)


class Trio:
    """A primary and two standbys under ``tmp``, each in a directory of its
    own (``p``, ``s0``, ``s1`` at first; a promotion moves the roles, not
    the directories); every process stopped by ``close`` whatever happened.
    ``primary_args`` go to every primary this trio starts."""

    def __init__(self, tmp: Path, *primary_args: str, proxied: bool = False) -> None:
        self.tmp = tmp
        self.primary_args = primary_args
        self.everything: list[Served] = []
        self.proxies: list[Proxy] = []
        #: Each process's directory name.
        self.names: dict[int, str] = {}
        self.primary = self._serve("p", "--replication-token", TOKEN, *primary_args)
        if proxied:
            self.proxies = [Proxy(self.primary.address) for _ in range(2)]
        self.standbys = [self._standby(f"s{i}", self._upstream(i)) for i in range(2)]

    def _serve(self, name: str, *args: str) -> Served:
        (self.tmp / name).mkdir(parents=True, exist_ok=True)
        (self.tmp / name / "ready.json").unlink(missing_ok=True)  # left by a kill -9
        s = Served(self.tmp / name, *args)
        self.names[id(s)] = name
        self.everything.append(s)
        return s

    def _upstream(self, i: int) -> str:
        """Where standby ``i`` reaches the primary: its proxy, if it has one."""
        return self.proxies[i].address if self.proxies else self.primary.address

    def _standby(self, name: str, of: str) -> Served:
        return self._serve(name, "--replication-token", TOKEN, "--standby-of", of)

    def name(self, s: Served) -> str:
        return self.names[id(s)]

    def restart(self, i: int) -> Served:
        """Starts standby ``i`` again on its directory."""
        old = self.standbys[i]
        old.kill()
        self.standbys[i] = self._standby(self.name(old), self._upstream(i))
        return self.standbys[i]

    def promote(self, i: int) -> Served:
        """Static promotion, the primary being gone: the standbys are stopped,
        standby ``i``'s directory opened as the new primary, and the other
        standby follows it. Returns the new primary."""
        for s in self.standbys:
            s.stop()
        chosen, other = self.standbys[i], self.standbys[1 - i]
        self.primary = self._serve(
            self.name(chosen), "--replication-token", TOKEN, *self.primary_args
        )
        self.proxies = []
        self.standbys = [self._standby(self.name(other), self.primary.address)]
        return self.primary

    def most_advanced(self) -> int:
        """The standby with the highest log index (the one to promote)."""
        return max(range(len(self.standbys)), key=lambda i: last_index(self.standbys[i].data))

    def rejoin(self, old: Served) -> Served:
        """Starts the dead board ``old`` again as a standby of the primary,
        from an empty directory (it seeds itself: a deposed primary's tail
        may hold writes nobody acknowledged)."""
        name = self.name(old)
        old.kill()
        shutil.rmtree(self.tmp / name)
        s = self._standby(name, self.primary.address)
        self.standbys.append(s)
        return s

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
