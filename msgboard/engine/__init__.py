"""The engine: queues, selectors, routing, credit, take/read by pattern,
blocked calls, group commit.

Embeddable with no gRPC: ``Board(path)`` is all a program needs; its calls
answer with the types of ``msgboard.results`` (``QueueView``, ``Page``,
``Start``, ...), imported from there. Where to start reading: ``board.py``
(the face and its parts), ``writer.py`` (one thread, group commits, and the
invariant every change to memory keeps), ``network.py`` (where a message
goes, and the parts of the routing network), ``selectors.py`` (the words
of credit: window, quota, room).
"""

from __future__ import annotations

from msgboard.engine.board import Board
from msgboard.engine.events import BOARD_STOPPING
from msgboard.engine.limits import Limits
from msgboard.engine.traffic import Traffic
from msgboard.engine.writer import Release
from msgboard.lmdbstore.snapshot import SnapshotInfo

__all__ = ["BOARD_STOPPING", "Board", "Limits", "Release", "SnapshotInfo", "Traffic"]
