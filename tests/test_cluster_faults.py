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


def late(h: History, client: str, after: float) -> list[Op]:
    """``client``'s calls answered OK after ``after``."""
    return [o for o in h.ops() if o.client.startswith(client) and o.outcome == OK and o.done_at > after]


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
