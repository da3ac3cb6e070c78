"""What the board answers with: the result types (``QueueView``, ``Page``,
``QueueStats``, ``SelectorView``, ``BoardStats``), where a Browse page starts
(``Start``), and the functions that build stats rows from a queue's view and
traffic. Plain data: no store, no writer thread.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass

from msgboard.engine.network import Traffic
from msgboard.lmdbstore import StoreInfo
from msgboard.message import Message
from msgboard.spec import QueueSpec, SelectorSpec


class Start(enum.Enum):
    """Where a Browse page starts."""

    OLDEST = "oldest"
    LATEST = "latest"
    SEQ = "seq"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue's properties and counts at one moment."""

    spec: QueueSpec
    created_at: int
    unprocessed: int
    history: int
    next_seq: int
    waiting: int


@dataclass(frozen=True, slots=True)
class Page:
    """One Browse page; ``next_seq`` starts the next (0: no more)."""

    messages: list[Message]
    next_seq: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str
    transient: bool
    unprocessed: int
    history: int
    waiting: int
    posted: int
    taken: int
    overflowed: int
    ready: int
    outstanding: int
    consumers: int
    dropped: int
    dead_lettered: int
    selectors: int
    expired: int
    #: Damaged records met (and skipped) since the board started.
    damaged: int = 0


@dataclass(frozen=True, slots=True)
class SelectorView:
    """A selector and its figures at one moment."""

    id: str
    spec: SelectorSpec
    durable: bool
    attached: bool
    outstanding: int
    delivered: int
    dropped: int


@dataclass(frozen=True, slots=True)
class BoardStats:
    store: StoreInfo
    commits: int
    committed_ops: int
    queues: list[QueueStats]


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
