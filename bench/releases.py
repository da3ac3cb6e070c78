"""Scheduled messages' release rate: ``--messages`` messages all due in the
same second, on the embedded board (fsync'd unless ``--no-sync``), posted
beforehand in batches of 10,000; prints how long after their time the
first and the last were released, and the rate (messages per second from
the due time to the last), and the longest a plain post made during the
release waited, against its median before the release::

    .venv/bin/python bench/releases.py [--messages 100000] [--no-sync]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.message import now_us

S = 1_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--no-sync", action="store_true")
    args = ap.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory() as tmp, Board(tmp, sync=not args.no_sync) as b:
        b.create_queue(QueueSpec("jobs"))
        b.create_queue(QueueSpec("probe"))
        t = time.monotonic()
        b.post("probe", [Message(not_before=now_us() + 3600 * S) for _ in range(10_000)])
        at = now_us() + round(3 * (n / 10_000) * (time.monotonic() - t) * S) + 3 * S
        futs = [
            b.post_async("jobs", [Message(not_before=at) for _ in range(10_000)])
            for _ in range(n // 10_000)
        ]
        for f in futs:
            f.result(600)
        if now_us() >= at:
            raise SystemExit("posting overran the due time; run again on a quieter machine")

        def probe() -> float:
            t = time.perf_counter()
            b.post("probe", [Message(body=b"p")])
            return time.perf_counter() - t

        before = [probe() for _ in range(20)]
        during: list[float] = []
        stop = threading.Event()

        def probing() -> None:
            while not stop.is_set():
                during.append(probe())

        while now_us() < at:
            time.sleep(0.001)
        prober = threading.Thread(target=probing)
        prober.start()
        first = last = 0
        while True:
            done = b.stats("jobs").queues[0].unprocessed
            if done and not first:
                first = now_us()
            if done >= n:
                last = now_us()
                break
            time.sleep(0.005)
        stop.set()
        prober.join()
    print(
        f"{n:,} due at once: first released {(first - at) / 1e3:.0f} ms after the due time, "
        f"last {(last - at) / 1e3:.0f} ms after; {n / ((last - at) / S):,.0f} msgs/s. "
        f"A post meanwhile: median {statistics.median(during) * 1e3:.1f} ms, "
        f"longest {max(during) * 1e3:.1f} ms ({len(during)} posts); "
        f"before: median {statistics.median(before) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
