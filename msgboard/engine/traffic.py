"""Each queue's traffic since the board opened: posted, taken, delivered,
acked, dead-lettered... plain integers in the writer's memory.

An operation never adds to them itself: it asks its batch to
(``Batch.count``), and the counts are added once the batch is durable, so
an aborted group counts nothing. The writer keeps the table
(``Writer.traffic``); Stats and the metrics read copies of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(slots=True)
class Traffic:
    """Per-queue counts since the board opened."""

    posted: int = 0
    taken: int = 0
    overflowed: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    expired: int = 0
    #: Handed to a consumer or a Take; acked (a delivery or a lease); given
    #: back to be delivered again (nack, consumer gone, lease ran out).
    delivered: int = 0
    acked: int = 0
    redelivered: int = 0
    #: Posts (and forwarded messages) not stored: their key was held.
    duplicates: int = 0
    #: Messages that left the queue, every way one leaves: taken, acked
    #: (a consumer's or a lease's), moved on by a selector or a move,
    #: dead-lettered, expired, dropped, deleted, purged, trimmed by an
    #: overflow (the console's "out /s").
    left: int = 0
    #: dead_lettered by reason ("expired", "max-deliveries", ...).
    reasons: dict[str, int] = field(default_factory=dict)

    def copy(self) -> Traffic:
        return replace(self, reasons=dict(self.reasons))


def count(table: dict[str, Traffic], queue: str, reason: str, by: dict[str, int]) -> None:
    """Adds ``by`` (field -> how many) to the queue's counts in ``table``;
    ``reason``: one more dead letter for that reason."""
    t = table.get(queue)
    if t is None:
        t = table[queue] = Traffic()
    for k, v in by.items():
        setattr(t, k, getattr(t, k) + v)
    if reason:
        t.reasons[reason] = t.reasons.get(reason, 0) + 1
