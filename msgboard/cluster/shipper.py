"""The primary's side of the log: ``Shipper`` hands each committed entry to
the standbys' streams.

The store calls ``logged(index, entry)`` on the writer thread after each
logged commit (``Log.logged``). The shipper keeps the latest entries in
memory (``RING_BYTES`` of them at most, counted in entry bytes), so a
standby that keeps up is served without a read of LMDB, and wakes the
streams on the event loop, once per commit and only while a standby is
connected. A standby further behind is served from the log in LMDB
(``Board.entries``, on a worker thread); one more than ``--log-limit``
entries behind is told so (``read`` answers None: it must be seeded again),
even where the ring still holds what it needs.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from msgboard.engine import Board

#: Entry bytes kept in memory for the streams (the last entry always).
RING_BYTES = 32 << 20
#: About the most entry bytes in one response (one entry more at most).
BATCH_BYTES = 1 << 20


class Shipper:
    """Entries for the standbys' streams of ``board``'s log."""

    def __init__(self, board: Board) -> None:
        self._board = board
        self._ring: OrderedDict[int, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Event] = set()
        self._streams = 0

    def logged(self, index: int, entry: bytes) -> None:
        """The store's ``Log.logged``: one more committed entry. Writer thread."""
        with self._lock:
            ring = self._ring
            ring[index] = entry
            self._bytes += len(entry)
            while self._bytes > RING_BYTES and len(ring) > 1:
                self._bytes -= len(ring.popitem(last=False)[1])
            loop = self._loop if self._streams else None
        if loop is not None:
            loop.call_soon_threadsafe(self._wake)

    def held(self) -> tuple[int, int]:
        """The entries kept in memory, and their bytes."""
        with self._lock:
            return len(self._ring), self._bytes

    def _wake(self) -> None:
        for e in self._waiting:
            e.set()

    async def read(self, start: int) -> list[bytes] | None:
        """The committed entries from ``start`` on, at most about
        ``BATCH_BYTES``; [] if there is none yet; None if ``start`` is more
        than the log's limit behind its last (the log has dropped it)."""
        oplog = self._board.log
        if oplog is not None and start <= oplog.last - oplog.limit:
            return None
        out: list[bytes] = []
        size = 0
        with self._lock:
            entry = self._ring.get(start)
            while entry is not None and size < BATCH_BYTES:
                out.append(entry)
                size += len(entry)
                entry = self._ring.get(start + len(out))
        if out:
            return out
        if oplog is None or start > oplog.last:
            return []
        return await asyncio.to_thread(self._board.entries, start, BATCH_BYTES)

    def attach(self) -> asyncio.Event:
        """A stream starts (on the event loop): the event set at each
        commit; clear it before each ``read``."""
        e = asyncio.Event()
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._streams += 1
        self._waiting.add(e)
        return e

    def detach(self, e: asyncio.Event) -> None:
        self._waiting.discard(e)
        with self._lock:
            self._streams -= 1
