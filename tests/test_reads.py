"""Calls that only read run off the writer thread, on a consistent view."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import QueueNotFound
from msgboard.lmdbstore import Txn
from msgboard.message import Message
from msgboard.results import Start
from msgboard.spec import QueueSpec
from msgboard.testing import ServerThread


def test_a_post_commits_while_a_read_works_and_the_read_sees_its_moment(
    tmp_path: Path,
) -> None:
    """Given a read whose work waits until a post has been answered, I
    expect the post answered (the writer is not held by the read), and the
    read to see the queue as it was when its view was taken."""
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("q"))
        board.post("q", [Message(tuple=("a",))])
        started, posted = threading.Event(), threading.Event()
        fut: Future[int] = Future()

        def work(view: Txn) -> int:
            started.set()
            assert posted.wait(30)
            return view.counts("q").unprocessed

        board._writer.submit(lambda b: board._reads.later(b, fut, lambda: work), fut)
        assert started.wait(30)
        board.post("q", [Message(tuple=("b",))])  # would hang behind the read
        posted.set()
        assert fut.result(30) == 1
        assert board.get_queue("q").unprocessed == 2


def test_reads_answer_for_durable_and_transient_queues_alike(tmp_path: Path) -> None:
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("d"))
        board.create_queue(QueueSpec("t", transient=True))
        for q in ("d", "t"):
            board.post(q, [Message(tuple=(q, i)) for i in range(5)])
        assert [(v.spec.name, v.unprocessed) for v in board.list_queues()] == [("d", 5), ("t", 5)]
        stats = board.stats()
        assert [(r.name, r.transient, r.ready, r.posted) for r in stats.queues] == [
            ("d", False, 5, 5),
            ("t", True, 5, 5),
        ]
        for q in ("d", "t"):
            page = board.browse(q, Start.LATEST, reverse=True, limit=2)
            assert [m.tuple for m in page.messages] == [(q, 4), (q, 3)]
            assert [m.tuple for m in board.read(q, max=2)] == [(q, 0), (q, 1)]
        with pytest.raises(QueueNotFound):
            board.browse("nope")
        with pytest.raises(QueueNotFound):
            board.read("nope")


def test_a_read_skips_what_a_consumer_holds(tmp_path: Path) -> None:
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("q"))
        board.post("q", [Message(tuple=("n", i)) for i in range(4)])
        [d] = board.take_leased("q", lease=60)
        assert d.message.tuple == ("n", 0)
        assert [m.tuple for m in board.read("q", max=10)] == [("n", i) for i in (1, 2, 3)]
        row = board.stats().queues[0]
        assert (row.unprocessed, row.outstanding, row.ready) == (4, 1, 3)


def test_a_view_open_while_the_map_grows(tmp_path: Path) -> None:
    """Given a small map and a read holding a view, when posts need the map
    to grow, I expect them to wait for the read, then go through."""
    with Board(tmp_path / "b", map_size=1 << 20) as board:
        board.create_queue(QueueSpec("q"))
        started, release = threading.Event(), threading.Event()
        fut: Future[int] = Future()

        def work(view: Txn) -> int:
            started.set()
            release.wait(30)
            return view.counts("q").unprocessed

        board._writer.submit(lambda b: board._reads.later(b, fut, lambda: work), fut)
        assert started.wait(30)
        big = [Message(body=b"x" * 100_000) for _ in range(30)]
        post = board.post_async("q", big)
        release.set()
        assert post.result(30)[-1] == 30
        assert fut.result(30) == 0
        assert board.stats().store.map_size > 1 << 20


def test_listing_many_queues_over_grpc(server: ServerThread) -> None:
    with Client(server.address) as c:
        for i in range(300):
            c.create_queue(f"q{i:04}")
        c.post("q0007", ("x",))
        views = c.list_queues()
        assert len(views) == 300 and views[7].unprocessed == 1
        stats = c.stats()
        assert [q.name for q in stats.queues] == [v.spec.name for v in views]
        assert stats.queues[7].posted == 1
