"""Durability: every answered Post survives kill -9 of the server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from msgboard import Message
from msgboard.client import Client
from msgboard.errors import MsgboardError


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``msgboard serve`` in a child process on a free loopback port; its
    log goes to a file beside the data, where the bound address is read."""
    log = data.parent / f"server-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "msgboard",
                "serve",
                "--data",
                str(data),
                "--listen",
                "127.0.0.1:0",
            ],
            stderr=out,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"serving on (\S+:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the server did not start: {log.read_text()}")


def test_every_answered_post_survives_kill_9(tmp_path: Path) -> None:
    """Given posters (unary and streamed) posting continuously, when the
    server is killed with SIGKILL mid-stream and restarted, I expect every
    post that was answered to be there under its seq, and the seqs to run
    without gaps."""
    data = tmp_path / "board"
    proc, address = start_server(data)
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
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    stop.set()
    for w in workers:
        w.join(20)
    assert len(acked) > 100, "the posters did not get going"

    proc, address = start_server(data)
    try:
        with Client(address) as c:
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
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, "SIGTERM did not stop the server cleanly"
