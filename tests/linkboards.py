"""Boards joined by links, for the kill tests across boards
(tests/test_links_faults.py, bench/links_jepsen.py).

``Boards(tmp, names)`` runs one ``msgboard serve`` child process per name,
each over its own directory ``tmp/NAME`` and found by its ready file; the
first start binds port 0 and every restart binds the port it got, as a
board with a fixed address restarts (the links of the other boards keep
its address). ``kill`` is ``kill -9`` by PID; ``restart`` kills and
starts it again on the same directory.

``Net(boards, sites)`` wires the boards of issue 27's kill test: each site
moves its queue ``up`` to the central board's ``inbox`` through a
translator (``translator``: ``prefix +SITE.``, a header, the origin), the
central board copies its queue ``news`` to every site's ``news`` (a
broadcast), and the first site pulls the central board's queue ``work``
into its own ``work`` (federation).
Each source queue has a writer (a ``Workload`` of posters alone, every
post keyed); ``flows`` are what the checker (tests/linkcheck.py) judges.
``settle`` waits until every message stored on a source queue arrived at
its destinations, ``quiet`` until every link says it is caught up;
``arrivals`` reads the destination queues.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from msgboard.client import Client
from msgboard.spec import UNLIMITED
from tests.cluster import wait_until
from tests.jepsen import browsed
from tests.linkcheck import Arrived, Flow, behind, origin
from tests.served import Served
from tests.workload import OK, POSTERS, History, Workload, now

#: The address every writer posts with; a site's translator prefixes it.
TOPIC = "orders"
#: How many of a destination's latest arrivals tell whether a flow moves.
LATEST = 1000


def translator(site: str) -> str:
    """A site's translator: its name in front of the address, a header
    naming it, the origin recorded (``x-origin-board``, ``-queue``, ``-seq``)."""
    return f"prefix +{site}. ; header set x-site={site} ; origin"


class Boards:
    """Named boards under ``tmp``; every process stopped by ``close``."""

    def __init__(self, tmp: Path, names: Sequence[str], *args: str) -> None:
        self.tmp = tmp
        self.args = args
        self.ports: dict[str, int] = {}
        self.served: dict[str, Served] = {}
        self.everything: list[Served] = []
        for name in names:
            self.start(name)

    def start(self, name: str) -> Served:
        """Serves ``name``'s directory (on its port, after the first start)."""
        (self.tmp / name).mkdir(parents=True, exist_ok=True)
        (self.tmp / name / "ready.json").unlink(missing_ok=True)  # left by a kill -9
        port = self.ports.get(name, 0)
        deadline = time.monotonic() + 60
        while True:
            try:
                s = Served(self.tmp / name, *self.args, "--listen", f"127.0.0.1:{port}")
                break
            except RuntimeError:
                # The port of a killed board may be held for a moment.
                if not port or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.everything.append(s)
        self.served[name] = s
        self.ports[name] = int(s.address.rsplit(":", 1)[1])
        return s

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def kill(self, name: str) -> None:
        self.served[name].kill()

    def restart(self, name: str) -> Served:
        self.kill(name)
        return self.start(name)

    def board_id(self, name: str) -> str:
        """The board's id, the first part of the keys its links give: its
        data's, which a board alone takes from this file when it first opens."""
        return (self.tmp / name / "board" / "board-id").read_text().strip()

    def close(self) -> None:
        for s in self.everything:
            s.kill()


class Net:
    """The boards of the kill test, wired (see the module docstring)."""

    def __init__(
        self, boards: Boards, sites: Sequence[str], central: str = "central", *, pull: bool = True
    ) -> None:
        self.boards = boards
        self.pull = pull
        self.sites = list(sites)
        self.central = central
        self.flows: list[Flow] = []
        #: Each writer's board and queue.
        self.writers: dict[str, tuple[str, str]] = {}
        self._workloads: list[Workload] = []
        self._wire()

    def _client(self, board: str) -> Client:
        return reader(self.boards.address(board))

    def _wire(self) -> None:
        """The queues first, then the links and the selectors that cross
        them (a selector to a queue not there yet waits for it)."""
        b, central = self.boards, self.central
        with self._client(central) as c:
            for q in ("inbox", "news", "work"):
                c.create_queue(q, max_history=UNLIMITED)
        for site in self.sites:
            with self._client(site) as c:
                for q in ("up", "news", "work"):
                    c.create_queue(q, max_history=UNLIMITED)
        with self._client(central) as c:
            for site in self.sites:
                c.create_link(site, b.address(site))
                c.create_selector("news", op="copy", to="news", link=site)
                self.flows.append(Flow("news", (central, "news"), (site, "news"), address=TOPIC))
        self.writers["news"] = (central, "news")
        for site in self.sites:
            with self._client(site) as c:
                c.create_link(central, b.address(central))
                c.create_selector("up", to="inbox", link=central, translator=translator(site))
            self.writers[f"up-{site}"] = (site, "up")
            self.flows.append(
                Flow(
                    f"up-{site}",
                    (site, "up"),
                    (central, "inbox"),
                    address=f"{site}.{TOPIC}",
                    headers={"x-site": site, "x-origin-queue": "up"},
                )
            )
        if self.pull:
            puller = self.sites[0]
            with self._client(puller) as c:
                c.create_selector("work", to="work", source_link=central)
            self.writers["work"] = (central, "work")
            self.flows.append(Flow("work", (central, "work"), (puller, "work"), address=TOPIC))

    # -- load -----------------------------------------------------------

    def load(self, history: History, pause: float = 0.05, batch: int = 5) -> None:
        """Starts every writer: posters alone, each post keyed, each
        poster pausing ``pause`` s between posts (``batch`` messages a
        streamed post)."""
        for name, (board, queue) in self.writers.items():
            w = Workload(
                history,
                self.boards.address(board),
                name=name,
                queues=(queue,),
                roles=POSTERS,
                topic=TOPIC,
                pause=pause,
                batch=batch,
            )
            self._workloads.append(w.start())

    def unload(self) -> None:
        for w in self._workloads:
            w.stop()
        self._workloads = []

    # -- reading --------------------------------------------------------

    def arrivals(self) -> list[Arrived]:
        """Every message of every flow's destination queue."""
        where = sorted({f.destination for f in self.flows})
        return arrivals({b: self.boards.address(b) for b, _ in where}, where)

    def ids(self) -> dict[str, str]:
        return {name: self.boards.board_id(name) for name in [*self.sites, self.central]}

    def stored(self, board: str, queue: str) -> set[int]:
        """The seqs of every message on a source queue."""
        with self._client(board) as c:
            return {m.seq for _, m in browsed(c, queue)}

    def behind(self) -> list[str]:
        """Each flow with messages stored at its source that did not
        arrive at its destination yet (how many)."""
        ids = self.ids()
        arrived = self.arrivals()
        out = []
        for f in self.flows:
            here = (ids[f.source[0]], f.source[1])
            got = {
                o[2]
                for a in arrived
                if (a.board, a.queue) == f.destination
                and (o := a.origin) is not None
                and o[:2] == here
            }
            missing = self.stored(*f.source) - got
            if missing:
                out.append(f"{f.name}: {len(missing)} behind (first seq {min(missing)})")
        return out

    def settle(self, seconds: float = 120) -> list[str]:
        """Waits until every message stored on a source queue arrived;
        what is still behind after ``seconds`` (one line a flow, [] once
        all arrived: the checker says what is missing)."""
        deadline = now() + seconds
        while True:
            late = self.behind()
            if not late or now() > deadline:
                return [f"not settled within {seconds:.0f} s: {line}" for line in late]
            time.sleep(0.5)  # each look reads every queue: not 20 a second

    def quiet(self, seconds: float = 60) -> list[str]:
        """Once everything arrived: waits until every link says it is
        caught up and connected (rule f of tests/linkcheck.py); what is
        still behind after ``seconds``."""
        deadline = now() + seconds
        while True:
            views = {}
            for name in [*self.sites, self.central]:
                with self._client(name) as c:
                    views[name] = c.list_links()
            late = behind(views)
            if not late or now() > deadline:
                return late
            time.sleep(0.5)

    def newest(self) -> dict[str, int]:
        """Each flow's highest origin seq among the latest arrivals at its
        destination (0: none of them)."""
        ids = self.ids()
        out = {f.name: 0 for f in self.flows}
        for board, queue in sorted({f.destination for f in self.flows}):
            with self._client(board) as c:
                page = c.browse(queue, "latest", reverse=True, limit=LATEST, section="unprocessed")
            for f in self.flows:
                if f.destination != (board, queue):
                    continue
                here = (ids[f.source[0]], f.source[1])
                seqs = [
                    o[2] for m in page.messages if (o := origin(m.key, m.headers)) and o[:2] == here
                ]
                out[f.name] = max(seqs, default=0)
        return out

    # -- faults ---------------------------------------------------------

    def cycle(self, victims: Sequence[str], rng: random.Random, history: History) -> None:
        """One kill cycle under load: at a random moment kill -9 the first
        of ``victims``, each next one at a random moment while the ones
        before are down, then start them again on their directories, in
        turn; returns once every writer had a post answered and every
        flow delivered a message after the restarts."""
        time.sleep(rng.uniform(0.1, 1.5))  # a random moment under load
        for i, name in enumerate(victims):
            if i:
                time.sleep(rng.uniform(0.0, 0.5))
            self.boards.kill(name)
        for name in victims:
            self.boards.start(name)
        self.moving(history)

    def moving(self, history: History, seconds: float = 90) -> None:
        """Waits until every writer had a post answered OK and every flow
        delivered a message it had not delivered before, both after now."""
        since = now()
        marks = self.newest()

        def posting() -> bool:
            return all(
                any(
                    o.kind == "post" and o.outcome == OK and o.invoked_at > since
                    for o in history.ops()
                    if o.client.startswith(w + "-")
                )
                for w in self.writers
            )

        wait_until("every writer posts again", posting, seconds)
        late: list[str] = []

        def arriving() -> bool:
            newest = self.newest()
            late[:] = [name for name, seq in newest.items() if seq <= marks[name]]
            if late:
                time.sleep(0.2)
            return not late

        try:
            wait_until("every flow delivers again", arriving, seconds)
        except AssertionError as e:
            raise AssertionError(f"{e}: nothing new by {', '.join(late)}") from None


def reader(address: str) -> Client:
    """A client for the harness's own calls: it tries again for a minute
    when the board is down or just back (with failover's channel options,
    so it shares no connection, nor its backoff, with the workload's
    clients: gRPC pools connections of channels alike, and one that was
    refused while the board was down refuses at once for a while)."""
    return Client(address, timeout=60, failover=60)


def arrivals(addresses: Mapping[str, str], queues: Sequence[tuple[str, str]]) -> list[Arrived]:
    """Every message of ``queues`` (board name, queue), the boards at
    ``addresses`` by name."""
    out: list[Arrived] = []
    for board, queue in queues:
        with reader(addresses[board]) as c:
            for _, m in browsed(c, queue):
                out.append(Arrived(board, queue, m.seq, m.key, m.body, m.address, dict(m.headers)))
    return out
