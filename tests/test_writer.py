"""The single writer never stops silently: no input can overflow its waits,
and if its thread dies all the same, every call fails with UNAVAILABLE, the
served board stops with a log line and an error instead of hanging."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from msgboard import Message, QueueSpec
from msgboard.config import ServeConfig
from msgboard.engine import Board
from msgboard.engine import writer as writer_module
from msgboard.engine.limits import MAX_TIME_US
from msgboard.errors import Unavailable
from msgboard.server import serve
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

#: The documented last time a timestamp may hold, and well past the ~292
#: years that ``queue.get(timeout=...)`` accepts.
LAST = Timestamp(seconds=253_402_300_799, nanos=999_999_000)


def test_a_post_expiring_in_the_year_9999_leaves_the_embedded_board_working(
    tmp_path: Path,
) -> None:
    with Board(tmp_path / "data") as board:
        board.create_queue(QueueSpec(name="q"))
        board.post("q", [Message(tuple=("far",), expires_at=MAX_TIME_US)])
        # Bounded waits: before the fix these hung, the writer thread dead.
        assert board.post_async("q", [Message(tuple=("next",))]).result(10) == [2]
        taken = board.take_async("q", max=2).result(10)
        assert [m.tuple for m in taken] == [("far",), ("next",)]
        assert board.failure is None


@pytest.fixture
def stub(server: ServerThread) -> Iterator[pb_grpc.BoardStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.BoardStub(channel)


def test_a_post_expiring_in_the_year_9999_leaves_the_served_board_working(
    stub: pb_grpc.BoardStub,
) -> None:
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")), timeout=10)
    far = pb.Message(tuple=[pb.FieldValue(string="far")], expires_at=LAST)
    stub.Post(pb.PostRequest(queue="q", messages=[far]), timeout=10)
    stub.Post(
        pb.PostRequest(queue="q", messages=[pb.Message(tuple=[pb.FieldValue(string="next")])]),
        timeout=10,
    )
    got = stub.Take(pb.TakeRequest(queue="q", max=2), timeout=10)
    assert [m.tuple[0].string for m in got.messages] == ["far", "next"]
    assert got.messages[0].expires_at == LAST


class Fault:
    """Makes the writer thread die at its next turn, once armed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        original = writer_module.Writer._next_deadline

        def next_deadline(w: writer_module.Writer) -> float | None:
            if self.armed:
                raise RuntimeError("injected writer fault")
            return original(w)

        monkeypatch.setattr(writer_module.Writer, "_next_deadline", next_deadline)

    def arm(self, board: Board) -> None:
        self.armed = True
        # Wake the writer so that it turns: this op may or may not run first.
        with contextlib.suppress(Unavailable):
            board.get_queue_async("q").result(10)


def test_when_the_writer_dies_every_call_fails_at_once_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fault = Fault(monkeypatch)
    board = Board(tmp_path / "data")
    told: list[BaseException] = []
    board.on_failure(told.append)
    try:
        board.create_queue(QueueSpec(name="q"))
        blocked = board.take_async("q", timeout=60)
        fault.arm(board)
        # The blocked take is answered, not left to its 60 s.
        with pytest.raises(Unavailable):
            blocked.result(10)
        with pytest.raises(Unavailable, match="writer"):
            board.post_async("q", [Message(tuple=(1,))]).result(10)
        assert isinstance(board.failure, RuntimeError)
        assert told == [board.failure]
        assert "the writer thread died" in caplog.text
    finally:
        board.close()


def test_a_served_board_whose_writer_dies_stops_serving_with_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve() runs in this (the main) thread, as under ``msgboard serve``;
    a client thread posts once the board is ready, arms the fault and posts
    again. If serve() were still running 30 s later, the client sends
    SIGTERM, and serve() returns cleanly: the assertions below then fail."""
    fault = Fault(monkeypatch)
    config = ServeConfig(data=str(tmp_path / "data"), listen="127.0.0.1:0")
    codes: list[grpc.StatusCode] = []
    done = threading.Event()

    def client(port: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.BoardStub(channel)
            stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")), timeout=10)
            fault.armed = True
            # The post that wakes the writer may commit before it turns; the
            # next finds it dead (or the server gone): UNAVAILABLE either way.
            for _ in range(3):
                try:
                    stub.Post(pb.PostRequest(queue="q", messages=[pb.Message()]), timeout=10)
                except grpc.RpcError as e:
                    codes.append(e.code())
                    break
        if not done.wait(30):
            os.kill(os.getpid(), signal.SIGTERM)

    threads: list[threading.Thread] = []

    def ready(port: int) -> None:
        threads.append(threading.Thread(target=client, args=(port,), daemon=True))
        threads[0].start()

    try:
        with pytest.raises(Unavailable, match="writer thread failed"):
            asyncio.run(serve(config, ready=ready))
    finally:
        done.set()
    # serve() may return while the client still waits for its answer.
    threads[0].join(30)
    # UNAVAILABLE from the dead writer; or, on a loaded machine, CANCELLED
    # when the post reached the server after it began to stop and was still
    # in flight when the grace period ran out. Either is an answer, not a hang.
    assert len(codes) == 1 and codes[0] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
