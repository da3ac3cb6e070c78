"""The primary's side of the log: ``Shipper`` hands each committed entry to
the standbys' streams.

The store calls ``logged(index, entry)`` on the writer thread after each
logged commit (``Log.logged``). The shipper keeps the latest entries in
memory (``RING`` of them), so a standby that keeps up is served without a
read of LMDB, and wakes the streams on the event loop, once per commit and
only while a standby is connected. A standby further behind is served from
the log in LMDB (``Board.entries``, on a worker thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from msgboard.engine import Board

#: Entries kept in memory for the streams.
RING = 4096
#: About the most entry bytes in one response (one entry more at most).
BATCH_BYTES = 1 << 20


class Shipper:
    """Entries for the standbys' streams of ``board``'s log."""

    def __init__(self, board: Board) -> None:
        self._board = board
        self._ring: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Event] = set()
        self._streams = 0

    def logged(self, index: int, entry: bytes) -> None:
        """The store's ``Log.logged``: one more committed entry. Writer thread."""
        with self._lock:
            self._ring[index] = entry
            if len(self._ring) > RING:
                self._ring.popitem(last=False)
            loop = self._loop if self._streams else None
        if loop is not None:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for e in self._waiting:
            e.set()

    async def read(self, start: int) -> list[bytes]:
        """The committed entries from ``start`` on, at most about
        ``BATCH_BYTES``; [] if there is none yet."""
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
        oplog = self._board.log
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
