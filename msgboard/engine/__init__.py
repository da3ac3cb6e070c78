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
from msgboard.engine.events import BOARD_STOPPING
from msgboard.engine.limits import Limits
from msgboard.engine.network import Traffic
from msgboard.engine.selectors import Acked
from msgboard.lmdbstore.snapshot import SnapshotInfo

__all__ = [
    "BOARD_STOPPING",
    "Acked",
    "Board",
    "BoardStats",
    "Limits",
    "Page",
    "QueueStats",
    "QueueView",
    "SelectorView",
    "SnapshotInfo",
    "Start",
    "Traffic",
]
