"""A board whose disk was lost, started again under its old name (issue 33's
hole, closed): the in-sync set records the directory (``board-id``) each
member joined with, the promotion rule counts a member only on that
directory, and a member back on a new one joins again only holding what
was answered. The rule alone, then real boards of a cluster on etcd.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.cluster.etcd import Entry, Etcd
from msgboard.cluster.keys import Position, SyncSet
from msgboard.cluster.members import promotable
from tests.cluster import Boards, EtcdCluster, etcd_cluster, wait_until
from tests.test_cluster_node import PATIENT, TTL, at, cluster_name, three
from tests.test_replication import last_index

etcd = pytest.fixture(scope="module")(etcd_cluster)
__all__ = ["etcd", "three"]


def joined_with(boards: Boards, name: str) -> str:
    """The directory the stored in-sync set records for ``name`` ("": none)."""
    s = boards.sync_set()
    return "" if s is None else s.id_of(name)


def test_a_member_counts_only_on_the_directory_it_joined_with() -> None:
    """A board whose disk was lost and that starts again empty under its
    old name is not the member the set names (issue 33's open hole): given
    a set recording each member's directory, I expect that board neither
    promoted nor counted, the member on its own directory promoted when
    enough others have stopped, and a set that recorded no directory (one
    written before) judged by name as before."""
    sync = SyncSet(5, ("a", "b"), ids=(("a", "dir-a"), ("b", "dir-b")))
    same = [at("a", 10, board_id="dir-a"), at("b", 12, board_id="dir-b")]
    assert promotable("b", sync, same, 1) == same
    wiped = [at("a", 10, board_id="dir-a"), at("b", 0, board_id="dir-b2")]
    assert promotable("b", sync, wiped, 1) is None, "the empty b was promoted"
    # a alone is not enough with one standby needed: the old b may have
    # held a write only it acknowledged, and it is gone.
    assert promotable("a", sync, wiped, 1) is None
    assert promotable("a", sync, wiped, 2) == [wiped[0]]
    assert promotable("a", SyncSet(5, ("a", "b")), wiped, 1) == wiped  # by name: b counts
    stored = Entry(b"/msgboard/c/sync", sync.value().encode(), 1, 0, 0)
    assert SyncSet.of(stored) == sync
    assert Position.of(Entry(b"/m/members/b", wiped[1].value().encode(), 1, 100, 0)) == wiped[1]


def test_a_standby_whose_disk_was_lost_joins_again_before_it_counts(three: Boards) -> None:
    """Given three boards, posts on both standbys, when I kill a standby,
    remove its whole directory and start it again under the same name, I
    expect the in-sync set to record its new directory only once it holds
    the primary's log (it joined again), and, the primary then killed, the
    board elected to hold every post answered."""
    p = three.primary()
    with Client(three.address(p)) as c:
        c.create_queue("q")
        answered = [c.post("q", body=f"m{i}".encode()) for i in range(5)]
    wait_until("both standbys in sync", lambda: len(three.in_sync()) == 2, 60)
    s = next(n for n in three.names if n != p)
    old = (three.data(s) / "board-id").read_text().strip()
    assert joined_with(three, s) == old
    three.kill(s)
    shutil.rmtree(three.data(s))
    three.start(s)
    new = (three.data(s) / "board-id").read_text().strip()
    assert new != old
    wait_until("the wiped standby joined again", lambda: joined_with(three, s) == new, 90)
    assert last_index(three.data(s)) >= max(answered)
    three.kill(p)
    q = three.primary(among=[n for n in three.names if n != p], timeout=90)
    with Client(three.address(q)) as c:
        held = {m.seq for m in c.browse("q").messages}
    assert set(answered) <= held, (q, sorted(held))


def test_a_lone_member_whose_disk_was_lost_is_not_elected_empty(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    """Given two boards, the standby the only member of the in-sync set
    with every post, when I kill it, remove its whole directory, stop the
    primary (SIGSTOP) past its lease and start the standby again under its
    old name, I expect no board elected while the primary is stopped (the
    board on the new disk is not the member the set names: elected, it
    would lead without the posts; on the rule by name alone it was), and,
    the primary resumed, the primary leading again with every post."""
    b = Boards(tmp_path, etcd.endpoints, cluster_name(), *PATIENT, size=2)
    try:
        b.start()
        p = b.primary()
        s = next(n for n in b.names if n != p)
        with Client(b.address(p)) as c:
            c.create_queue("q")
            answered = [c.post("q", body=f"m{i}".encode()) for i in range(5)]
        wait_until("the standby in sync", lambda: b.in_sync() == [s], 60)
        b.kill(s)
        shutil.rmtree(b.data(s))
        b.pause(p)
        try:
            b.start(s)
            time.sleep(4 * int(TTL) + 2)  # leases run out; an election would be done
            etcd_client = Etcd(etcd.endpoints, timeout=2.0)
            try:
                entry, _ = etcd_client.get(f"/msgboard/{b.cluster}/leader")
            finally:
                etcd_client.close()
            assert entry is None or json.loads(entry.value)["name"] == p, entry
        finally:
            b.resume(p)
        q = b.primary(timeout=90)
        assert q == p
        with Client(b.address(q)) as c:
            held = {m.seq for m in c.browse("q").messages}
        assert set(answered) <= held
    except BaseException:
        for name in b.names:
            print(f"===== {name}'s log\n{b.log(name)[-6000:]}")
        raise
    finally:
        b.stop()
