"""Expiry benchmark: how soon the sweep dead-letters a mass of expired
messages that nothing else meets, on the embedded board.

Posts ``--messages`` messages in batches of 1,000, all expiring at one
moment some seconds after the posts end, then waits and prints how long after their
expiry the first were swept and when the last were, and the memory of the
expiry index per message (from tracemalloc, on a heap of the same entries)::

    .venv/bin/python bench/expiry.py [--messages 100000] [--sync]
"""

from __future__ import annotations

import argparse
import heapq
import tempfile
import time
import tracemalloc

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.message import now_us


def index_bytes(n: int) -> float:
    """Bytes per entry of a heap like the expiry index's."""
    at = now_us() + 3_600_000_000
    tracemalloc.start()
    heap: list[tuple[int, str, int]] = []
    for i in range(n):
        heapq.heappush(heap, (at + i, "jobs", 1000 + i))
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sync", action="store_true", help="fsync every commit (the default board)")
    args = ap.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory() as d, Board(d, sync=args.sync) as board:
        board.create_queue(QueueSpec("dlq"))
        board.create_queue(QueueSpec("q", dead_letter="dlq"))
        start = time.perf_counter()
        board.post("q", [Message(tuple=("n", i)) for i in range(1000)])
        board.take("q", max=1000)
        per_batch = time.perf_counter() - start  # to foresee when the posts end
        at = now_us() + int((3 * per_batch * n / 1000 + 5) * 1e6)
        start = time.perf_counter()
        for i in range(0, n, 1000):
            msgs = [Message(tuple=("n", j), expires_at=at) for j in range(i, min(n, i + 1000))]
            board.post("q", msgs)
        posted = time.perf_counter() - start
        assert now_us() < at, "the posts took longer than foreseen: rerun"
        while now_us() < at:
            time.sleep(0.005)
        first = last = 0.0
        while unprocessed := board.get_queue("q").unprocessed:
            if not first and unprocessed < n:
                first = now_us() / 1e6 - at / 1e6
            time.sleep(0.005)
        last = now_us() / 1e6 - at / 1e6
        [row] = board.stats("q").queues
    print(f"posted {n} messages with an expiry in {posted:.2f} s (sync={args.sync})")
    print(f"first swept {first:.2f} s after their expiry; all {last:.2f} s after")
    print(f"expired counted: {row.expired}; index: {index_bytes(n):.0f} bytes per message")


if __name__ == "__main__":
    main()
