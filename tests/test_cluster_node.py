"""Boards of a cluster (``msgboard serve --cluster``), told with real
processes: three etcd members and three boards on loopback, each started,
killed (-9), paused (SIGSTOP) and stopped by PID (tests/cluster.py's
``EtcdCluster`` and ``Boards``).

The stories: three boards elect one primary and the others send clients
to it; kill -9 of the primary promotes a standby of the in-sync set that
holds every write answered OK before the kill (a client that moves by hand);
a primary paused past its lease answers no OK once resumed, and comes back
as a standby of the new one; a standby left out of the in-sync set is never
promoted. The promotion rule is first shown on its own, case by case.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from msgboard.client import Client
from msgboard.cluster.keys import Position, SyncSet
from msgboard.cluster.members import may_discard, promotable
from msgboard.errors import MsgboardError, NoLease, NotPrimary, Unavailable
from tests.cluster import Boards, EtcdCluster, boards, etcd_cluster, wait_until
from tests.jepsen import browsed
from tests.test_replication import last_index, violations, waiting

etcd = pytest.fixture(scope="module")(etcd_cluster)

TTL = "2"
#: Generous: the machine is shared; a standby may take seconds to join.
PATIENT = ("--lease-ttl", TTL, "--sync-timeout-ms", "30000")
_clusters = itertools.count()


def cluster_name() -> str:
    return f"c{next(_clusters)}-{time.monotonic_ns() % 10**9}"


@pytest.fixture
def three(tmp_path: Path, etcd: EtcdCluster) -> Iterator[Boards]:
    """Three boards of a fresh cluster on the module's etcd."""
    with boards(tmp_path, etcd.endpoints, cluster_name(), *PATIENT) as b:
        yield b


@pytest.fixture
def steady(tmp_path: Path, etcd: EtcdCluster) -> Iterator[Boards]:
    """Three boards whose leases outlast a starved machine (at load 30-50 on
    2 cores a 2 s lease runs out now and then: a failover, which the tests
    of a planned switchover must not mistake for one)."""
    with boards(tmp_path, etcd.endpoints, cluster_name(), "--lease-ttl", "10",
                "--sync-timeout-ms", "30000") as b:  # fmt: skip
        yield b


# -- the promotion rule -----------------------------------------------------


def at(name: str, index: int, epoch: int = 1, stopped: bool = True, board_id: str = "") -> Position:
    return Position(name, f"{name}:1", index, epoch, stopped, index + 100, board_id)


def test_only_the_highest_stopped_member_of_the_set_may_be_promoted() -> None:
    sync = SyncSet(5, ("a", "b"))
    both = [at("a", 10), at("b", 12), at("c", 99)]
    # c has the most, but is not in the set; b is the highest member.
    assert promotable("c", sync, both, 1) is None
    assert promotable("a", sync, both, 1) is None
    assert promotable("b", sync, both, 1) == [both[0], both[1]]
    # A later epoch beats a longer log; a tie goes to the lowest name.
    assert promotable("a", sync, [at("a", 3, epoch=2), at("b", 12)], 1) is not None
    assert promotable("a", sync, [at("a", 12), at("b", 12)], 1) is not None
    # With one standby needed, both members must have stopped (either may
    # hold a write only it acknowledged) ...
    assert promotable("b", sync, [at("a", 10, stopped=False), at("b", 12)], 1) is None
    assert promotable("b", sync, [at("b", 12)], 1) is None
    # ... with two needed, every answered write is on both: one is enough.
    assert promotable("b", sync, [at("b", 12)], 2) is not None
    # An empty set promotes nobody; no set at all (a new cluster): the
    # highest of the members, once all have stopped.
    assert promotable("a", SyncSet(5, ()), [at("a", 1)], 1) is None
    assert promotable("a", None, [at("a", 0), at("b", 0)], 1) is not None
    assert promotable("b", None, [at("a", 0), at("b", 0)], 1) is None
    assert promotable("a", None, [at("a", 0), at("b", 0, stopped=False)], 1) is None


def test_the_primary_that_wrote_the_set_leads_again_only_with_its_data() -> None:
    """The exception of the rule (issue 33): the primary that wrote the set
    may lead again, not being in it, only while it holds the data it led
    with in that term (its ``led`` file names the set's epoch); deposed
    and set aside, seeded, or with its directory lost, it may not. Its
    data goes only once a later term has written its own set."""
    sync = SyncSet(47, ("b",), primary="a")
    mine = [at("a", 5, epoch=47), at("b", 5, epoch=47, stopped=False)]
    assert promotable("a", sync, mine, 1, led=47) == []
    assert promotable("a", sync, mine, 1, led=12) == []  # the same data since 12
    assert promotable("a", sync, [at("a", 0, epoch=0), *mine[1:]], 1, led=0) is None
    assert promotable("a", sync, mine, 1, led=60) is None  # its data is newer than the set
    assert promotable("b", sync, mine, 1, led=47) is None  # b's led file is not a's
    # A board that led with its data since 47 keeps it while the set is
    # the one it wrote (a successor elected at 60 that has not written
    # its own yet), or none.
    assert not may_discard("a", 47, sync)
    assert not may_discard("a", 47, None)
    assert may_discard("a", 47, SyncSet(60, (), primary="b"))
    assert may_discard("a", 0, sync)  # a board that did not lead with it: always


# -- a client that moves by hand ----------------------------------------------


class Hand:
    """Calls the cluster's boards the way a client without failover would
    be moved by hand: on NotPrimary to the address it names, on any other
    error to the next board, until ``patience`` seconds have passed."""

    def __init__(self, addresses: list[str], patience: float = 60.0) -> None:
        self.addresses = addresses
        self.at = addresses[0]
        self.patience = patience

    def call(self, fn: Callable[[Client], Any]) -> Any:
        deadline = time.monotonic() + self.patience
        turn = itertools.cycle(self.addresses)
        while True:
            try:
                with Client(self.at, timeout=10) as c:
                    return fn(c)
            except NotPrimary as e:
                self.at = e.primary or next(turn)
            except MsgboardError:
                self.at = next(turn)
            if time.monotonic() > deadline:
                raise AssertionError(f"no board answered within {self.patience} s")
            time.sleep(0.1)


class Poster(threading.Thread):
    """Posts fresh bodies to ``queue`` one at a time through ``address``
    until ``stop``; each post that fails is given up (never retried: a
    body is answered OK once or not at all). ``answered``: OK bodies;
    ``after``: (clock, ok) of each answer, for the fence."""

    def __init__(self, address: str, queue: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.address, self.queue, self.prefix = address, queue, prefix
        self.answered: list[bytes] = []
        self.answers: list[Answer] = []
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        for i in itertools.count():
            if self.stopping.is_set():
                return
            body = f"{self.prefix}-{i}".encode()
            invoked = time.monotonic()
            try:
                with Client(self.address, timeout=30) as c:
                    c.post(self.queue, body=body)
            except MsgboardError as e:
                self.answers.append((time.monotonic(), False, type(e).__name__, invoked, body))
                time.sleep(0.05)
                continue
            self.answers.append((time.monotonic(), True, "", invoked, body))
            self.answered.append(body)


#: (received, OK?, error's class name, invoked, body) of one post.
Answer = tuple[float, bool, str, float, bytes]


def oks_after(answers: list[Answer], moment: float) -> list[Answer]:
    """The fence's checker: answers OK received at or after ``moment``
    (when the board had to have stopped answering OK)."""
    return [a for a in answers if a[0] >= moment and a[1]]


def test_the_fence_checker_catches_an_ok_after_the_moment() -> None:
    answers: list[Answer] = [
        (1.0, True, "", 0.9, b"a"),
        (2.0, False, "NoLease", 1.9, b"b"),
        (3.0, False, "X", 2.9, b"c"),
    ]
    assert oks_after(answers, 1.5) == []
    late = (2.5, True, "", 2.4, b"d")
    assert oks_after([*answers, late], 1.5) == [late]
    assert oks_after(answers, 1.0) == [answers[0]]


def refusal(address: str) -> MsgboardError | None:
    """What a write to ``address`` gets (None: it was answered OK)."""
    try:
        with Client(address, timeout=10) as c:
            c.post("probe", body=b"probe")
    except MsgboardError as e:
        return e
    return None


# -- the stories ----------------------------------------------------------


def test_three_boards_elect_one_primary_and_the_others_send_clients_to_it(
    three: Boards,
) -> None:
    """Given three boards of a new cluster, I expect one primary, serving;
    the two others to answer NotPrimary naming its address; and both to
    join the in-sync set."""
    p = three.primary()
    with Client(three.address(p)) as c:
        c.create_queue("probe")
        c.post("probe", body=b"first")
    for other in three.names:
        if other != p:
            # A standby that has not read etcd since the election names no
            # primary yet (NotPrimary, empty): it names this one soon after.
            def names_it(other: str = other) -> bool:
                e = refusal(three.address(other))
                assert isinstance(e, NotPrimary), e
                return e.primary == three.address(p)

            wait_until(f"{other} names the primary", names_it, 30)
    wait_until("both standbys in sync", lambda: len(three.in_sync()) == 2, 60)
    assert p not in three.in_sync()


def test_kill_9_of_the_primary_promotes_an_in_sync_standby_with_every_answered_write(
    three: Boards,
) -> None:
    """Given three boards and writes in flight on the primary (posts in two
    threads, takes), when I kill -9 the primary, I expect a standby of the
    in-sync set to be promoted, holding every post answered OK before the
    kill exactly once and nothing taken; a client moved by hand writes
    again on it; the old primary, restarted on its data, follows the new
    one: on from where its log ends if that is a prefix of the new
    primary's, else with its data set aside first, never thrown away."""
    p = three.primary()
    hand = Hand([three.address(n) for n in three.names])
    hand.at = three.address(p)
    hand.call(lambda c: [c.create_queue(q) for q in ("a", "b")])
    wait_until("both standbys in sync", lambda: len(three.in_sync()) == 2, 60)
    answered: dict[bytes, str] = {}
    gone: set[bytes] = set()
    posters = [Poster(three.address(p), q, q) for q in ("a", "b")]
    wait_until("posts answered", lambda: all(len(x.answered) >= 15 for x in posters), 60)
    with Client(three.address(p)) as c:
        gone.update(m.body for m in c.take("a", max=5))
    in_sync = three.in_sync()
    three.kill(p)
    for x in posters:
        x.stopping.set()
        x.join(60)
        answered.update(dict.fromkeys(x.answered, x.queue))
    survivors = [n for n in three.names if n != p]
    q = three.primary(among=survivors)
    assert q in in_sync
    hand.call(lambda c: c.post("a", body=b"after the failover"))
    with Client(three.address(q)) as c:
        assert violations(waiting(c, ["a", "b"]), answered, gone) == []
    assert f"leadership {q}: elected" in three.log(q)
    # Restarted on its data, the old primary follows (on, or seeded).
    three.start(p)
    wait_until(
        "the old primary, restarted, follows the new one",
        lambda: (
            isinstance(e := refusal(three.address(p)), NotPrimary)
            and e.primary == three.address(q)
            and last_index(three.data(p)) == last_index(three.data(q))
        ),
        60,
    )
    said = three.log(p)
    assert "seeded from" not in said or "set aside" in said, said[-3000:]


def test_a_primary_paused_past_its_lease_answers_no_ok_and_rejoins_as_a_standby(
    three: Boards,
) -> None:
    """Given three boards and a client posting to the primary, when I stop
    the primary (SIGSTOP) longer than its lease and another is elected,
    then resume it, I expect every answer it gives after the resume to be
    an error (NoLease, NotPrimary, or none at all), never OK; and the old
    primary to come back as a standby that sends clients to the new one
    and holds its log."""
    p = three.primary()
    old = three.address(p)
    with Client(old) as c:
        c.create_queue("q")
    wait_until("both standbys in sync", lambda: len(three.in_sync()) == 2, 60)
    poster = Poster(old, "q", "paused")
    wait_until("posts answered", lambda: len(poster.answered) >= 10, 60)
    paused = time.monotonic()
    three.pause(p)
    try:
        q = three.primary(among=[n for n in three.names if n != p])
    finally:
        resumed = time.monotonic()
        three.resume(p)
    wait_until("the old primary answers again", lambda: refusal(old) is not None, 60)
    wait_until(
        "the old primary sends clients to the new one",
        lambda: isinstance(e := refusal(old), NotPrimary) and e.primary == three.address(q),
        60,
    )
    poster.stopping.set()
    poster.join(60)
    late = [a for a in poster.answers if a[0] > resumed]
    assert late, "no answer after the resume"
    # An OK that leaves the socket after SIGCONT was decided before the
    # pause (tests/workload.py's ``late(frozen=True)``): none may come for
    # a post sent after the pause, and each that comes is on the new
    # primary (it was on the standby the gate waited for).
    oks = oks_after(late, resumed)
    assert [a for a in oks if a[3] > paused] == [], oks
    assert {a[2] for a in late if not a[1]} <= {
        "NoLease",
        "NotPrimary",
        "Unavailable",
        "DeadlineExceeded",
    }
    with Client(three.address(q)) as c:
        c.post("q", body=b"on the new primary")
        held = {m.body for _, m in browsed(c, "q")}
    assert {a[4] for a in oks} <= held, "an OK after the resume that the new primary lacks"
    wait_until(
        "the old primary caught up as a standby",
        lambda: last_index(three.data(p)) == last_index(three.data(q)),
        60,
    )


def test_a_deposed_primary_whose_log_is_a_prefix_follows_on_with_its_data(
    steady: Boards,
) -> None:
    """Given three boards (leases of 10 s: no failover but the one the
    test makes) and a few posts, all on both standbys, when I
    stop the primary (SIGSTOP) with nothing in flight until another is
    elected, then resume it, I expect it to follow the new primary from
    where its log ends, keeping its data (no copy set aside, no seed from
    scratch: its log is a prefix of the new primary's), and to hold what
    the new primary writes after."""
    p = steady.primary()
    with Client(steady.address(p)) as c:
        c.create_queue("q")
        for i in range(5):
            c.post("q", body=f"m{i}".encode())
    wait_until("both standbys in sync", lambda: len(steady.in_sync()) == 2, 60)
    # Nothing in flight: the primary's log (its $sys events too) quiet for
    # 3 s and whole on both standbys.
    seen: list[tuple[int, float]] = [(-1, 0.0)]

    def quiet() -> bool:
        last = last_index(steady.data(p))
        if last != seen[0][0]:
            seen[0] = (last, time.monotonic())
        whole = all(last_index(steady.data(n)) == last for n in steady.names)
        return whole and time.monotonic() - seen[0][1] > 3

    wait_until("the log quiet and on both standbys", quiet, 90)
    at = seen[0][0]
    steady.pause(p)
    try:
        q = steady.primary(among=[n for n in steady.names if n != p])
    finally:
        steady.resume(p)
    with Client(steady.address(q)) as c:
        c.post("q", body=b"on the new primary")
    wait_until(
        "the old primary caught up as a standby",
        lambda: last_index(steady.data(p)) == last_index(steady.data(q)) > at,
        60,
    )
    data = steady.data(p)
    assert [f.name for f in data.iterdir() if f.name.startswith("data.mdb.")] == []
    said = steady.log(p)
    assert f"following {steady.advertised(q)} from log index {at + 1}" in said, said[-3000:]
    assert "seeded from" not in said, said[-3000:]


def test_a_standby_out_of_the_in_sync_set_is_never_promoted(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    """Given three boards with a short sync wait, when one standby is
    paused until the primary drops it from the in-sync set, and the
    primary is then killed (-9) and the paused standby resumed, I expect
    the standby still in the set to be promoted, and the dropped one
    never to lead."""
    with boards(
        tmp_path, etcd.endpoints, cluster_name(), "--lease-ttl", TTL, "--sync-timeout-ms", "1500"
    ) as b:
        p = b.primary()
        with Client(b.address(p)) as c:
            c.create_queue("q")
        wait_until("both standbys in sync", lambda: len(b.in_sync()) == 2, 60)
        lagging, keeping = [n for n in b.names if n != p]
        b.pause(lagging)
        poster = Poster(b.address(p), "q", "x")
        try:
            wait_until("the paused standby dropped", lambda: b.in_sync() == [keeping], 60)
            wait_until("posts answered without it", lambda: len(poster.answered) >= 5, 60)
            b.kill(p)
        finally:
            b.resume(lagging)
        poster.stopping.set()
        poster.join(60)
        assert b.primary(among=[lagging, keeping]) == keeping
        assert f"leadership {lagging}: elected" not in b.log(lagging)
        with Client(b.address(keeping)) as c:
            assert violations(waiting(c, ["q"]), dict.fromkeys(poster.answered, "q"), set()) == []


def test_a_board_of_a_cluster_needs_its_settings(tmp_path: Path) -> None:
    from msgboard.config import ServeConfig
    from msgboard.errors import ConfigError

    with pytest.raises(ConfigError, match="replication_token"):
        ServeConfig(cluster="c", etcd="127.0.0.1:1")
    with pytest.raises(ConfigError, match="etcd"):
        ServeConfig(cluster="c", replication_token="t")
    with pytest.raises(ConfigError, match="need cluster"):
        ServeConfig(etcd="127.0.0.1:1")
    assert isinstance(NoLease(3), Unavailable)


#: Answers that refuse a call before it runs: the client may send it again.
REFUSED = ("knows of no primary", "failed to connect", "Connection refused")


class Mover(threading.Thread):
    """Posts fresh bodies to ``queue``, one at a time, following NotPrimary
    to the address it names and sending the same body again after a
    refusal (a call that never ran); any other error is a failed write."""

    def __init__(self, address: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.address, self.queue = address, queue
        self.answered: list[bytes] = []
        self.failed: list[str] = []
        self.moves = 0
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        for i in itertools.count():
            if self.stopping.is_set():
                return
            body = f"{self.queue}-{i}".encode()
            while not self.stopping.is_set():
                try:
                    with Client(self.address, timeout=30) as c:
                        c.post(self.queue, body=body)
                    self.answered.append(body)
                    break
                except NotPrimary as e:
                    if e.primary:  # else it knows of none: asked again
                        self.address = e.primary
                        self.moves += 1
                except MsgboardError as e:
                    if not any(r in str(e) for r in REFUSED):
                        self.failed.append(f"{body!r} at {self.address}: {type(e).__name__}: {e}")
                        break
                time.sleep(0.02)


def test_a_switchover_under_load_fails_no_write(steady: Boards) -> None:
    """Given three boards and two clients posting to the primary, when I
    run ``msgboard cluster switchover --to`` a standby, I expect that
    standby to lead, the clients to move to it (NotPrimary) with no write
    failed, every answered post there exactly once, and the old primary to
    follow the new one without seeding again."""
    import subprocess
    import sys

    p = steady.primary()
    with Client(steady.address(p)) as c:
        for q in ("a", "b"):
            c.create_queue(q)
    wait_until("both standbys in sync", lambda: len(steady.in_sync()) == 2, 60)
    to = sorted(n for n in steady.names if n != p)[-1]  # not the tie's winner
    movers = [Mover(steady.address(p), q) for q in ("a", "b")]
    wait_until("posts answered", lambda: all(len(m.answered) >= 10 for m in movers), 60)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "msgboard", "cluster", "switchover", "--to", to),
            *("--cluster", steady.cluster, "--etcd", steady.etcd, "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["primary"] == to
    before = [len(m.answered) for m in movers]
    wait_until(
        "posts answered by the new primary",
        lambda: all(len(m.answered) >= n + 10 for m, n in zip(movers, before, strict=True)),
        60,
    )
    for m in movers:
        m.stopping.set()
        m.join(60)
    failed = [f for m in movers for f in m.failed]
    assert failed == [], "\n".join(
        [*failed, *(f"{n}:\n{steady.log(n)[-4000:]}" for n in steady.names)]
    )
    assert all(m.moves >= 1 and m.address == steady.address(to) for m in movers)
    answered = {b: m.queue for m in movers for b in m.answered}
    with Client(steady.address(to)) as c:
        assert violations(waiting(c, ["a", "b"]), answered, set()) == []
    wait_until(
        "the old primary follows the new one",
        lambda: (
            isinstance(e := refusal(steady.address(p)), NotPrimary)
            and e.primary == steady.address(to)
        ),
        60,
    )
    assert "set aside" not in steady.log(p)


def test_a_switchover_to_a_board_out_of_the_set_is_refused(three: Boards) -> None:
    import subprocess
    import sys

    p = three.primary()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "msgboard", "cluster", "switchover", "--to", p),
            *("--cluster", three.cluster, "--etcd", three.etcd),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "leads cluster" in done.stderr, done.stderr


def test_a_primary_cut_off_from_etcd_fences_itself_before_another_is_elected(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    """Given three boards that reach etcd and each other through proxies,
    and a client posting to the primary, when I cut the primary off from
    etcd (a black hole: nothing crosses, nothing is refused), I expect it
    to refuse every call, reads included, by the time another board is
    elected, and no OK after; when I heal the cut, I expect it back as a
    standby that sends clients to the new primary."""
    with boards(tmp_path, etcd.endpoints, cluster_name(), *PATIENT, proxied=True) as b:
        p = b.primary()
        with Client(b.address(p)) as c:
            c.create_queue("q")
        wait_until("both standbys in sync", lambda: len(b.in_sync()) == 2, 60)
        poster = Poster(b.address(p), "q", "cut")
        wait_until("posts answered", lambda: len(poster.answered) >= 5, 60)
        b.cut_from_etcd(p)
        q = b.primary(among=[n for n in b.names if n != p])
        elected = time.monotonic()
        # Fenced, then a standby that knows of no primary: it cannot tell.
        with Client(b.address(p), timeout=10) as c, pytest.raises(Unavailable):
            c.browse("q")
        time.sleep(1)
        poster.stopping.set()
        poster.join(60)
        assert oks_after(poster.answers, elected) == []
        b.heal_etcd(p)
        wait_until(
            "the old primary sends clients to the new one",
            lambda: (
                isinstance(e := refusal(b.address(p)), NotPrimary) and e.primary == b.advertised(q)
            ),
            60,
        )
        with Client(b.address(q)) as c:
            assert violations(waiting(c, ["q"]), dict.fromkeys(poster.answered, "q"), set()) == []


def test_a_lone_board_of_a_cluster_leads_again_after_a_restart(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    """Given a cluster of one board (its in-sync set stays empty: no
    standby ever joins) with a queue and a message, when I kill it (-9)
    and start it again, I expect it to lead again, with its data: the
    primary that wrote the set may always lead again."""
    b = Boards(tmp_path, etcd.endpoints, cluster_name(), "--lease-ttl", TTL, "--allow-async",
               "--sync-timeout-ms", "200", size=1)  # fmt: skip
    try:
        b.start()
        p = b.primary()
        with Client(b.address(p)) as c:
            c.create_queue("q")
            c.post("q", body=b"kept")
        b.kill(p)
        b.start(p)
        assert b.primary() == p
        with Client(b.address(p)) as c:
            assert [m.body for m in c.browse("q").messages] == [b"kept"]
    finally:
        b.stop()
