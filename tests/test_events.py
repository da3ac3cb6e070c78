"""The board's own events on $sys, and its consumers listed and kicked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from msgboard.associative import EVERYTHING
from msgboard.engine import Board
from msgboard.errors import Kicked, Reserved
from msgboard.message import Message
from msgboard.spec import Delivery, QueueSpec, SelectorSpec


def _events(got: list[Delivery], n: int) -> list[tuple[object, ...]]:
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return [tuple(d.message.tuple) for d in got]


def test_watching_sys_sees_each_event_once(tmp_path: Path) -> None:
    """Given a consumer of $sys, when I create a queue and a selector, attach
    and kick a consumer, delete the selector and the queue, I expect each
    event once, in order, and nothing about $sys itself."""
    with Board(tmp_path) as board:
        got: list[Delivery] = []
        board.subscribe("$sys", deliver=got.extend, end=lambda why: None, credit=100)
        board.create_queue(QueueSpec("jobs"))
        s = board.create_selector(SelectorSpec("jobs", EVERYTHING, destination=""))
        ends: list[BaseException | None] = []
        c, _ = board.subscribe("jobs", deliver=lambda ds: None, end=ends.append, credit=5)
        [listed] = board.list_consumers("jobs")
        assert (listed.id, listed.queue, listed.credit) == (c.id, "jobs", 5)
        board.kick_consumer(c.id)
        board.delete_selector(s.id)
        board.delete_queue("jobs")
        events = _events(got, 7)
        assert events == [
            ("board.started",),
            ("queue.created", "jobs", "durable"),
            ("selector.created", s.id, "jobs", ""),
            ("consumer.attached", c.id, "jobs", c.selector.id, "", ""),
            ("consumer.detached", c.id, "jobs", c.selector.id, "kicked"),
            ("selector.deleted", s.id, "jobs"),
            ("queue.deleted", "jobs"),
        ]
        assert all(d.message.address == d.message.tuple[0] for d in got)
        assert isinstance(ends[0], Kicked)
        assert [v.queue for v in board.list_consumers()] == ["$sys"]


def test_nobody_writes_sys_and_listings_leave_it_out(tmp_path: Path) -> None:
    with Board(tmp_path) as board:
        with pytest.raises(Reserved):
            board.post("$sys", [Message(tuple=("x",))])
        with pytest.raises(Reserved):
            board.delete_queue("$sys")
        with pytest.raises(Reserved):
            board.create_queue(QueueSpec("$sys", transient=True))
        assert board.get_queue("$sys").spec.transient
        assert [q.spec.name for q in board.list_queues()] == []


def test_json_errors_are_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --json, a refusal is one JSON object on stderr."""
    import json

    from msgboard.cli import main
    from msgboard.testing import ServerThread

    server = ServerThread(tmp_path / "data").start()
    try:
        code = main(["queue", "get", "nope", "--json", "--server", server.address])
        err = json.loads(capsys.readouterr().err)["error"]
        assert code == 1 and err["code"] == "NOT_FOUND" and err["name"] == "QueueNotFound"
    finally:
        server.stop()
