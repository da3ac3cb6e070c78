"""What the board computes for its answers about queues: a queue's view
(``QueueView``) from its store's counts and the calls waiting on it, the
views of the transient queues, two lists of views merged by name, and a
Stats row (``QueueStats``) from a view and the queue's traffic. The answer
types themselves live in ``msgboard.results``.
"""

from __future__ import annotations

import heapq

from msgboard.engine.events import reserved
from msgboard.engine.traffic import Traffic
from msgboard.lmdbstore import MemoryStore, QueueInfo, Txn
from msgboard.results import QueueStats, QueueView


def view(txn: Txn, info: QueueInfo, waiting: int) -> QueueView:
    """The queue's view in ``txn``, ``waiting`` calls blocked on it."""
    c = txn.counts(info.spec.name)
    return QueueView(
        info.spec, info.created_at, c.unprocessed, c.history, c.next_seq, waiting, c.scheduled
    )


def views(txn: Txn, waiting: dict[str, int]) -> list[QueueView]:
    """Every queue's view in ``txn``, by name; ``waiting``: queue -> calls
    blocked on it."""
    return [view(txn, info, waiting.get(info.spec.name, 0)) for info in txn.queues()]


def transient(memory: MemoryStore, waiting: dict[str, int]) -> list[QueueView]:
    """The transient queues' views, as committed (writer thread), by name.
    ``$sys`` is the board's: listings of the user's queues leave it out."""
    txn = memory.begin()
    try:
        return [
            view(txn, info, waiting.get(info.spec.name, 0))
            for info in txn.queues()
            if not reserved(info.spec.name)
        ]
    finally:
        txn.abort()


def merged(a: list[QueueView], b: list[QueueView]) -> list[QueueView]:
    """Two lists of views in name order, merged (no sort of the lot)."""
    if not b:
        return a
    return list(heapq.merge(a, b, key=lambda v: v.spec.name))


def shown(t: Traffic) -> Traffic:
    """A copy of the counts a Stats row shows (for a read off the writer)."""
    return Traffic(t.posted, t.taken, t.overflowed, t.dead_lettered, t.dropped, t.expired)


def stats(
    v: QueueView, t: Traffic | None, figures: tuple[int, int, int] | None, damaged: int
) -> QueueStats:
    """A Stats row from a queue's view, traffic, (selectors, consumers,
    outstanding) and damaged records met."""
    t = t or Traffic()
    selectors, consumers, out = figures or (0, 0, 0)
    return QueueStats(
        v.spec.name,
        v.spec.transient,
        v.unprocessed,
        v.history,
        v.waiting,
        t.posted,
        t.taken,
        t.overflowed,
        ready=v.unprocessed - out,
        outstanding=out,
        consumers=consumers,
        dropped=t.dropped,
        dead_lettered=t.dead_lettered,
        selectors=selectors,
        expired=t.expired,
        damaged=damaged,
        scheduled=v.scheduled,
    )
