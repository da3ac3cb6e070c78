"""A link whose source board is a cluster (etcd, three boards: a new
primary needs a standby to write to, docs/cluster.md) that fails
over while it forwards: the new primary keys what it sends again with
the same id (``meta/board_id``, shared by the cluster's boards), so the
destination refuses the resends as DUPLICATE and every post answered OK
arrives once (the checker of tests/linkcheck.py, shown to catch
duplicates and strays in tests/test_links_checker.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.spec import UNLIMITED
from tests.cluster import EtcdCluster, etcd_cluster, wait_until
from tests.jepsen import browsed
from tests.linkboards import TOPIC, arrivals, reader
from tests.linkcheck import LINK_KEY, ORIGIN_BOARD, ORIGIN_SEQ, Arrived, Flow, check
from tests.nodes import Nodes
from tests.proxy import Proxy
from tests.served import Served
from tests.workload import OK, POSTERS, History, Workload, now


def as_from(board: str, a: Arrived) -> Arrived:
    """``a`` with ``board`` as its origin board id (header and link key)."""
    m = LINK_KEY.match(a.key)
    key = f"link:{board}:{m['queue']}:{m['seq']}" if m else a.key
    return replace(a, key=key, headers={**a.headers, ORIGIN_BOARD: board})


etcd = pytest.fixture(scope="module")(etcd_cluster)

ARGS = ("--lease-ttl", "3", "--sync-timeout-ms", "20000")
_names = itertools.count()


@pytest.fixture
def source(tmp_path: Path, etcd: EtcdCluster) -> Iterator[Nodes]:
    n = Nodes(tmp_path / "src", etcd, f"linkids{next(_names)}", *ARGS)
    try:
        yield n.start()
    finally:
        n.close()


def test_a_failover_of_the_source_cluster_sends_nothing_twice(
    source: Nodes, tmp_path: Path
) -> None:
    (tmp_path / "dest").mkdir()
    dest = Served(tmp_path / "dest")
    # The link reaches the destination through a proxy that can drop its
    # answers: what crosses then is stored there and never acked here.
    proxy = Proxy(dest.address)
    try:
        first = source.primary()
        with reader(dest.address) as c:
            c.create_queue("inbox", max_history=UNLIMITED, dedup_window=3600)
        with Client(source.addresses, timeout=30, failover=60) as c:
            c.create_queue("up", max_history=UNLIMITED)
            c.create_link("dest", proxy.address)
            c.create_selector("up", to="inbox", link="dest")
            before = c.stats().board_id
        h = History()
        w = Workload(
            h,
            source.addresses,
            name="up",
            queues=("up",),
            roles=POSTERS,
            topic=TOPIC,
            pause=0.02,
            batch=5,
            failover=60,
        ).start()
        try:

            def count() -> int:
                with reader(dest.address) as c:
                    return c.get_queue("inbox").unprocessed

            wait_until("messages cross the link", lambda: count() >= 100, 60)
            # Promotable: the standbys in the in-sync set (docs/cluster.md).
            wait_until("both standbys in sync", lambda: len(source.in_sync()) == 2, 60)
            with reader(source.listen[first]) as c:
                outbox = next(
                    q.spec.name for q in c.list_queues() if q.spec.name.startswith("$link.")
                )

            def unacked_there() -> bool:
                """Some message still in the outbox here is stored there."""
                with reader(source.listen[first]) as c:
                    here = {m.seq for _, m in browsed(c, outbox)}
                with reader(dest.address) as c:
                    there = {m.headers.get(ORIGIN_SEQ) for _, m in browsed(c, "inbox")}
                return any(str(seq) in there for seq in here)

            proxy.mute()
            wait_until("a batch stored there, unanswered", unacked_there, 60)
            source.kill(first)  # kill -9 while its sends wait for answers
            proxy.unmute()
            source.primary(timeout=45, other_than=first)
            since = now()
            wait_until(
                "posts answered on the new primary",
                lambda: any(o.outcome == OK and o.invoked_at > since for o in h.ops()),
                60,
            )
        finally:
            w.stop()
        with Client(source.addresses, timeout=30, failover=60) as c:
            after = c.stats().board_id
            wait_until("the outbox drains", lambda: c.get_queue(outbox).unprocessed == 0, 60)
        flow = Flow("up", ("src", "up"), ("dest", "inbox"), address=TOPIC)
        got = arrivals({"dest": dest.address}, [("dest", "inbox")])
        # Judged as from one source whatever id each arrival names, so that
        # a resend under another id shows as what it is: a duplicate.
        ids = {a.headers.get("x-origin-board", "") for a in got}
        problems = check(h.ops(), [flow], [as_from("src", a) for a in got], {"src": "src"})
        assert problems == [], "\n".join(problems[:20])
        assert ids == {before} and after == before, f"keyed with {ids}, then {after}"
    finally:
        proxy.close()
        dest.kill()
