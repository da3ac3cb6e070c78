"""Boards of a cluster for the fault tests with leadership through etcd:
``Nodes`` starts three ``msgboard serve --cluster`` processes over their
own temporary directories, started, killed (-9), paused (SIGSTOP) and
resumed by PID, each wired so that a test can cut any of its links:

- board ``b{i}`` listens on a fixed loopback port of its own, where the
  test's clients reach it directly (``listen``);
- it advertises a ``Proxy`` to that port (``front``): the other boards
  (its standbys, when it leads) reach it only through that proxy;
- it reaches each etcd member through a ``Proxy`` of its own (``etcd``).

So ``cut(name)`` isolates a board from its standbys and from etcd while
its clients still reach it: the case where a primary must fence itself.

``finish(history)`` ends a test: the standbys reach the primary's last
index, the primary's queues are read (``tests.jepsen.dump``), the primary
is frozen (SIGSTOP) so it writes nothing more, the standbys reach its last
index again and are killed (-9: no election can start meanwhile, and a
kill leaves LMDB whole), then the primary; the checker
(``tests.jepsen.check``) judges the history, the dump and the standbys'
directories.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from msgboard.client import Client
from msgboard.cluster import TRANSIENT, Etcd
from msgboard.errors import MsgboardError
from tests.cluster import TOKEN, EtcdCluster, free_ports, wait_until
from tests.jepsen import check, dump
from tests.proxy import Proxy
from tests.served import Served
from tests.test_replication import last_index
from tests.workload import QUEUES, History


def refusal(address: str) -> str:
    """Why the board at ``address`` does not serve a client call now ("":
    it does)."""
    try:
        with Client(address, timeout=2.0) as c:
            c.list_queues()
        return ""
    except MsgboardError as e:
        return f"{type(e).__name__}: {e}"


class Nodes:
    """Three boards of cluster ``cluster`` on ``etcd``; ``args`` go to each."""

    def __init__(self, root: Path, etcd: EtcdCluster, cluster: str, *args: str) -> None:
        self.root = root
        self.cluster = cluster
        self.args = args
        self.etcd_cluster = etcd
        self.names = ["b0", "b1", "b2"]
        self.listen = {n: f"127.0.0.1:{p}" for n, p in zip(self.names, free_ports(3), strict=True)}
        self.front = {n: Proxy(self.listen[n]) for n in self.names}
        self.etcd = {
            n: [Proxy(m.client_url.removeprefix("http://")) for m in etcd.members]
            for n in self.names
        }
        self.procs: dict[str, Served] = {}
        #: Boards the test killed (-9) and has not started again.
        self.killed: set[str] = set()
        #: Every board's address, as clients that follow the primary take them.
        self.addresses = ",".join(self.listen.values())

    def start(self, *names: str) -> Nodes:
        for n in names or self.names:
            where = self.root / n
            where.mkdir(parents=True, exist_ok=True)
            (where / "ready.json").unlink(missing_ok=True)  # left by a kill -9
            self.killed.discard(n)
            self.procs[n] = Served(
                where,
                *("--listen", self.listen[n], "--advertise", self.front[n].address),
                *("--cluster", self.cluster, "--board-name", n),
                *("--etcd", ",".join(f"http://{p.address}" for p in self.etcd[n])),
                *("--replication-token", TOKEN),
                *self.args,
                wait=False,
            )
        for n in names or self.names:
            self.procs[n].wait_ready()
        return self

    def data(self, name: str) -> Path:
        return self.root / name / "board"

    def leader(self) -> str | None:
        """The board etcd's leader key names now (None: none, or no quorum)."""
        etcd = Etcd(self.etcd_cluster.endpoints, timeout=2.0)
        try:
            entry, _ = etcd.get(f"/msgboard/{self.cluster}/leader")
        except TRANSIENT:
            return None
        finally:
            etcd.close()
        return None if entry is None else str(json.loads(entry.value)["name"])

    def in_sync(self) -> list[str]:
        """The in-sync set etcd holds now ([] when none, or no quorum)."""
        etcd = Etcd(self.etcd_cluster.endpoints, timeout=2.0)
        try:
            entry, _ = etcd.get(f"/msgboard/{self.cluster}/sync")
        except TRANSIENT:
            return []
        finally:
            etcd.close()
        return [] if entry is None else list(json.loads(entry.value)["standbys"])

    def primary(self, timeout: float = 90.0, other_than: str = "") -> str:
        """The board that leads and answers a client, waiting for one."""
        found: list[str] = []
        #: What the last look saw, for the failure's message.
        seen = ["nothing yet"]

        def serving() -> bool:
            self.alive()
            name = self.leader()
            if name is None or name == other_than:
                seen[0] = f"etcd's leader key names {name or 'no board'}"
                return False
            why = refusal(self.listen[name])
            if why:
                seen[0] = f"etcd names {name}, which does not serve: {why}"
                return False
            found[:] = [name]
            return True

        try:
            wait_until(f"a primary other than {other_than or 'none'} serves", serving, timeout)
        except AssertionError as e:
            self.show()
            raise AssertionError(f"{e} (last look: {seen[0]}; {self.states()})") from None
        return found[0]

    def alive(self) -> None:
        """Fails at once if a board the test did not kill has exited (no wait
        can end well then: an elected board that exits can leave no other
        board promotable)."""
        gone = [
            n for n, s in self.procs.items() if n not in self.killed and s.proc.poll() is not None
        ]
        if gone:
            raise AssertionError(f"board {', '.join(gone)} exited by itself")

    def states(self) -> str:
        """Each board's process: running, or its exit code."""
        said = []
        for n, s in self.procs.items():
            code = s.proc.poll()
            said.append(f"{n} {'running' if code is None else f'exited {code}'}")
        return ", ".join(said)

    def show(self, tail: int = 8000) -> None:
        """Prints the end of each board's log (pytest shows it with a failure)."""
        for n, s in self.procs.items():
            print(f"===== {n}'s log ({s.log})\n{s.log.read_text(errors='replace')[-tail:]}")

    def kill(self, name: str) -> None:
        self.killed.add(name)
        self.procs[name].kill()

    def pause(self, name: str) -> None:
        os.kill(self.procs[name].proc.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self.procs[name].proc.pid, signal.SIGCONT)

    def cut(self, name: str) -> None:
        """``name`` loses its standbys (or its primary) and etcd; its clients
        still reach it."""
        for p in [self.front[name], *self.etcd[name]]:
            p.cut()

    def heal(self, name: str) -> None:
        for p in [self.front[name], *self.etcd[name]]:
            p.heal()

    def caught_up(self, primary: str, timeout: float = 90.0) -> None:
        def done() -> bool:
            last = last_index(self.data(primary))
            return all(last_index(self.data(n)) == last for n in self.names if n != primary)

        wait_until("every standby holds the primary's whole log", done, timeout)

    def finish(self, history: History) -> list[str]:
        """The checker's verdict (see the module docstring)."""
        primary = self.primary()
        self.caught_up(primary)
        final = dump(self.listen[primary], self.data(primary), QUEUES)
        self.pause(primary)
        self.caught_up(primary)
        standbys = [n for n in self.names if n != primary]
        for n in standbys:
            self.kill(n)
        self.kill(primary)
        print("history:", history.summary())  # shown by pytest when a test fails
        return check(history.ops(), final, [self.data(n) for n in standbys])

    def close(self) -> None:
        for s in self.procs.values():
            if s.proc.poll() is None:
                os.kill(s.proc.pid, signal.SIGCONT)
            s.kill()
        for p in [*self.front.values(), *(q for ps in self.etcd.values() for q in ps)]:
            p.close()
