"""The board's own events on $sys, and its consumers listed and kicked."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from msgboard.associative import EVERYTHING
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import Kicked, Reserved
from msgboard.message import Message
from msgboard.spec import Delivery, QueueSpec, SelectorSpec
from msgboard.testing import ServerThread


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


def test_watching_sys_from_the_command_line_shows_queues_come_and_go(
    server: ServerThread,
) -> None:
    """Given `msgboard watch '$sys' --address 'topic:queue.*'` running as a
    command, when another client creates and deletes a queue, I expect the
    watch to print queue.created then queue.deleted for it, and nothing
    else (the consumer's own attaching, a selector's, are not queue.*)."""
    command = ["watch", "$sys", "--address", "topic:queue.*", "--json", "--max", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "msgboard", *command, "--server", server.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with Client(server.address, timeout=30) as c:
            deadline = time.monotonic() + 30
            while not c.list_consumers("$sys"):  # the watch has attached
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            c.create_queue("jobs")
            c.create_selector("jobs", to="", credit=1)
            c.delete_queue("jobs")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (0, "")
    seen = [json.loads(x) for x in out.splitlines()]
    assert [(m["address"], m["tuple"]) for m in seen] == [
        ("queue.created", ["queue.created", "jobs", "durable"]),
        ("queue.deleted", ["queue.deleted", "jobs"]),
    ]
