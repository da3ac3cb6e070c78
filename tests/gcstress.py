"""The amplified form of issue 33's crash, run as a child process by
tests/test_writer_threads.py: a board served from this process (a real
gRPC server over a real LMDB directory) while a thread runs Python's
cyclic garbage collector in a loop (the automatic collections off, so
that every cycle is freed by that thread, never by the writer), and
workloads that leave searches before their end while the writer deletes
from the same sub-database:

- fan-out as bench-compare's row 5b: COPY selectors from one queue into
  durable queues, each drained by a MOVE subscriber with credit 100 (a
  pull stops once its chunk is full);
- takes over gRPC by a template, one at a time, from a queue of a few
  hundred (each search stops at its first match);
- bursts of takes through the board's own calls, many in flight, so
  that one group commit holds many searches left mid-way and many
  deletes beside them.

Before the fix a cursor of the writer's live transaction, left in a
search's reference cycle, was freed on the collector's thread while the
writer walked that transaction's cursors inside LMDB: SIGSEGV (or a heap
error, SIGABRT). Run with PYTHONFAULTHANDLER=1 the stacks go to stderr.
Exits 0 after ``seconds`` with the work done on stdout.

    python -m tests.gcstress DIR SECONDS
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path

from msgboard import Message
from msgboard.associative import EVERYTHING
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.spec import QueueSpec
from msgboard.testing import ServerThread

#: Queues the fan-out copies into.
FANOUT = 10
#: Threads taking in bursts, and the takes each has in flight at once.
BURSTS = 2
BURST = 600
BODY = b"x" * 100


def _collect(stop: threading.Event) -> None:
    """The collector, alone: generations 0 and 1 (where a search left a
    moment ago sits), as fast as the GIL allows."""
    gc.disable()
    while not stop.is_set():
        gc.collect(1)


def _fan(address: str, stop: threading.Event, done: list[int]) -> None:
    src = "fan"
    targets = [f"fan-{k}" for k in range(FANOUT)]
    with Client(address, timeout=60) as c:
        c.create_queue(src, unmatched="discard")
        for q in targets:
            c.create_queue(q)
            c.create_selector(src, op="copy", to=q)

        def drain(q: str) -> None:
            with Client(address, timeout=60) as d, d.subscribe(q, credit=100) as sub:
                for got, m in enumerate(sub, 1):
                    if got % 50 == 0 or stop.is_set():
                        sub.ack(up_to=m)
                    if stop.is_set():
                        return

        for q in targets:
            threading.Thread(target=drain, args=(q,), daemon=True).start()
        while not stop.is_set():
            c.post_many(src, [Message(body=BODY) for _ in range(500)], batch=100)
            done[0] += 500


def _takes(address: str, stop: threading.Event, done: list[int]) -> None:
    q = "takes"
    with Client(address, timeout=60) as c:
        c.create_queue(q)
        while not stop.is_set():
            c.post_many(q, [("job", i, "x") for i in range(300)], batch=100)
            for _ in range(150):
                if stop.is_set():
                    return
                done[1] += len(c.take(q, ("job", int, "x")))
            while c.take(q, max=100):
                pass


def _burst(board: Board, q: str, stop: threading.Event, done: list[int]) -> None:
    board.create_queue_async(QueueSpec(q)).result()
    while not stop.is_set():
        msgs = [Message(tuple=("job", i, "x"), body=BODY) for i in range(BURST * 2 + 100)]
        board.post_async(q, msgs).result()
        futs = [board.take_async(q, EVERYTHING, 0.0, 2) for _ in range(BURST)]
        for f in futs:
            done[2] += len(f.result())


def main() -> None:
    data, seconds = Path(sys.argv[1]), float(sys.argv[2])
    server = ServerThread(data).start()
    assert server.board is not None
    stop = threading.Event()
    done = [0, 0, 0]
    threads = [
        threading.Thread(target=_collect, args=(stop,), daemon=True),
        threading.Thread(target=_fan, args=(server.address, stop, done), daemon=True),
        threading.Thread(target=_takes, args=(server.address, stop, done), daemon=True),
        *(
            threading.Thread(
                target=_burst, args=(server.board, f"burst-{k}", stop, done), daemon=True
            )
            for k in range(BURSTS)
        ),
    ]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    server.stop()
    print(f"fanned out {done[0]}, took {done[1]} over gRPC and {done[2]} in bursts", flush=True)


if __name__ == "__main__":
    main()
