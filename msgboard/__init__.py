"""msgboard: a persistent tuple-space message board (gRPC over LMDB).

Layers, top to bottom: ``msgboard.server`` (gRPC shell) and
``msgboard.client``/``msgboard.cli``; ``msgboard.engine`` (queues, take/read,
waiters, group commit); ``msgboard.associative`` (tuples, templates, address
patterns); ``msgboard.lmdbstore`` (the store contract, LMDB and memory).
"""

from __future__ import annotations

from msgboard.message import Message, Section, Value
from msgboard.spec import OverflowPolicy, QueueSpec

__all__ = ["Message", "OverflowPolicy", "QueueSpec", "Section", "Value"]
__version__ = "0.1.0"
