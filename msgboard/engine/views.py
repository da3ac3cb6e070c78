"""What the board answers with: the result types (``QueueView``, ``Page``,
``QueueStats``, ``SelectorView``, ``BoardStats``) and where a Browse page
starts (``Start``), whose home is ``msgboard.results`` (the client imports
them from there), and the functions that build stats rows from a queue's
view and traffic. Plain data: no store, no writer thread.
"""

from __future__ import annotations

import heapq

from msgboard.engine.network import Traffic
from msgboard.results import BoardStats, Page, QueueStats, QueueView, SelectorView, Start

__all__ = ["BoardStats", "Page", "QueueStats", "QueueView", "SelectorView", "Start"]


def _traffic(t: Traffic) -> tuple[int, int, int, int, int, int]:
    return (t.posted, t.taken, t.overflowed, t.dead_lettered, t.dropped, t.expired)


def _stats(
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
    )


def _merged(a: list[QueueView], b: list[QueueView]) -> list[QueueView]:
    """Two lists of views in name order, merged (no sort of the lot)."""
    if not b:
        return a
    return list(heapq.merge(a, b, key=lambda v: v.spec.name))
