"""Faults under load in a cluster with leadership through etcd: three
``msgboard serve --cluster`` boards (tests/nodes.py's ``Nodes``) on three
real etcd members (tests/cluster.py's ``EtcdCluster``), the workload of
tests/workload.py against the primary, a fault, the workload again against
whoever leads after it, and the checker of tests/jepsen.py (shown each
violation in tests/test_jepsen.py) at the end: every post answered OK on
the final primary exactly once, nothing acked delivered again, first
deliveries in posting order, every standby equal to the primary and clean.

The stories: the primary killed (-9); the primary paused (SIGSTOP) past
its lease, then resumed (no answer OK from it after its lease ran out);
the primary cut off from its standbys and from etcd while its clients
still reach it (the same); etcd losing its quorum (no write answered OK
from a TTL after the loss until it is back; no second primary); each
followed by the workload on the primary elected after it.

The workload's clients are given one address (the Python client's list of
addresses is not merged here): the test points a new workload at the new
primary, as a client that follows NotPrimary would.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.errors import MsgboardError, NotPrimary
from tests.cluster import EtcdCluster, etcd_cluster, wait_until
from tests.nodes import Nodes
from tests.workload import OK, History, Op, Workload, erred, late, now, posted, prepare

etcd = pytest.fixture(scope="module")(etcd_cluster)

TTL = 3
#: A board's sync timeout, generous: a loaded machine must not fail writes.
ARGS = ("--lease-ttl", str(TTL), "--sync-timeout-ms", "20000")
#: Seconds for a frozen or cut-off board's last answers to reach a client.
SLACK = 1.0
#: Seconds a following client keeps looking for the primary.
FAILOVER = 60.0
#: The etcd quorum test's: its calls must fail (writes stop) within the test's time.
QUORUM_FAILOVER = 20.0
_names = itertools.count()


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdCluster) -> Iterator[Nodes]:
    n = Nodes(tmp_path, etcd, f"faults{next(_names)}", *ARGS)
    try:
        yield n.start()
    finally:
        n.close()


def answered_after(h: History, t: float, n: int = 20) -> None:
    wait_until(f"{n} posts answered after {t:.1f}", lambda: len(posted(h.ops(), after=t)) >= n, 90)


def load(nodes: Nodes, h: History, name: str) -> tuple[str, Workload]:
    """The workload against the primary (waited for), with posts answered."""
    primary = nodes.primary()
    prepare(nodes.listen[primary])
    w = Workload(h, nodes.listen[primary], name=name).start()
    answered_after(h, now())
    return primary, w


def following(nodes: Nodes, h: History, name: str = "f", failover: float = FAILOVER) -> Workload:
    """The workload through clients given every board's address, which
    follow the primary by themselves (NotPrimary, NoLease, no connection),
    with posts answered meanwhile."""
    prepare(nodes.addresses)
    w = Workload(h, nodes.addresses, name=name, failover=failover).start()
    answered_after(h, now())
    return w


def names(address: str) -> str | None:
    """The primary the board at ``address`` sends a client to (None: it
    answered, or refused otherwise)."""
    try:
        with Client(address, timeout=5) as c:
            c.list_queues()
    except NotPrimary as e:
        return e.primary
    except MsgboardError:
        return None
    return None


def posts_of(h: History, client: str, after: float) -> list[Op]:
    return [o for o in posted(h.ops(), after=after) if o.client.startswith(client)]


def test_the_primary_killed(nodes: Nodes) -> None:
    """Given a cluster under load from clients that follow the primary,
    when I kill -9 the primary, I expect another board elected, the
    clients to go on there by themselves, the killed board back as a
    standby, and the checker to find nothing."""
    h = History()
    old = nodes.primary()
    w = following(nodes, h)
    nodes.kill(old)
    killed = now()
    assert nodes.primary(other_than=old) != old
    wait_until(
        "the clients write on the new primary", lambda: len(posts_of(h, "f", killed)) >= 20, 90
    )
    nodes.start(old)
    answered_after(h, now())
    w.stop()
    assert nodes.finish(h) == []


def test_the_primary_paused_past_its_lease(nodes: Nodes) -> None:
    """Given a cluster under load, some clients bound to the primary and
    some following it, when I SIGSTOP the primary past its lease, I expect
    another board elected and the following clients to go on there; when I
    SIGCONT the old one, I expect the bound clients to get errors and no
    answer OK from it after the pause (its lease ran out meanwhile), and it
    to come back as a standby holding the new primary's data."""
    h = History()
    old, bound = load(nodes, h, "bound")
    w = following(nodes, h)
    paused = now()
    nodes.pause(old)
    new = nodes.primary(other_than=old)
    answered_after(h, now())
    nodes.resume(old)
    resumed = now()
    erred(h, "bound", resumed)
    bound.stop()
    assert late(h, "bound", paused + SLACK, frozen=True) == []
    answered_after(h, now())
    w.stop()
    assert nodes.primary() == new
    assert nodes.finish(h) == []


def test_the_primary_cut_off_from_its_standbys_and_etcd(nodes: Nodes) -> None:
    """Given a cluster under load, some clients bound to the primary and
    some following it, when I cut the primary off from the other boards
    and from etcd (its clients still reach it), I expect another board
    elected, the following clients to go on there, and no answer OK from
    the old one after its lease ran out; healed, I expect it back as a
    standby holding the new primary's data."""
    h = History()
    old, bound = load(nodes, h, "bound")
    w = following(nodes, h)
    cut = now()
    nodes.cut(old)
    new = nodes.primary(other_than=old)
    answered_after(h, now())
    erred(h, "bound", cut + TTL)
    nodes.heal(old)
    # Its etcd client recovers: it learns who leads and sends clients there.
    wait_until(
        "the healed board names the new primary",
        lambda: names(nodes.listen[old]) == nodes.front[new].address,
        60,
    )
    answered_after(h, now())
    bound.stop()
    w.stop()
    assert late(h, "bound", cut + TTL + SLACK) == []
    assert nodes.finish(h) == []


def test_etcd_losing_its_quorum_stops_writes_until_it_is_back(
    nodes: Nodes, etcd: EtcdCluster
) -> None:
    """Given a cluster under load from clients that follow the primary,
    when two of the three etcd members are killed (-9), I expect no board
    to lead (no second primary) and no call answered OK by any board from
    a TTL after the loss until etcd is back; then a primary elected again,
    writes resumed, and the checker to find nothing."""
    h = History()
    nodes.primary()
    # A call follows the primary for its failover deadline before it fails:
    # the first one invoked after the TTL fails within two of them.
    w = following(nodes, h, failover=QUORUM_FAILOVER)
    lost = now()
    try:
        etcd.kill(1, 2)
        erred(h, "f", lost + TTL, seconds=2 * QUORUM_FAILOVER + 20)
        wait_until("no board leads", lambda: nodes.leader() is None, 30)
        back = now()
    finally:
        etcd.restart(1, 2)
        etcd.wait_quorum()
    assert late(h, "f", lost + TTL + SLACK, back) == []
    nodes.primary()
    answered_after(h, now())
    w.stop()
    assert nodes.finish(h) == []


def test_a_switchover_under_load_fails_no_write(nodes: Nodes) -> None:
    """Given a cluster under load from clients that follow the primary,
    when I switch the primary over (``msgboard cluster switchover``), I
    expect another board to lead, no post to fail (unary or streamed), and
    the checker to find nothing."""
    h = History()
    old = nodes.primary()
    w = following(nodes, h)
    started = now()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "msgboard", "cluster", "switchover"),
            *("--cluster", nodes.cluster, "--etcd", nodes.etcd_cluster.endpoints),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    new = nodes.primary(other_than=old)
    wait_until(
        "the clients write on the new primary", lambda: len(posts_of(h, "f", now() - 0.5)) >= 1, 90
    )
    answered_after(h, now())
    w.stop()
    failed = [o for o in h.ops() if o.kind == "post" and o.outcome != OK and o.invoked_at > started]
    assert failed == [], f"switchover to {new}: {failed[:5]}"
    assert nodes.finish(h) == []
