"""The expiry sweep: a waiting message whose ``expires_at`` passes is
dead-lettered (or discarded) within about a second, not when something next
happens to meet it, so it stops counting as waiting.

The index is a heap in memory of ``(expires_at, queue, seq)``, one entry per
stored message that has an expiry, pushed as it arrives (a post, a MOVE or
COPY into the queue): O(log n) per such message, about 140 bytes each, and
nothing for messages without an expiry. One timer on the writer thread is
armed for the earliest entry, rounded up to the next ``TICK`` so that
messages expiring close together share a sweep. A sweep pops the entries
that are due (at most ``SWEEP_BUDGET`` per operation, the rest in the next)
and, for each, reads that one message: it is dead-lettered if it is still
waiting, unheld and expired. An entry is a hint, checked against the store,
so one left by an aborted batch, a message taken since or a deleted queue
costs a read and nothing else. A held message (delivered, leased, backing
off) is left to whoever holds it: when it comes back, the network finds it
expired (rule 8).

The heap is memory only. After a restart, ``catch_up`` rebuilds it from the
durable queues' waiting messages, ``CATCH_UP_BUDGET`` records per operation
between other work: one pass over the waiting messages (not history) per
restart, never one per sweep.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from contextlib import closing
from functools import partial

from msgboard.engine.writer import Batch, Timer, Writer
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Message, Section, now_us

#: Sweeps are due on multiples of this many µs (0.1 s).
TICK = 100_000
#: Most entries one sweep handles (each a read and a dead letter), and most
#: records one catch-up step reads; the rest go on in the next operation, so
#: that a mass expiry does not hold the writer.
SWEEP_BUDGET = 1_000
CATCH_UP_BUDGET = 10_000
#: What visiting a queue costs a catch-up step, in records (a lookup, its
#: counts, a seek): at most 1,000 queues per operation, a few ms of the
#: writer, so that Posts right after a restart of 100,000 queues wait little.
VISIT_COST = 10

#: Dead-letters one expired waiting message (``Overflow.expired``).
Expire = Callable[[Batch, Txn, QueueInfo, Message], None]


class Expiry:
    """The expiry index of one board and its sweep timer (writer thread)."""

    def __init__(
        self,
        writer: Writer,
        held: Callable[[str], dict[int, object]],
        expire: Expire,
        settle: Callable[[Batch], None],
    ) -> None:
        self._writer = writer
        self._held = held
        self._expire = expire
        self._settle = settle
        self._heap: list[tuple[int, str, int]] = []
        #: The time (µs) the timer is armed for (0: none), and the timer.
        self._armed = 0
        self._timer: Timer | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, queue: str, m: Message) -> None:
        """Indexes a stored waiting message that has an expiry."""
        heapq.heappush(self._heap, (m.expires_at, queue, m.seq))
        if not self._armed or m.expires_at < self._armed - TICK:
            self._arm(m.expires_at)

    def _arm(self, expires_at: int) -> None:
        due = -(-expires_at // TICK) * TICK  # rounded up to the tick
        if self._timer is not None:
            self._timer.cancel()
        self._armed = due
        deadline = time.monotonic() + max(0, due - now_us()) / 1e6
        self._timer = self._writer.at(deadline, self.sweep)

    def sweep(self, b: Batch) -> None:
        """Dead-letters the waiting messages whose expiry has passed."""
        if self._timer is not None:
            self._timer.cancel()  # a no-op for the timer running this
        self._timer, self._armed = None, 0
        heap, now = self._heap, b.now
        expire = self._expire
        budget = SWEEP_BUDGET
        popped: list[tuple[int, str, int]] = []
        b.undo(partial(self._unpop, popped))  # a group that reruns sweeps again
        while heap and heap[0][0] <= now and budget > 0:
            entry = heapq.heappop(heap)
            popped.append(entry)
            _, queue, seq = entry
            budget -= 1
            found = b.lookup(queue)
            if found is None:
                continue
            txn, info = found
            if seq in self._held(queue):
                continue
            m = txn.fetch(queue, seq)
            if m is not None and m.section is Section.UNPROCESSED and m.expired(now):
                expire(b, txn, info, m)
        self._settle(b)
        if heap:
            self._arm(now if budget <= 0 else heap[0][0])

    def _unpop(self, popped: list[tuple[int, str, int]]) -> None:
        for entry in popped:
            heapq.heappush(self._heap, entry)
        if popped:
            self._arm(popped[0][0])

    def catch_up(self, b: Batch, queues: list[str], at: int = 0, start: int = 1) -> None:
        """Indexes the durable queues' waiting messages that have an expiry
        (after a restart), ``CATCH_UP_BUDGET`` records per operation, from seq
        ``start`` of ``queues[at]`` on. Visiting a queue costs ``VISIT_COST``
        from the budget too, so that a board of 100,000 queues is not
        visited in one operation: the board serves while the catch-up goes
        on. Each step reads at least one record or finishes a queue."""
        budget = CATCH_UP_BUDGET
        read = 0
        while at < len(queues):
            name = queues[at]
            budget -= VISIT_COST
            found = b.lookup(name)
            if found is not None and found[0].counts(name).unprocessed:
                txn, _ = found
                with closing(txn.scan(name, Section.UNPROCESSED, start)) as rows:
                    for m in rows:
                        if budget <= 0 and read:
                            self._writer.submit(
                                partial(self.catch_up, queues=queues, at=at, start=m.seq)
                            )
                            return
                        budget -= 1
                        read += 1
                        if m.expires_at:
                            self.add(name, m)
            at, start = at + 1, 1
            if budget <= 0 and at < len(queues):
                self._writer.submit(partial(self.catch_up, queues=queues, at=at))
                return
