"""Durability: every answered Post survives kill -9 of the server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from msgboard import Message
from msgboard.client import Client
from msgboard.errors import MsgboardError
from msgboard.testing import ServerProcess


def test_every_answered_post_survives_kill_9(tmp_path: Path) -> None:
    """Given posters (unary and streamed) posting continuously, when the
    server is killed with SIGKILL mid-stream and restarted, I expect every
    post that was answered to be there under its seq, and the seqs to run
    without gaps."""
    data = tmp_path / "board"
    server = ServerProcess(data)
    address = server.address
    acked: dict[int, tuple[object, ...]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def unary(worker: int) -> None:
        with Client(address, timeout=10) as c:
            i = 0
            while not stop.is_set():
                t = ("unary", worker, i)
                try:
                    seq = c.post("durable", t)
                except MsgboardError:
                    return
                with lock:
                    acked[seq] = t
                i += 1

    def streamed() -> None:
        with Client(address, timeout=10) as c:
            i = 0
            while not stop.is_set():
                batch = [("stream", i + k) for k in range(200)]
                try:
                    seqs = c.post_many("durable", [Message(tuple=t) for t in batch], batch=50)
                except MsgboardError:
                    return
                with lock:
                    acked.update(zip(seqs, batch, strict=True))
                i += 200

    with Client(address) as c:
        c.create_queue("durable")
    workers = [threading.Thread(target=unary, args=(w,)) for w in range(3)]
    workers.append(threading.Thread(target=streamed))
    for w in workers:
        w.start()
    time.sleep(1.5)
    server.kill()
    stop.set()
    for w in workers:
        w.join(20)
    assert len(acked) > 100, "the posters did not get going"

    server = ServerProcess(data)
    try:
        with Client(server.address) as c:
            stored: dict[int, tuple[object, ...]] = {}
            seq = 1
            while True:
                page = c.browse("durable", "seq", seq=seq, limit=5000)
                stored.update((m.seq, m.tuple) for m in page.messages)
                if not page.next_seq:
                    break
                seq = page.next_seq
            missing = {s: t for s, t in acked.items() if stored.get(s) != t}
            assert not missing, f"{len(missing)} acknowledged posts lost"
            assert sorted(stored) == list(range(1, len(stored) + 1))
            assert c.post("durable", ("after",)) == len(stored) + 1
    finally:
        assert server.stop() == 0, "SIGTERM did not stop the server cleanly"


def test_a_take_blocked_at_shutdown_gets_an_empty_answer_at_once(tmp_path: Path) -> None:
    """Given a take blocked for a minute, when the server gets SIGTERM, I
    expect the take answered with nothing well before the grace period."""
    server = ServerProcess(tmp_path / "board")
    got: list[object] = []
    with Client(server.address) as c:
        c.create_queue("q")
        waiting = threading.Thread(target=lambda: got.append(c.take("q", timeout=60)))
        waiting.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert server.stop() == 0
        waiting.join(10)
    assert got == [[]]
    assert time.monotonic() - started < 1.5
