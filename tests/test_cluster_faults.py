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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import EtcdCluster, etcd_cluster, wait_until
from tests.nodes import Nodes
from tests.workload import OK, History, Op, Workload, now, posted, prepare

etcd = pytest.fixture(scope="module")(etcd_cluster)

TTL = 3
#: A board's sync timeout, generous: a loaded machine must not fail writes.
ARGS = ("--lease-ttl", str(TTL), "--sync-timeout-ms", "20000")
#: Seconds for a frozen or cut-off board's last answers to reach a client.
SLACK = 1.0
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


def late(h: History, client: str, after: float, before: float = float("inf")) -> list[Op]:
    """``client``'s calls answered OK between ``after`` and ``before``."""
    return [
        o
        for o in h.ops()
        if o.client.startswith(client) and o.outcome == OK and after < o.done_at < before
    ]


def erred(h: History, client: str, after: float) -> None:
    """Waits until a call of ``client`` invoked after ``after`` failed."""

    def seen() -> bool:
        return any(
            o.client.startswith(client) and o.outcome != OK and o.invoked_at > after
            for o in h.ops()
        )

    wait_until(f"a call of {client} failed after {after:.1f}", seen, 90)


def test_the_primary_killed(nodes: Nodes) -> None:
    """Given a cluster under load, when I kill -9 the primary, I expect
    another board elected, the workload to go on there, the killed board
    back as a standby, and the checker to find nothing."""
    h = History()
    old, w = load(nodes, h, "w1")
    nodes.kill(old)
    w.stop()
    new, w = load(nodes, h, "w2")
    assert new != old
    nodes.start(old)
    answered_after(h, now())
    w.stop()
    assert nodes.finish(h) == []


def test_the_primary_paused_past_its_lease(nodes: Nodes) -> None:
    """Given a cluster under load, when I SIGSTOP the primary past its
    lease, I expect another board elected and the workload to go on there;
    when I SIGCONT the old one, I expect its clients to get errors and no
    answer OK from it after the pause (its lease ran out meanwhile), and it
    to come back as a standby holding the new primary's data."""
    h = History()
    old, w1 = load(nodes, h, "w1")
    paused = now()
    nodes.pause(old)
    new = nodes.primary(other_than=old)
    _, w2 = load(nodes, h, "w2")
    nodes.resume(old)
    resumed = now()
    erred(h, "w1", resumed)
    w1.stop()
    assert late(h, "w1", paused + SLACK) == []
    answered_after(h, now())
    w2.stop()
    assert nodes.primary() == new
    assert nodes.finish(h) == []


def test_the_primary_cut_off_from_its_standbys_and_etcd(nodes: Nodes) -> None:
    """Given a cluster under load, when I cut the primary off from the
    other boards and from etcd (its clients still reach it), I expect
    another board elected and no answer OK from the old one after its lease
    ran out; healed, I expect it back as a standby holding the new
    primary's data."""
    h = History()
    old, w1 = load(nodes, h, "w1")
    cut = now()
    nodes.cut(old)
    nodes.primary(other_than=old)
    _, w2 = load(nodes, h, "w2")
    erred(h, "w1", cut + TTL)
    nodes.heal(old)
    answered_after(h, now())
    w1.stop()
    w2.stop()
    assert late(h, "w1", cut + TTL + SLACK) == []
    assert nodes.finish(h) == []


def test_etcd_losing_its_quorum_stops_writes_until_it_is_back(
    nodes: Nodes, etcd: EtcdCluster
) -> None:
    """Given a cluster under load, when two of the three etcd members are
    killed (-9), I expect no board to lead (no second primary) and no call
    answered OK from a TTL after the loss until etcd is back; then a
    primary elected again, writes resumed, and the checker to find
    nothing."""
    h = History()
    _, w1 = load(nodes, h, "w1")
    lost = now()
    try:
        etcd.kill(1, 2)
        erred(h, "w1", lost + TTL)
        wait_until("no board leads", lambda: nodes.leader() is None, 30)
        back = now()
    finally:
        etcd.restart(1, 2)
        etcd.wait_quorum()
    w1.stop()
    assert late(h, "w1", lost + TTL + SLACK, back) == []
    _, w2 = load(nodes, h, "w2")
    answered_after(h, now())
    w2.stop()
    assert nodes.finish(h) == []
