"""The etcd client under the cluster (``msgboard.cluster.Etcd``) against a
real three-member etcd: what the gateway does with leases, transactions and
watches (the facts etcd.py's docstring states), failing over past members
that are down, and a primary's watch that outlives the member it watched.
"""

from __future__ import annotations

import itertools
import time

import pytest

from msgboard.cluster import (
    Etcd,
    EtcdUnavailable,
    Keys,
    Leadership,
    PrimaryWatch,
    endpoints,
)
from msgboard.cluster.etcd import encode
from tests.cluster import EtcdCluster, etcd_cluster, free_ports

etcd = pytest.fixture(scope="module")(etcd_cluster)
keys = (f"/msgboard-tests/k{i}" for i in itertools.count())


def test_endpoints_are_urls_and_a_bad_one_is_named() -> None:
    assert endpoints(" a:1, http://b:2 ,") == ("http://a:1", "http://b:2")
    with pytest.raises(ValueError, match="no etcd endpoint"):
        endpoints(" , ")
    with pytest.raises(ValueError, match="'http://nohost' is not scheme://host:port"):
        Etcd("nohost")


def test_names_of_clusters_and_boards_are_checked() -> None:
    with pytest.raises(ValueError, match="cluster 'a/b' is not a name"):
        Keys("a/b")
    with pytest.raises(ValueError, match="board 'a b' is not a name"):
        Leadership("127.0.0.1:1", "c", "a b", "x:1")
    with pytest.raises(ValueError, match="under etcd's minimum lease"):
        Leadership("127.0.0.1:1", "c", "a", "x:1", ttl=1)


def test_a_lease_is_granted_renewed_and_ends_with_its_key(etcd: EtcdCluster) -> None:
    """Given a lease asked for 1 s, I expect etcd's minimum granted instead
    (at least 2 s); renewed, it answers its TTL; a key under it goes when it
    is revoked, and a revoked lease renews to 0 and revokes again quietly."""
    client = Etcd(etcd.endpoints)
    try:
        grant = client.grant(1)
        assert grant.ttl >= 2
        assert client.keepalive(grant.id) == grant.ttl
        key = next(keys)
        created = client.txn(
            [{"key": encode(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            [
                {"request_put": {"key": encode(key), "value": encode("v"), "lease": grant.id}},
                {"request_range": {"key": encode(key)}},
            ],
        )
        entry = created.read(0)
        assert created.succeeded and entry is not None
        assert (entry.value, entry.lease) == (b"v", grant.id)
        assert entry.create_revision == entry.mod_revision == created.revision
        again = client.txn(
            [{"key": encode(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            [{"request_put": {"key": encode(key), "value": encode("w")}}],
        )
        assert not again.succeeded, "a second create of the key succeeded"
        client.revoke(grant.id)
        assert client.get(key)[0] is None
        assert client.keepalive(grant.id) == 0
        client.revoke(grant.id)
    finally:
        client.close()


def test_a_watch_waits_for_a_change_or_its_time(etcd: EtcdCluster) -> None:
    """Given a key at revision R, I expect a watch from R+1 to end False when
    nothing changes within its wait, and True at once from R (already seen)."""
    client = Etcd(etcd.endpoints)
    try:
        key = next(keys)
        client.txn([], [{"request_put": {"key": encode(key), "value": encode("1")}}])
        entry, revision = client.get(key)
        assert entry is not None
        started = time.monotonic()
        assert client.watch(key, revision + 1, 0.3) is False
        assert time.monotonic() - started >= 0.3
        assert client.watch(key, entry.mod_revision, 5.0) is True
    finally:
        client.close()


def test_calls_pass_members_that_are_down_and_say_when_all_are(etcd: EtcdCluster) -> None:
    """Given endpoints whose first two have nothing listening, I expect calls
    to reach the third and stay there; given only dead ones, EtcdUnavailable
    naming each."""
    dead = [f"http://127.0.0.1:{p}" for p in free_ports(2)]
    live = etcd.members[0].client_url
    client = Etcd([*dead, live], timeout=2.0)
    try:
        assert client.get(next(keys))[0] is None
        assert client.urls[client.at] == live
        client.get(next(keys))
        assert client.urls[client.at] == live
    finally:
        client.close()
    nobody = Etcd(dead, timeout=2.0)
    try:
        with pytest.raises(EtcdUnavailable) as caught:
            nobody.get(next(keys))
        assert all(url in str(caught.value) for url in dead)
    finally:
        nobody.close()


def test_the_primary_watch_outlives_the_member_it_watched(etcd: EtcdCluster) -> None:
    """Given a watch and two leaderships talking first to member 0, when I
    kill member 0 and the leader resigns, I expect the watch to name the new
    leader (through the members left)."""
    cluster = "watch-outlives"
    watch = PrimaryWatch(etcd.endpoints, cluster, every=0.5).start()
    a = Leadership(etcd.endpoints, cluster, "a", "a:1", ttl=3).start()
    try:
        first = a.wait(30)
        assert first is not None
        seen = watch.wait(lambda p: p is not None and p.epoch == first.epoch, 30)
        assert seen is not None and seen.name == "a"
        etcd.kill(0)
        try:
            b = Leadership(etcd.endpoints, cluster, "b", "b:1", ttl=3).start()
            try:
                assert a.resign(hold=60)
                second = b.wait(30)
                assert second is not None and second.epoch > first.epoch
                now = watch.wait(lambda p: p is not None and p.name == "b", 30)
                assert now is not None and now.epoch == second.epoch
            finally:
                b.stop()
        finally:
            etcd.restart(0)
            etcd.wait_quorum()
    finally:
        a.stop()
        watch.stop()
