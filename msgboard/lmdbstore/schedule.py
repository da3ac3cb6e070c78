"""The scheduled messages of a DurableStore's transaction: ``scheduled``
and ``due`` (their layout is in ``layout.py``).

A message posted with a ``not_before`` still to come gets its seq at once
and is kept in ``scheduled``, filed in ``due`` under its time; takes,
reads and selectors read ``unprocessed`` and never see it. ``release``
moves its record, bytes unchanged, to ``unprocessed``; ``due`` lists what
is due from the start of ``due``, so a board that restarts finds what is
due without reading the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lmdb

from msgboard.lmdbstore.layout import DUE, KEY, U64


class Schedule:
    """``scheduled`` and ``due`` as seen by one LMDB transaction ``txn``."""

    __slots__ = ("_due", "_scheduled", "_txn")

    def __init__(self, txn: lmdb.Transaction[bytes], scheduled: Any, due: Any) -> None:
        self._txn, self._scheduled, self._due = txn, scheduled, due

    def put(self, key: bytes, raw: bytes, not_before: int) -> None:
        """Keeps the record ``raw`` under ``key`` (qid, seq) until ``not_before``."""
        self._txn.put(key, raw, db=self._scheduled)
        self._txn.put(U64.pack(not_before) + key, b"", db=self._due)

    def get(self, key: bytes) -> bytes | None:
        raw: bytes | None = self._txn.get(key, db=self._scheduled)
        return raw

    def pop(self, key: bytes, not_before: int) -> bytes | None:
        """Removes a scheduled record and its ``due`` entry; its bytes, or
        None if it is not there."""
        raw: bytes | None = self._txn.pop(key, db=self._scheduled)
        self._txn.delete(U64.pack(not_before) + key, db=self._due)
        return raw

    def due(self, now: int, budget: int) -> tuple[list[tuple[int, int, int]], int]:
        """Up to ``budget`` (time, qid, seq) whose time is at or before
        ``now``, in time order, then seq; and when the next one is due
        (``now`` if the budget ran out first, 0 if none is left)."""
        out: list[tuple[int, int, int]] = []
        with self._txn.cursor(self._due) as cur:
            for k in cur.iternext(values=False):
                at, qid, seq = DUE.unpack(k)
                if at > now:
                    return out, at
                if len(out) >= budget:
                    return out, now
                out.append((at, qid, seq))
        return out, 0

    def first(self) -> int:
        """When the first scheduled message is due; 0 if none is."""
        with self._txn.cursor(self._due) as cur:
            return U64.unpack_from(cur.key())[0] if cur.first() else 0

    def drop(self, prefix: bytes, when: Callable[[bytes, bytes], int]) -> None:
        """Removes a deleted queue's scheduled records and their ``due``
        entries; ``when(key, record)`` reads a record's time (0 if it
        cannot: its entry is left, and dropped when it comes due)."""
        txn = self._txn
        gone = []
        with txn.cursor(self._scheduled) as cur:
            if cur.set_range(prefix):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    gone.append((k, when(k, v)))
        for k, at in gone:
            txn.delete(k, db=self._scheduled)
            if at:
                txn.delete(U64.pack(at) + k, db=self._due)

    def unfile(self, key: bytes) -> None:
        """Removes the ``due`` entries of ``key`` (qid, seq) whose record
        went unread, its time unknown: a walk of ``due``."""
        with self._txn.cursor(self._due) as cur:
            gone = [k for k in cur.iternext(values=False) if k[8:] == key]
        for k in gone:
            self._txn.delete(k, db=self._due)

    def stale(self, qid: int, seq: int, at: int) -> None:
        """Drops a ``due`` entry whose record is gone."""
        self._txn.delete(U64.pack(at) + KEY.pack(qid, seq), db=self._due)
