"""Real etcd for the cluster tests: ``EtcdCluster`` starts Debian's ``etcd``
(3.4, from ``etcd-server``; scripts/setup --dev installs it, no service
started) as three members on free loopback ports with temporary data
directories, each started, killed (-9) and restarted by its PID.

``Campaigner`` runs tests/campaigner.py (a board's leadership alone) in a
child process and gathers what it prints into a ``History`` shared by every
child of a test. ``violations(history)`` is the checker: what no history
of a correct leadership may contain. tests/test_cluster_leadership.py first
shows it each violation, then holds every fault test's history to it.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from msgboard.cluster import TRANSIENT, Etcd, SyncSet
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent


def etcd_binary() -> str:
    """Debian's etcd, or a skip (a failure under CI, whose setup installs it)."""
    found = shutil.which("etcd")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed: scripts/setup --dev installs etcd-server")
        pytest.skip("etcd is not installed (Debian: etcd-server; scripts/setup --dev)")
    return found


def wait_until(what: str, ok: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


class EtcdMember:
    """One etcd member process; its data directory outlives a kill."""

    def __init__(self, binary: str, name: str, root: Path, client: int, peer: int) -> None:
        self.binary = binary
        self.name = name
        self.data = root / name
        self.log = root / f"{name}.log"
        self.client_url = f"http://127.0.0.1:{client}"
        self.peer_url = f"http://127.0.0.1:{peer}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, initial_cluster: str) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    *("--name", self.name, "--data-dir", str(self.data)),
                    *("--listen-client-urls", self.client_url),
                    *("--advertise-client-urls", self.client_url),
                    *("--listen-peer-urls", self.peer_url),
                    *("--initial-advertise-peer-urls", self.peer_url),
                    *("--initial-cluster", initial_cluster),
                    *("--initial-cluster-token", "msgboard-tests"),
                    *("--initial-cluster-state", "new"),
                    *("--logger", "zap", "--log-outputs", "stderr"),
                ],
                stdout=out,
                stderr=out,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 by PID, and reaped."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


class EtcdCluster:
    """Three etcd members on loopback, from ``start()`` to ``stop()``."""

    def __init__(self, root: Path, size: int = 3) -> None:
        binary = etcd_binary()
        ports = free_ports(2 * size)
        self.members = [
            EtcdMember(binary, f"etcd{i}", root, ports[2 * i], ports[2 * i + 1])
            for i in range(size)
        ]
        self.initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> str:
        return ",".join(m.client_url for m in self.members)

    def start(self) -> EtcdCluster:
        for m in self.members:
            m.start(self.initial)
        self.wait_quorum()
        return self

    def wait_quorum(self, timeout: float = 60.0) -> None:
        """Until a linearizable read succeeds (a leader with its quorum)."""
        etcd = Etcd(self.endpoints, timeout=2.0)

        def answers() -> bool:
            try:
                etcd.get("/msgboard-tests/probe")
                return True
            except TRANSIENT:
                return False

        try:
            wait_until("etcd has a quorum", answers, timeout)
        finally:
            etcd.close()

    def kill(self, *indexes: int) -> None:
        for i in indexes:
            self.members[i].kill()

    def lines(self, word: str, last: int = 40) -> str:
        """The last lines of each member's log that hold ``word``: what a
        failed assertion shows of etcd's side (its leases, its leaders)."""
        out = []
        for m in self.members:
            said = [x for x in m.log.read_text(errors="replace").splitlines() if word in x]
            out += [f"{m.name}: {x}" for x in said[-last:]]
        return "\n".join(out)

    def restart(self, *indexes: int) -> None:
        """Starts killed members again on their data (etcd ignores the
        initial-cluster flags for a member that has data)."""
        for i in indexes:
            if not self.members[i].running():
                self.members[i].start(self.initial)

    def stop(self) -> None:
        for m in self.members:
            m.kill()


def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A three-member etcd for one test module, made a fixture there with
    ``etcd = pytest.fixture(scope="module")(etcd_cluster)``."""
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


# -- what the campaigners print, and the checker ---------------------------


@dataclass(frozen=True)
class Record:
    """One line of a campaigner: an event of its leadership, or a claim."""

    board: str
    kind: str
    at: float
    epoch: int = 0
    until: float = 0.0
    reason: str = ""


class History:
    """Every record of a test's campaigners, in the order they arrived."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._changed = threading.Condition()

    def add(self, r: Record) -> None:
        with self._changed:
            self.records.append(r)
            self._changed.notify_all()

    def find(self, ok: Callable[[Record], bool]) -> list[Record]:
        with self._changed:
            return [r for r in self.records if ok(r)]

    def wait(self, what: str, ok: Callable[[Record], bool], timeout: float = 30.0) -> Record:
        """The first record ``ok`` accepts, waiting up to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for r in self.records:
                    if ok(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not within {timeout} s: {what}")
                self._changed.wait(left)

    def elected(self) -> list[Record]:
        return self.find(lambda r: r.kind == "elected")


def violations(records: list[Record]) -> list[str]:
    """What a correct leadership never does, each found as a line:

    - a board claims a term at or after that term's deadline (it failed to
      fence itself), after resigning it, or with a deadline later than it
      announced;
    - a claim of a term before that term's election;
    - two boards elected with one epoch;
    - a term whose deadline reaches past the election of a later epoch (two
      leaders at once), or a claim of an epoch after a later one's election;
    - epochs that do not grow in the order of their elections.
    """
    found: list[str] = []
    elected: dict[int, Record] = {}
    last: dict[int, float] = {}
    for r in records:
        if r.kind == "elected":
            if r.epoch in elected:
                found.append(
                    f"epoch {r.epoch} elected twice: {elected[r.epoch].board} and {r.board}"
                )
                continue
            elected[r.epoch] = r
        if r.kind in ("elected", "renewed"):
            last[r.epoch] = max(last.get(r.epoch, 0.0), r.until)
    # A resigned term ends when it says so, however long its lease had left.
    announced = dict(last)
    resigned = {r.epoch: r.at for r in records if r.kind == "resigned"}
    for epoch, at in resigned.items():
        last[epoch] = min(last.get(epoch, at), at)
    for r in records:
        if r.kind != "claim":
            continue
        e = elected.get(r.epoch)
        if r.at >= r.until:
            found.append(f"{r.board} claimed epoch {r.epoch} at {r.at:.3f}, past {r.until:.3f}")
        if r.epoch in resigned and r.at >= resigned[r.epoch]:
            found.append(f"{r.board} claimed epoch {r.epoch} at {r.at:.3f}, after resigning it")
        elif r.until > announced.get(r.epoch, 0.0):
            found.append(f"{r.board} claimed epoch {r.epoch} until {r.until:.3f}, never announced")
        if e is None or e.board != r.board or r.at < e.at:
            found.append(f"{r.board} claimed epoch {r.epoch} at {r.at:.3f} before its election")
        for later in elected.values():
            if later.epoch > r.epoch and r.at >= later.at:
                found.append(
                    f"{r.board} claimed epoch {r.epoch} at {r.at:.3f}, after epoch"
                    f" {later.epoch} was elected ({later.board}, {later.at:.3f})"
                )
    terms = sorted(elected.values(), key=lambda r: r.at)
    for before, after in itertools.pairwise(terms):
        if after.epoch <= before.epoch:
            found.append(
                f"epoch went from {before.epoch} ({before.board}) down to {after.epoch}"
                f" ({after.board})"
            )
        if last.get(before.epoch, 0.0) > after.at:
            found.append(
                f"epoch {before.epoch} ({before.board}) lasted until"
                f" {last[before.epoch]:.3f}, past epoch {after.epoch}'s election"
                f" ({after.board}, {after.at:.3f})"
            )
    return found


class Campaigner:
    """tests/campaigner.py in a child process; its lines go to ``history``."""

    def __init__(
        self, history: History, endpoints: str, cluster: str, name: str, *args: str
    ) -> None:
        self.name = name
        self.history = history
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.campaigner"),
                *("--etcd", endpoints, "--cluster", cluster, "--name", name),
                *args,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = json.loads(line)
            self.history.add(Record(**fields))

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (a leader resigns), then -9 if it does not end."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def campaigners(
    history: History, endpoints: str, cluster: str, names: list[str], *args: str
) -> Iterator[list[Campaigner]]:
    """Children for ``names``, stopped (by PID) when the caller is done."""
    started: list[Campaigner] = []
    try:
        for n in names:
            started.append(Campaigner(history, endpoints, cluster, n, *args))
        yield started
    finally:
        for c in started:
            c.stop()


# -- boards of a cluster ------------------------------------------------------

#: The cluster's replication token in the tests.
TOKEN = "cluster-tests-token"


class Boards:
    """``msgboard serve --cluster`` processes on loopback, one directory
    each under ``root``, started, killed (-9), paused and stopped by PID
    (``tests/served.py``'s ``Served``). ``etcd``: the members' endpoints.
    Board ``i`` is named ``b{i}``; ``args`` go to every board.

    ``proxied``: each board reaches etcd through ``Proxy`` objects of its
    own (``etcd_links[name]``, one per member), and is reached, by the
    other boards and by the clients its NotPrimary answers send, through
    one more (``links[name]``, the address it advertises; the test's own
    calls go straight to it). ``cut_from_etcd(name)`` and ``links[name].cut()``
    partition it."""

    def __init__(
        self,
        root: Path,
        etcd: str,
        cluster: str,
        *args: str,
        size: int = 3,
        proxied: bool = False,
    ) -> None:
        from tests.proxy import Proxy
        from tests.served import Served

        self.root = root
        self.etcd = etcd
        self.cluster = cluster
        self.args = args
        self.names = [f"b{i}" for i in range(size)]
        self.procs: dict[str, Served | None] = dict.fromkeys(self.names)
        self._served = Served
        self.proxied = proxied
        self.etcd_links: dict[str, list[Proxy]] = {}
        self.links: dict[str, Proxy] = {}
        self.ports: dict[str, int] = {}
        if proxied:
            members = [u.removeprefix("http://") for u in etcd.split(",")]
            for name, port in zip(self.names, free_ports(size), strict=True):
                self.etcd_links[name] = [Proxy(m) for m in members]
                self.ports[name] = port
                self.links[name] = Proxy(f"127.0.0.1:{port}")

    def cut_from_etcd(self, name: str) -> None:
        for p in self.etcd_links[name]:
            p.cut()

    def heal_etcd(self, name: str) -> None:
        for p in self.etcd_links[name]:
            p.heal()

    def advertised(self, name: str) -> str:
        """Where the cluster sends clients of ``name`` (its link if proxied)."""
        return self.links[name].address if self.proxied else self.address(name)

    def start(self, *names: str) -> Boards:
        for name in names or self.names:
            where = self.root / name
            where.mkdir(exist_ok=True)
            (where / "ready.json").unlink(missing_ok=True)  # left by a kill -9
            more: tuple[str, ...] = ()
            etcd = self.etcd
            if self.proxied:
                etcd = ",".join(f"http://{p.address}" for p in self.etcd_links[name])
                more = (
                    *("--listen", f"127.0.0.1:{self.ports[name]}"),
                    *("--advertise", self.links[name].address),
                )
            self.procs[name] = self._served(
                where,
                *("--cluster", self.cluster, "--etcd", etcd, "--board-name", name),
                *("--replication-token", TOKEN),
                *self.args,
                *more,
                wait=False,
            )
        for name in names or self.names:
            proc = self.procs[name]
            assert proc is not None
            proc.wait_ready()
        return self

    def proc(self, name: str) -> subprocess.Popen[bytes]:
        served = self.procs[name]
        assert served is not None
        return served.proc

    def address(self, name: str) -> str:
        served = self.procs[name]
        assert served is not None
        return served.address

    def data(self, name: str) -> Path:
        return self.root / name / "board"

    def log(self, name: str) -> str:
        served = self.procs[name]
        return "" if served is None else served.log.read_text(errors="replace")

    def primary(self, timeout: float = 60.0, among: list[str] | None = None) -> str:
        """The board etcd names as the primary once it serves (a client
        call answers), waiting for one."""
        etcd = Etcd(self.etcd, timeout=2.0)
        found: list[str] = []

        def serving() -> bool:
            try:
                entry, _ = etcd.get(f"/msgboard/{self.cluster}/leader")
            except TRANSIENT:
                return False
            if entry is None:
                return False
            name = json.loads(entry.value)["name"]
            if among is not None and name not in among:
                return False
            if not _answers(self.address(name)):
                return False
            found[:] = [name]
            return True

        try:
            wait_until("a primary serves", serving, timeout)
        finally:
            etcd.close()
        return found[0]

    def sync_set(self) -> SyncSet | None:
        """The in-sync set stored in etcd (None: never written)."""
        etcd = Etcd(self.etcd, timeout=2.0)
        try:
            entry, _ = etcd.get(f"/msgboard/{self.cluster}/sync")
        finally:
            etcd.close()
        return SyncSet.of(entry)

    def in_sync(self) -> list[str]:
        """The names of the in-sync set stored in etcd."""
        s = self.sync_set()
        return [] if s is None else list(s.standbys)

    def kill(self, name: str) -> None:
        served = self.procs[name]
        if served is not None:
            served.kill()

    def pause(self, name: str) -> None:
        os.kill(self.proc(name).pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self.proc(name).pid, signal.SIGCONT)

    def stop(self) -> None:
        for served in self.procs.values():
            if served is not None and served.proc.poll() is None:
                os.kill(served.proc.pid, signal.SIGCONT)
                served.stop()
        for proxy in [*self.links.values(), *(p for ps in self.etcd_links.values() for p in ps)]:
            proxy.close()


def _answers(address: str) -> bool:
    """Whether the board at ``address`` serves a client call."""
    from msgboard.client import Client
    from msgboard.errors import MsgboardError

    try:
        with Client(address, timeout=2.0) as c:
            c.list_queues()
        return True
    except (MsgboardError, OSError):
        return False


@contextmanager
def boards(
    root: Path, etcd: str, cluster: str, *args: str, proxied: bool = False
) -> Iterator[Boards]:
    """Three boards of ``cluster`` on ``etcd``, stopped (by PID) at the end."""
    b = Boards(root, etcd, cluster, *args, proxied=proxied)
    try:
        yield b.start()
    except BaseException:
        for name in b.names:  # shown by pytest with the failure
            print(f"===== {name}'s log\n{b.log(name)[-6000:]}")
        raise
    finally:
        b.stop()
