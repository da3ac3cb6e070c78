"""The engine: queues, take/read by pattern, blocked calls, group commit.

Embeddable with no gRPC: ``Board(path)`` is all a program needs.
"""

from __future__ import annotations

from msgboard.engine.board import (
    Board,
    BoardStats,
    Page,
    QueueStats,
    QueueView,
    SelectorView,
    Start,
)
from msgboard.engine.limits import Limits
from msgboard.engine.network import Traffic
from msgboard.engine.selectors import Acked

__all__ = [
    "Acked",
    "Board",
    "BoardStats",
    "Limits",
    "Page",
    "QueueStats",
    "QueueView",
    "SelectorView",
    "Start",
    "Traffic",
]
