"""A standby of a cluster follows again after its stream to the primary
ended: told with a real etcd and a real primary (``msgboard serve
--cluster``, a lone board, ``--allow-async``), and one standby's steering
(``msgboard.server.node.Node``: ``_follow``, ``_eligible``) driven in this
process over a real directory, as its event loop and its Leadership thread
drive it.

The story is the one the etcd-quorum fault run met at a cluster's start:
a standby's Leadership thread read "no leader" just before a board was
elected, and stopped the standby's Replica to judge the election while
the standby, told of the new primary meanwhile, had already started to
follow it (its stream then cancelled, as a server swap cancels it). The
standby must follow that same primary again once etcd says it leads,
never stay stopped.

And a Replica (``msgboard.cluster.replica``) whose Follow stream goes
silent for good (a connection lost in a partition that nobody resets:
``Proxy.stall``) cancels it and follows again, over a new connection.
"""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from msgboard.client import Client
from msgboard.cluster import PrimaryWatch
from msgboard.cluster.members import Membership
from msgboard.cluster.replica import Replica
from msgboard.cluster.service import TOKEN_KEY
from msgboard.config import ServeConfig
from msgboard.lmdbstore import DurableStore, Log
from msgboard.server.node import Node
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc
from tests.cluster import TOKEN, Boards, EtcdCluster, etcd_cluster, wait_until
from tests.proxy import Proxy
from tests.served import Served
from tests.test_replication import TOKEN as STATIC_TOKEN
from tests.test_replication import last_index, primary

etcd = pytest.fixture(scope="module")(etcd_cluster)

_clusters = itertools.count()


@pytest.fixture
def lone(tmp_path: Path, etcd: EtcdCluster) -> Iterator[Boards]:
    """A cluster of one board (it leads; writes need no standby)."""
    name = f"follow{next(_clusters)}-{time.monotonic_ns() % 10**9}"
    args = ("--lease-ttl", "2", "--allow-async")
    b = Boards(tmp_path, etcd.endpoints, name, *args, size=1)
    try:
        yield b.start()
    except BaseException:
        print(f"===== b0's log\n{b.log('b0')[-6000:]}")  # shown with the failure
        raise
    finally:
        b.stop()


@pytest.fixture
def standby(tmp_path: Path, etcd: EtcdCluster, lone: Boards) -> Iterator[Node]:
    """A standby's node of ``lone``'s cluster, its parts started by hand."""
    (tmp_path / "s9").mkdir()
    config = ServeConfig(
        data=str(tmp_path / "s9"),
        cluster=lone.cluster,
        etcd=etcd.endpoints,
        replication_token=TOKEN,
        board_name="s9",
        lease_ttl=2,
    )
    node = Node(config)
    node.name, node.address = "s9", "127.0.0.1:1"
    node.store = node._open_standby()
    node.watch = PrimaryWatch(etcd.endpoints, lone.cluster, every=0.5).start()
    node.membership = Membership(etcd.endpoints, lone.cluster, "s9", node.position, ttl=2)
    node.membership.start()
    try:
        yield node
    finally:
        node._halt()
        node.membership.stop()
        node.watch.stop()
        if node.store is not None:
            node.store.close()


def applied(node: Node) -> int:
    """The last log index ``node``'s standby store applied (it is open in
    this process: read through it)."""
    replica = node.replica
    store = replica.store if replica is not None else node.store
    assert store is not None
    return store.log_position()[0]


def steer_until_caught_up(node: Node, primary: Path, timeout: float) -> None:
    """Steers ``node`` as its event loop does (``_follow`` of the primary
    its watch names, every 50 ms) until its store holds the primary's
    whole log."""

    def caught_up() -> bool:
        node._follow(node.watch.current() if node.watch else None)
        return applied(node) == last_index(primary) > 0

    wait_until("the standby holds the primary's whole log", caught_up, timeout)


def post(address: str, body: str) -> None:
    with Client(address, timeout=30) as c:
        c.create_queue("q")
        c.post("q", body=body.encode())


def test_a_standby_stopped_to_judge_follows_the_elected_primary_again(
    lone: Boards, standby: Node
) -> None:
    """Given a standby following the primary, when its Leadership thread
    stops it to judge an election (as when it read "no leader" just before
    that primary was elected, its stream then cancelled), I expect it to
    follow the same primary again once etcd says it leads, and to hold
    what the primary writes after."""
    p = lone.primary()
    post(lone.address(p), "before")
    steer_until_caught_up(standby, lone.data(p), 60)
    assert standby.replica is not None
    # The Leadership thread's question, asked while the primary leads.
    standby._eligible(None)
    assert standby.replica is None  # stopped: its position must be final
    post(lone.address(p), "after")
    steer_until_caught_up(standby, lone.data(p), 60)
    assert standby.replica is not None and standby.following is not None
    assert standby.following.name == p


def test_a_replica_whose_stream_goes_silent_follows_again(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a standby's Replica following a primary through a link, when
    the link keeps its connection open but carries nothing more (nothing
    resets it), I expect the Replica to give that stream up after its
    silence bound and follow again over a new connection, holding what
    the primary writes meanwhile."""
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    link = Proxy(p.address)
    (tmp_path / "s").mkdir()
    store = DurableStore(str(tmp_path / "s"), log=Log(), standby=True)
    replica = Replica(store, link.address, STATIC_TOKEN, "s", silence=2.0)
    try:
        post(p.address, "before")
        wait_until("the replica follows", lambda: replica.applied == last_index(p.data) > 0, 60)
        link.stall()
        post(p.address, "after")
        wait_until("the replica follows again", lambda: replica.applied == last_index(p.data), 60)
    finally:
        replica.stop()
        replica.store.close()
        link.close()


def test_an_old_stream_of_a_standby_ending_late_does_not_unregister_it(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and a standby's Follow stream, when the standby
    opens a second stream (as a Replica does after giving up a silent
    one: a connection lost in a partition) and the first one ends only
    after that on the primary's side, I expect the primary still to count
    the standby as connected (its status names it): the old stream's end
    is not the standby's (issue 33: after a loss of etcd's quorum a
    standby "followed again", and its primary no longer counted it)."""
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    post(p.address, "m")
    with grpc.insecure_channel(p.address) as channel:
        stub = rpb_grpc.ReplicationStub(channel)
        hello = rpb.Hello(board="s", board_id="s-id", from_index=1)
        ends: list[queue.SimpleQueue[rpb.FollowRequest | None]] = []
        calls = []
        for _ in range(2):
            sends: queue.SimpleQueue[rpb.FollowRequest | None] = queue.SimpleQueue()
            sends.put(rpb.FollowRequest(hello=hello))
            call = stub.Follow(iter(sends.get, None), metadata=((TOKEN_KEY, STATIC_TOKEN),))
            next(call)  # the first batch: the stream is open on the primary
            ends.append(sends)
            calls.append(call)
        try:
            calls[0].cancel()
            wait_until(
                "the first stream ended on the primary",
                lambda: "standby s stopped following" in p.log.read_text(),
                60,
            )
            time.sleep(0.5)
            assert standbys(p.address) == ["s"], p.log.read_text()[-3000:]
        finally:
            for call, sends in zip(calls, ends, strict=True):
                sends.put(None)
                call.cancel()


def standbys(address: str) -> list[str]:
    """The standbys a primary's Status names as connected."""
    with grpc.insecure_channel(address) as channel:
        stub = rpb_grpc.ReplicationStub(channel)
        answer = stub.Status(rpb.StatusRequest(), metadata=((TOKEN_KEY, STATIC_TOKEN),), timeout=30)
    return sorted(s.board for s in answer.standbys)
