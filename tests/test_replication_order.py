"""The gate releases groups strictly in index order, and a standby never
acknowledges what it has not fsynced.

The order, in one process over a real board: a group whose release is on
its way to the writer thread (acknowledged, not yet run) is followed by a
group that needs no wait (a read at the same index): the second must not
be answered before the first. The writer's ``call_soon`` is held back by
the test (handed to the board's own later) so that the window is open for
as long as the test needs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from msgboard.cluster import SyncGate
from msgboard.engine import Board
from msgboard.lmdbstore import Log
from msgboard.message import Message
from msgboard.spec import QueueSpec


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    with Board(tmp_path / "board", log=Log()) as b:
        b.create_queue(QueueSpec("q"))
        yield b


def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, f"not in time: {what}"
        time.sleep(0.01)


def test_a_group_needing_no_wait_is_released_after_the_groups_before_it(board: Board) -> None:
    later: list[Callable[[], object]] = []
    gate = SyncGate(board.log, later.append, needed=1, timeout=60.0)  # type: ignore[arg-type]
    board.hold_answers(gate.hold)
    oplog = board.log
    assert oplog is not None
    gate.connected("s", oplog.last)
    order: list[str] = []

    def track(name: str, fut: Future[Any]) -> Future[Any]:
        fut.add_done_callback(lambda _: order.append(name))
        return fut

    try:
        post = track("post", board.post_async("q", [Message(body=b"1")]))
        until(lambda: gate.waiting() == 1, "the post's group held")
        gate.ack("s", oplog.last)  # its release is on its way, not run yet
        assert len(later) == 1 and gate.waiting() == 0
        listing = track("list", board.list_queues_async())
        until(lambda: len(later) == 2 or listing.done(), "the listing's group committed")
        assert order == [], "a later group was answered before the one before it"
    finally:
        for fn in later:
            board.call_soon(fn)
        later.clear()
        gate.close()
    post.result(60)
    listing.result(60)
    assert order == ["post", "list"]


def test_a_standby_refuses_to_start_without_fsync(tmp_path: Path) -> None:
    """A standby acknowledges only what it fsynced: --sync weaker-no-fsync
    with --standby-of is refused at start, naming the setting."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "msgboard", "serve", "--data", str(tmp_path / "s")),
            *("--listen", "127.0.0.1:0", "--replication-token", "t"),
            *("--standby-of", "127.0.0.1:9", "--sync", "weaker-no-fsync"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--sync weaker-no-fsync with --standby-of" in done.stderr
