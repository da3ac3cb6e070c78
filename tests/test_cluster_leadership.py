"""Leadership through a real three-member etcd (tests/cluster.py): one
leader at a time, a dead, paused or cut-off leader replaced by a higher
epoch only after it has fenced itself, no leader at all while etcd has lost
its quorum, switchover, and the in-sync set that only the current primary
can write.

Each fault test runs three campaigners (tests/campaigner.py) as child
processes and holds everything they printed to the checker,
``violations``, which the first tests show every violation it must catch.
TTLs are 3 s; every wait is on a condition with a deadline of tens of
seconds, so a busy machine slows the tests down but does not fail them.
"""

from __future__ import annotations

import itertools
import time
from contextlib import AbstractContextManager, ExitStack

import pytest

from msgboard.cluster import (
    Change,
    Etcd,
    Keys,
    Leadership,
    PrimaryWatch,
    Term,
    clock,
    write_sync,
)
from msgboard.cluster.etcd import encode
from tests.cluster import (
    Campaigner,
    EtcdCluster,
    History,
    Record,
    campaigners,
    etcd_cluster,
    violations,
)
from tests.proxy import Proxy

etcd = pytest.fixture(scope="module")(etcd_cluster)

TTL = 3
names = (f"c{i}" for i in itertools.count())


@pytest.fixture
def history() -> History:
    return History()


def three(
    etcd: EtcdCluster, history: History, cluster: str
) -> AbstractContextManager[list[Campaigner]]:
    """Campaigners a, b and c for ``cluster``, stopped at the end."""
    return campaigners(history, etcd.endpoints, cluster, ["a", "b", "c"], "--ttl", str(TTL))


def leader_of(history: History, epoch_above: int = 0, timeout: float = 30.0) -> Record:
    return history.wait(
        f"a leader with an epoch above {epoch_above}",
        lambda r: r.kind == "elected" and r.epoch > epoch_above,
        timeout,
    )


# -- the checker, shown each violation ---------------------------------------


def test_the_checker_passes_a_clean_history_of_two_terms() -> None:
    """Given a elected (epoch 5) and renewed, fenced at 13, then b elected
    (epoch 9) at 14, with claims inside their terms, I expect no violation."""
    clean = [
        Record("a", "elected", 10.0, 5, 12.0),
        Record("a", "claim", 10.5, 5, 12.0),
        Record("a", "renewed", 11.0, 5, 13.0),
        Record("a", "claim", 12.9, 5, 13.0),
        Record("a", "fenced", 13.0, 5, 13.0),
        Record("b", "elected", 14.0, 9, 16.0),
        Record("b", "claim", 14.1, 9, 16.0),
        Record("b", "resigned", 14.5, 9, 16.0),
        Record("c", "elected", 14.6, 11, 17.0),
    ]
    assert violations(clean) == []


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        (  # a paused leader that did not fence itself
            [Record("a", "elected", 10.0, 5, 12.0), Record("a", "claim", 12.5, 5, 12.0)],
            "a claimed epoch 5 at 12.500, past 12.000",
        ),
        (  # a deadline never announced before the claim
            [Record("a", "elected", 10.0, 5, 12.0), Record("a", "claim", 11.0, 5, 14.0)],
            "a claimed epoch 5 until 14.000, never announced",
        ),
        (  # a claim by a board that was never elected
            [Record("a", "elected", 10.0, 5, 12.0), Record("b", "claim", 11.0, 5, 12.0)],
            "b claimed epoch 5 at 11.000 before its election",
        ),
        (  # one epoch, two leaders
            [Record("a", "elected", 10.0, 5, 12.0), Record("b", "elected", 10.1, 5, 12.1)],
            "epoch 5 elected twice: a and b",
        ),
        (  # the old term still running when the next is elected
            [Record("a", "elected", 10.0, 5, 12.0), Record("b", "elected", 11.0, 9, 14.0)],
            "epoch 5 (a) lasted until 12.000, past epoch 9's election (b, 11.000)",
        ),
        (  # a claim of the old epoch after the new one's election
            [
                Record("a", "elected", 10.0, 5, 20.0),
                Record("a", "resigned", 10.5, 5, 20.0),
                Record("b", "elected", 11.0, 9, 14.0),
                Record("a", "claim", 11.5, 5, 20.0),
            ],
            "a claimed epoch 5 at 11.500, after epoch 9 was elected (b, 11.000)",
        ),
        (  # a claim after resigning
            [
                Record("a", "elected", 10.0, 5, 20.0),
                Record("a", "resigned", 10.5, 5, 20.0),
                Record("a", "claim", 10.6, 5, 20.0),
            ],
            "a claimed epoch 5 at 10.600, after resigning it",
        ),
        (  # epochs going down
            [
                Record("a", "elected", 10.0, 9, 12.0),
                Record("a", "fenced", 12.0, 9, 12.0),
                Record("b", "elected", 13.0, 5, 15.0),
            ],
            "epoch went from 9 (a) down to 5 (b)",
        ),
    ],
)
def test_the_checker_catches_each_violation(records: list[Record], expected: str) -> None:
    assert expected in violations(records)


# -- real etcd, real processes -------------------------------------------------


def test_three_campaigners_elect_one_leader_that_the_watch_names(
    etcd: EtcdCluster, history: History
) -> None:
    """Given three campaigners, I expect one elected, a watch naming it with
    its epoch and address, and (over a few renewals) no second leader."""
    cluster = next(names)
    with three(etcd, history, cluster):
        first = leader_of(history)
        watch = PrimaryWatch(etcd.endpoints, cluster, every=0.5).start()
        try:
            seen = watch.wait(lambda p: p is not None, 30)
        finally:
            watch.stop()
        assert seen is not None
        expected = (first.board, first.epoch, f"{first.board}.test:7")
        assert (seen.name, seen.epoch, seen.address) == expected
        history.wait(
            "three renewals", lambda r: r.kind == "renewed" and r.until > first.until + 2, 30
        )
    assert violations(history.records) == []
    assert history.find(lambda r: r.kind == "claim"), "the leader never claimed its term"


def test_a_killed_leader_is_replaced_by_a_higher_epoch_after_its_term(
    etcd: EtcdCluster, history: History
) -> None:
    """Given three campaigners, when I kill -9 the leader, I expect another
    elected with a higher epoch, after the dead one's last deadline."""
    with three(etcd, history, next(names)) as children:
        first = leader_of(history)
        history.wait("a claim", lambda r: r.kind == "claim" and r.board == first.board)
        killed = clock()
        next(c for c in children if c.name == first.board).kill()
        second = leader_of(history, first.epoch, timeout=TTL + 30)
        assert second.board != first.board
        assert second.at > killed
    # Held to its deadline, as a board that lives on would be: the next
    # leader waited out the dead one's term (it did not resign).
    assert "waited out" in second.reason
    assert violations(history.records) == [], etcd.lines("lease")


def test_a_leader_key_etcd_loses_early_is_waited_out(etcd: EtcdCluster, history: History) -> None:
    """Given three campaigners, when the leader key vanishes long before its
    lease runs out (as etcd 3.4 before 3.4.28 may do: an etcd leader stuck
    on its disk revokes a lease another member renewed), I expect the next
    leader elected only after the old term's deadline, the old leader
    fenced, and no two leaders at once."""
    cluster = next(names)
    with three(etcd, history, cluster):
        first = leader_of(history)
        renewed = history.wait(
            "a renewal",
            lambda r: r.kind == "renewed" and r.epoch == first.epoch and r.until > first.until,
        )
        client = Etcd(etcd.endpoints)
        try:
            client.txn([], [{"request_delete_range": {"key": encode(Keys(cluster).leader)}}])
        finally:
            client.close()
        second = leader_of(history, first.epoch, timeout=TTL + 30)
        assert second.at >= renewed.until, "elected inside the lost key's term"
        assert "waited out" in second.reason
        history.wait(
            "the old leader fences itself",
            lambda r: r.kind == "fenced" and r.epoch == first.epoch,
            timeout=TTL + 30,
        )
    assert violations(history.records) == []


def test_a_paused_leader_fences_itself_before_the_next_is_elected(
    etcd: EtcdCluster, history: History
) -> None:
    """Given three campaigners, when I SIGSTOP the leader for longer than its
    TTL, I expect another elected meanwhile, and on SIGCONT the old one to
    make no claim of its term, fence itself, and campaign like the rest."""
    with three(etcd, history, next(names)) as children:
        first = leader_of(history)
        paused = next(c for c in children if c.name == first.board)
        paused.pause()
        try:
            second = leader_of(history, first.epoch, timeout=TTL + 30)
        finally:
            paused.resume()
        resumed = clock()
        fenced = history.wait(
            "the paused leader fences itself",
            lambda r: r.kind == "fenced" and r.board == first.board and r.epoch == first.epoch,
        )
        # It noticed on resuming, and its term had ended before the election.
        assert fenced.until < second.at
        history.wait(
            "the new leader renews past the resumption",
            lambda r: r.board == second.board and r.kind == "renewed" and r.at > resumed,
        )
    assert violations(history.records) == []


def test_without_an_etcd_quorum_the_leader_fences_and_none_follows(
    etcd: EtcdCluster, history: History
) -> None:
    """Given three campaigners, when I kill two of the three etcd members, I
    expect the leader fenced within its TTL and no one elected while the
    quorum is gone; when they come back, a leader with a higher epoch."""
    with three(etcd, history, next(names)):
        first = leader_of(history)
        lost = clock()
        etcd.kill(1, 2)
        try:
            fenced = history.wait(
                "the leader fences itself",
                lambda r: r.kind == "fenced" and r.epoch >= first.epoch,
                timeout=TTL + 30,
            )
            assert fenced.until <= lost + TTL, "it acted as the leader past its lease"
            # No leader without a quorum: watch for a while past the TTL.
            time.sleep(2 * TTL)
            during = [r for r in history.elected() if r.at > lost]
            assert during == [], f"elected without an etcd quorum: {during}"
        finally:
            etcd.restart(1, 2)
        etcd.wait_quorum()
        leader_of(history, fenced.epoch, timeout=TTL + 60)
    assert violations(history.records) == [], etcd.lines("lease")


def test_a_leader_cut_off_from_etcd_fences_before_another_is_elected(
    etcd: EtcdCluster, history: History
) -> None:
    """Given a leader that reaches etcd only through proxies, and two
    campaigners that reach it directly, when I cut the proxies (a black
    hole: the leader's requests go unanswered) I expect the others to elect
    a higher epoch only after the leader's term ended, the leader fenced
    within its TTL of the cut, and, healed, the leader following again."""
    proxies = [Proxy(m.client_url.removeprefix("http://")) for m in etcd.members]
    cluster = next(names)
    behind = ",".join(p.address for p in proxies)
    with ExitStack() as stack:
        for p in proxies:
            stack.callback(p.close)
        a = Campaigner(history, behind, cluster, "a", "--ttl", str(TTL))
        stack.callback(a.stop)
        first = leader_of(history)
        assert first.board == "a"
        for name in ("b", "c"):
            other = Campaigner(history, etcd.endpoints, cluster, name, "--ttl", str(TTL))
            stack.callback(other.stop)
            history.wait(f"{name} started", lambda r, n=name: r.kind == "started" and r.board == n)
        cut = clock()
        for p in proxies:
            p.cut()
        second = leader_of(history, first.epoch, timeout=TTL + 30)
        assert second.board in ("b", "c")
        fenced = history.wait(
            "the cut-off leader fences itself",
            lambda r: r.kind == "fenced" and r.board == "a" and r.epoch == first.epoch,
            timeout=TTL + 30,
        )
        assert fenced.until <= cut + TTL
        for p in proxies:
            p.heal()
        healed = clock()
        history.wait(
            "the new leader renews after the heal",
            lambda r: r.board == second.board and r.kind == "renewed" and r.at > healed + TTL,
        )
        assert [r.board for r in history.elected()] == ["a", second.board]
    assert violations(history.records) == []


def test_a_resigned_leader_hands_over_at_once(etcd: EtcdCluster) -> None:
    """Given two in-process leaderships, when the leader resigns (holding
    off), I expect it not leading from that call on and the other elected
    with a higher epoch well within one TTL."""
    cluster = next(names)
    told: list[Change] = []
    a = Leadership(etcd.endpoints, cluster, "a", "a:1", ttl=TTL, listener=told.append).start()
    b = Leadership(etcd.endpoints, cluster, "b", "b:1", ttl=TTL, listener=told.append).start()
    try:
        first = _one_of(a, b)
        leader, other = (a, b) if a.leader() else (b, a)
        assert leader.resign(hold=30)
        assert leader.term() is None
        second = other.wait(30)
        assert second is not None and second.epoch > first.epoch
        assert not leader.leader()
        # It did not wait out a term that had resigned.
        elected = next(c for c in told if c.kind == "elected" and c.epoch == second.epoch)
        assert elected.reason == ""
    finally:
        a.stop()
        b.stop()


def test_only_the_current_primary_writes_the_in_sync_set(etcd: EtcdCluster) -> None:
    """Given a leader, I expect its write of the in-sync set stored, a write
    expecting a stale set refused, and, once it has resigned and another
    leads, its writes refused both by itself and by etcd (a deposed
    primary's late compare-and-swap on its old epoch)."""
    cluster = next(names)
    a = Leadership(etcd.endpoints, cluster, "a", "a:1", ttl=TTL).start()
    try:
        term = a.wait(30)
        assert term is not None
        stored = a.write_sync(["b", "c"], None)
        assert stored is not None and (stored.epoch, stored.standbys) == (term.epoch, ("b", "c"))
        assert a.write_sync(["b"], None) is None, "a stale expected set was overwritten"
        assert a.read_sync() == stored
        a.resign(hold=60)
        b = Leadership(etcd.endpoints, cluster, "b", "b:1", ttl=TTL).start()
        try:
            assert b.wait(30) is not None
            assert a.write_sync(["c"], stored) is None
            etcd_client = Etcd(etcd.endpoints)
            try:
                late = write_sync(etcd_client, Keys(cluster), term.epoch, ["c"], stored)
            finally:
                etcd_client.close()
            assert late is None, "a deposed epoch rewrote the in-sync set"
            assert b.write_sync(["c"], stored) is not None
        finally:
            b.stop()
    finally:
        a.stop()


def test_only_a_board_in_the_in_sync_set_is_elected(etcd: EtcdCluster) -> None:
    """Given an in-sync set naming only b, when the leader resigns, I expect
    b elected and c (not in the set) never, however long it campaigns."""
    cluster = next(names)
    history = History()
    a = Leadership(etcd.endpoints, cluster, "a", "a:1", ttl=TTL).start()
    try:
        assert a.wait(30) is not None
        assert a.write_sync(["b"], None) is not None
        with campaigners(
            history, etcd.endpoints, cluster, ["c", "b"], "--ttl", str(TTL), "--eligible"
        ):
            history.wait("both started", lambda r: r.kind == "started" and r.board == "b")
            history.wait("both started", lambda r: r.kind == "started" and r.board == "c")
            a.resign(hold=60)
            elected = leader_of(history)
            assert elected.board == "b"
    finally:
        a.stop()
    assert [r.board for r in history.elected()] == ["b"]
    assert violations(history.records) == []


def _one_of(*boards: Leadership) -> Term:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for b in boards:
            t = b.term()
            if t is not None:
                return t
        time.sleep(0.05)
    raise AssertionError("no leader within 30 s")
