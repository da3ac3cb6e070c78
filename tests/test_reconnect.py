"""A subscription, and ``msgboard watch``, outlive a board restart: the
board is killed and started again on the same port and data directory
while the stream is open, and every message posted is seen, the ones not
acked again. Errors that are no outage (the queue gone) still end it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.errors import MsgboardError, NotFound, QueueNotFound, Unavailable
from msgboard.message import Message
from msgboard.spec import Delivery
from msgboard.testing import ServerProcess
from tests.served import free_port


def violations(
    posted: set[int], acked: set[int], before: list[Delivery], after: list[Delivery]
) -> list[str]:
    """What a restart broke: each message posted (its tuple's 2nd field)
    seen at least once; none acked before the restart seen after it; none
    seen before and not acked missing after; no delivery id reused."""
    out = []
    seen = {int(d.message.tuple[1]) for d in [*before, *after]}  # type: ignore[call-overload]
    again = {int(d.message.tuple[1]) for d in after}  # type: ignore[call-overload]
    first = {int(d.message.tuple[1]) for d in before}  # type: ignore[call-overload]
    out += [f"{n} never seen" for n in sorted(posted - seen)]
    out += [f"{n} acked, then delivered again" for n in sorted(acked & again)]
    out += [f"{n} not acked, not delivered again" for n in sorted(first - acked - again)]
    old = {d.id for d in before}
    out += [f"delivery id {d.id} reused" for d in after if d.id in old]
    return out


def _d(id: int, n: int) -> Delivery:
    return Delivery(id, Message(queue="jobs", tuple=("job", n)))


def test_the_checker_catches_each_violation() -> None:
    before = [_d(1, 1), _d(2, 2)]
    assert violations({1, 2, 3}, {1}, before, [_d(3, 2), _d(4, 3)]) == []
    assert violations({1, 2, 3}, {1}, before, [_d(3, 2)]) == ["3 never seen"]
    again = violations({1, 2}, {1}, before, [_d(3, 2), _d(4, 1)])
    assert again == ["1 acked, then delivered again"]
    assert violations({1, 2, 3}, {1}, before, [_d(4, 3)]) == ["2 not acked, not delivered again"]
    assert violations({1, 2}, {1}, before, [_d(2, 2)]) == ["delivery id 2 reused"]


WATCH = (sys.executable, "-m", "msgboard", "watch", "jobs")


class Board:
    """A board on a fixed port, killed and started again on it."""

    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "board"
        self.address = f"127.0.0.1:{free_port()}"
        self.proc = ServerProcess(self.data, "--listen", self.address)

    def restart(self, data: Path | None = None, kill: bool = True) -> None:
        if kill:
            self.proc.kill()
        else:
            assert self.proc.stop() == 0
        self.data = data or self.data
        self.proc = ServerProcess(self.data, "--listen", self.address)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    b = Board(tmp_path)
    try:
        yield b
    finally:
        b.proc.stop()


def post(c: Client, n: int) -> None:
    """Posts ("job", n), trying again while the connection comes back."""
    deadline = time.monotonic() + 60
    while True:
        try:
            c.post("jobs", ("job", n))
            return
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_subscription_subscribes_again_when_the_board_restarts(board: Board) -> None:
    """Given three deliveries, the first acked (and durable), when the board
    is killed and started again and a fourth message posted, I expect the
    iteration to go on with the second, third and fourth, under new ids;
    the first never again; an ack of a lost delivery set aside; and
    on_reconnect told of the outage and of the return."""
    heard: list[MsgboardError | None] = []
    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs", max_history=10)
        with c.subscribe("jobs", credit=10, on_reconnect=heard.append) as sub:
            for n in (1, 2, 3):
                post(c, n)
            before = [next(sub) for _ in range(3)]
            sub.ack(before[0])
            deadline = time.monotonic() + 60
            while c.get_queue("jobs").history < 1:  # the ack is durable
                assert time.monotonic() < deadline
                time.sleep(0.05)
            acked = {int(before[0].message.tuple[1])}  # type: ignore[call-overload]

            board.restart()
            post(c, 4)
            after = []
            while len(after) < 3:
                d = next(sub)
                after.append(d)
                sub.ack(d)
            assert violations({1, 2, 3, 4}, acked, before, after) == []
            assert sub.ack(before[1]) == 0  # nothing sent: its id is the lost stream's
            assert isinstance(sub.rejected[before[1].id], NotFound)
        assert [type(e) for e in heard] == [Unavailable, type(None)]
        deadline = time.monotonic() + 60
        while (q := c.get_queue("jobs")).history < 4:
            assert time.monotonic() < deadline, q
            time.sleep(0.05)
        assert q.unprocessed == 0


def test_an_async_subscription_subscribes_again_when_the_board_restarts(board: Board) -> None:
    """The same story with ``subscribe_async``."""
    heard: list[MsgboardError | None] = []

    async def story(c: Client) -> tuple[list[Delivery], list[Delivery]]:
        async with c.subscribe_async("jobs", credit=10, on_reconnect=heard.append) as sub:
            for n in (1, 2, 3):
                post(c, n)
            before = [await anext(sub) for _ in range(3)]
            await sub.ack(before[0])
            deadline = time.monotonic() + 60
            while c.get_queue("jobs").history < 1:  # the ack is durable
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            board.restart()
            post(c, 4)
            after = []
            while len(after) < 3:
                d = await anext(sub)
                after.append(d)
                await sub.ack(d)
            return before, after

    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs", max_history=10)
        before, after = asyncio.run(story(c))
    acked = {int(before[0].message.tuple[1])}  # type: ignore[call-overload]
    assert violations({1, 2, 3, 4}, acked, before, after) == []
    assert [type(e) for e in heard] == [Unavailable, type(None)]


def test_the_queue_gone_after_a_restart_ends_the_subscription(board: Board, tmp_path: Path) -> None:
    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs")
        with c.subscribe("jobs") as sub:
            board.restart(tmp_path / "empty")  # a board with no queue "jobs"
            with pytest.raises(QueueNotFound):
                next(sub)


def test_reconnect_false_ends_the_subscription_with_unavailable(board: Board) -> None:
    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs")
        with c.subscribe("jobs", reconnect=False) as sub:
            board.restart()
            with pytest.raises(Unavailable):
                next(sub)


def test_watch_says_when_the_board_goes_and_comes_back(board: Board) -> None:
    """Given `msgboard watch jobs --json` and a board stopped and started
    again between two posts, I expect both messages printed, one stderr
    line for the outage and one for the return, and the watch still
    running until Ctrl-C (status 130)."""
    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs", max_history=10)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*WATCH, "--json", "--server", board.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        with Client(board.address, timeout=30) as c:
            deadline = time.monotonic() + 60
            while not c.list_consumers():  # the watch is subscribed
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            post(c, 1)
        assert json.loads(proc.stdout.readline())["tuple"] == ["job", 1]
        board.restart(kill=False)
        with Client(board.address, timeout=30) as c:
            post(c, 2)
        tuples = [json.loads(proc.stdout.readline())["tuple"]]
        while tuples[-1] != ["job", 2]:  # 1 again, if its ack was lost
            tuples.append(json.loads(proc.stdout.readline())["tuple"])
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    said = err.splitlines()
    assert len(said) == 2, err
    assert said[0].startswith(f"# lost the board at {board.address} (UNAVAILABLE"), err
    assert said[1].startswith(f"# subscribed again to {board.address} after "), err


def test_watch_with_manual_acks_reports_an_ack_of_a_lost_delivery(board: Board) -> None:
    """Given `watch --manual-ack` that printed delivery 1 before the board
    was killed and started again, I expect the message printed again under
    a new id, an `ack` of the old id reported as not outstanding (status
    1), and the `ack` of the new id applied."""
    with Client(board.address, timeout=30) as c:
        c.create_queue("jobs", max_history=10)
        post(c, 1)
    proc = subprocess.Popen(
        [*WATCH, "--json", "--manual-ack", "--server", board.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = json.loads(proc.stdout.readline())
        board.restart()
        again = json.loads(proc.stdout.readline())
        assert first["tuple"] == again["tuple"] == ["job", 1]
        assert again["delivery"] > first["delivery"]
        _, err = proc.communicate(f"ack {first['delivery']}\nack {again['delivery']}\n", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    [error] = [json.loads(x)["error"] for x in err.splitlines() if x.startswith("{")]
    assert error["code"] == "NOT_FOUND" and f"delivery {first['delivery']}" in error["message"]
    with Client(board.address, timeout=30) as c:
        deadline = time.monotonic() + 60
        while (q := c.get_queue("jobs")).history < 1:
            assert time.monotonic() < deadline, q
            time.sleep(0.05)
        assert q.unprocessed == 0
