"""What the workload modules share: the message body, timing and pacing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

#: Every message carries this 100-byte body.
BODY = b"x" * 100
#: Messages per pipelined batch (msgboard PostStream request, Redis pipeline).
BATCH = 100
#: Publisher-confirm window of the pipelined RabbitMQ publisher.
WINDOW = 1000
#: How long a consumer may wait for a message that should come before the
#: run is declared broken (nothing is timed against this).
STALL = 60.0

Figures = dict[str, float]


def rate(n: int, seconds: float) -> Figures:
    return {"msgs_per_s": n / seconds, "messages": n, "seconds": seconds}


def latencies(samples: list[float], sent: int, seconds: float) -> Figures:
    """p50 and p99 (ms) of ``samples`` (seconds), with the rate the paced
    publisher really achieved."""
    s = sorted(samples)
    if not s:
        raise RuntimeError("no message was delivered")
    return {
        "p50_ms": s[len(s) // 2] * 1e3,
        "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3,
        "max_ms": s[-1] * 1e3,
        "messages": len(s),
        "achieved_rate": sent / seconds,
    }


class Deliveries:
    """Counts deliveries across consumer threads; records the time of the
    last one and wakes ``wait`` when ``expected`` have arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.last = 0.0
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()

    def add(self, k: int = 1) -> None:
        with self._lock:
            self.count += k
            self.last = time.perf_counter()
            if self.count >= self.expected:
                self._done.set()

    def fail(self, e: BaseException) -> None:
        """A consumer thread's error, raised by ``wait``."""
        self.error = e
        self._done.set()

    def wait(self) -> None:
        """Until all arrived; RuntimeError if none arrives for STALL s."""
        seen = -1
        while not self._done.wait(STALL):
            if self.count == seen:
                raise RuntimeError(f"stalled at {self.count:,} of {self.expected:,} deliveries")
            seen = self.count
        if self.error is not None:
            raise RuntimeError(f"a consumer failed: {self.error!r}") from self.error


def start_threads(targets: list[threading.Thread], ready: list[threading.Event]) -> None:
    """Starts consumer threads and waits until each says it is subscribed."""
    for t in targets:
        t.start()
    for e in ready:
        if not e.wait(STALL):
            raise RuntimeError("a consumer did not subscribe in time")


def slots(per_s: float, n: int) -> Iterator[list[float]]:
    """The schedule of a paced publisher: message i is due at start + i /
    ``per_s``. Yields, each time something is due, the due times of the
    messages due now and not yet yielded (usually one; more when the caller
    was busy past a slot, so that a publisher that waits for each round
    trip sends what piled up in the next one and keeps the rate). Each
    message is stamped with its due time, not the time it was sent, so the
    time it waited in the publisher counts in its latency."""
    start = time.perf_counter()
    sent = 0
    while sent < n:
        now = time.perf_counter()
        due = min(n, int((now - start) * per_s) + 1)
        if due > sent:
            yield [start + i / per_s for i in range(sent, due)]
            sent = due
        else:
            time.sleep(min(start + sent / per_s - now, 0.001))
