"""The engine: queues, take/read by pattern, blocked calls, group commit.

Embeddable with no gRPC: ``Board(path)`` is all a program needs.
"""

from __future__ import annotations

from msgboard.engine.board import Board
from msgboard.engine.limits import Limits
from msgboard.engine.selectors import Acked
from msgboard.engine.traffic import Traffic
from msgboard.results import BoardStats, Page, QueueStats, QueueView, SelectorView, Start

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
