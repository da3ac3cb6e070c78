"""A cluster primary's in-sync set (msgboard/cluster/insync.py), told with
a real etcd and a real ``Leadership``, the gate driven as the replication
service drives it (``connected``, ``ack``, ``gone``) and the writer's
``hold`` called by hand.

The stories: the set is written empty at election; a standby that caught
up is written into the set before its acks release anything; a member
that went away is dropped only once the others hold every index that may
have been answered; a group released after the term ended is answered
NoLease, never OK.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from msgboard.cluster import Keys, Leadership, read_sync
from msgboard.cluster.etcd import Etcd
from msgboard.cluster.insync import InSync
from msgboard.errors import MsgboardError, NoLease
from msgboard.lmdbstore import Log
from tests.cluster import EtcdCluster, etcd_cluster, wait_until

etcd = pytest.fixture(scope="module")(etcd_cluster)
_names = itertools.count()


class Released:
    """The releases the gate ran, in order: None (OK) or the error."""

    def __init__(self) -> None:
        self.got: list[MsgboardError | None] = []
        self.lock = threading.Lock()

    def release(self, err: MsgboardError | None) -> None:
        with self.lock:
            self.got.append(err)


@pytest.fixture
def gate(etcd: EtcdCluster) -> Iterator[tuple[InSync, Log, Callable[[], tuple[str, ...]]]]:
    cluster = f"insync{next(_names)}-{time.monotonic_ns() % 10**9}"
    leadership = Leadership(etcd.endpoints, cluster, "p", "127.0.0.1:1", ttl=2).start()
    assert leadership.wait(30) is not None
    oplog = Log()
    g = InSync(leadership, oplog, lambda fn: fn(), needed=1, timeout=1.0)
    client = Etcd(etcd.endpoints)

    def stored() -> tuple[str, ...]:
        s = read_sync(client, Keys(cluster))
        return () if s is None else s.standbys

    try:
        yield g, oplog, stored
    finally:
        g.close()
        leadership.stop()
        client.close()


def test_a_standby_joins_the_set_in_etcd_before_its_acks_count(
    gate: tuple[InSync, Log, Callable[[], tuple[str, ...]]],
) -> None:
    g, oplog, stored = gate
    wait_until("the set written empty at election", lambda: g.stored is not None, 30)
    assert stored() == ()
    oplog.last = 5
    released = Released()
    g.hold(released.release)  # index 5: nobody counted yet
    g.connected("a", 0)
    g.ack("a", 2)  # more than a batch on the wire behind (INFLIGHT)
    time.sleep(0.5)
    assert released.got == [] and stored() == ()  # behind: not in the set
    seen: list[tuple[str, ...]] = []
    g.hold(lambda err: seen.append(stored()))  # what etcd said as it was released
    g.ack("a", 5)
    wait_until("a released once a is in the set", lambda: released.got == [None], 30)
    wait_until("the second released", lambda: len(seen) == 1, 30)
    assert seen == [("a",)]


def test_a_member_gone_is_dropped_only_once_the_others_hold_what_was_answered(
    gate: tuple[InSync, Log, Callable[[], tuple[str, ...]]],
) -> None:
    g, oplog, stored = gate
    oplog.last = 10
    g.connected("a", 10)
    g.connected("b", 10)
    wait_until("both in the set", lambda: stored() == ("a", "b"), 30)
    oplog.last = 12
    released = Released()
    g.hold(released.release)  # index 12, answered on a's ack alone
    g.ack("a", 12)
    wait_until("answered on a's ack", lambda: released.got == [None], 30)
    assert g.covered == 12
    g.gone("a")
    time.sleep(2.5)  # past the timeout: a lags, but only a holds index 12
    assert stored() == ("a", "b")
    g.ack("b", 12)
    wait_until("a dropped once b holds 12", lambda: stored() == ("b",), 30)


def test_a_group_released_after_the_term_ended_is_answered_no_lease(
    gate: tuple[InSync, Log, Callable[[], tuple[str, ...]]],
) -> None:
    g, oplog, stored = gate
    oplog.last = 3
    g.connected("a", 3)
    wait_until("a in the set", lambda: stored() == ("a",), 30)
    oplog.last = 4
    released = Released()
    g.hold(released.release)
    assert g.pending == 1
    assert g.leadership.resign()
    g.ack("a", 4)
    wait_until("released", lambda: len(released.got) == 1, 30)
    assert isinstance(released.got[0], NoLease) and g.pending == 0
