"""The one place lmdb errors become store errors: ``Guard``, a context
manager around every LMDB call of the durable store (``durable.py``,
``txn.py``), and ``translate``, its table.

``lmdb.MapFullError`` is MapFull (grow and run the transaction again); a
disk that refuses a write is StoreFull; a data file LMDB will not open is
DataFileDamaged; a damaged page or entry met while serving (MDB_CORRUPTED,
MDB_PAGE_NOTFOUND, MDB_PAGE_FULL, and MDB_BAD_TXN after one of them) is
StoreDamaged, DATA_LOSS, naming the queue the call was on; any other lmdb
error is StoreError.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from types import TracebackType

import lmdb

from msgboard.errors import DataFileDamaged, MsgboardError, StoreDamaged, StoreError, StoreFull
from msgboard.lmdbstore.store import MapFull

log = logging.getLogger("msgboard.store")


#: LMDB's words for a damaged page or entry met while reading or writing.
DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError, lmdb.PageFullError)


def translate(e: lmdb.Error, queue: str = "") -> MsgboardError:
    """The store error an lmdb error stands for; ``queue``: the queue the
    failing call was on."""
    if isinstance(e, lmdb.MapFullError):
        return MapFull(f"LMDB map full: {e}")
    if isinstance(e, lmdb.DiskError) or getattr(e, "code", 0) == errno.ENOSPC:
        return StoreFull(f"disk full: the disk refused a write: {e}")
    if isinstance(e, DAMAGE):
        log.error("DATA_LOSS: LMDB met damage%s: %s", f" in queue {queue!r}" if queue else "", e)
        return StoreDamaged(f"LMDB met a damaged page: {e}; msgboard check DIR names it", queue)
    if isinstance(e, lmdb.InvalidError):
        return DataFileDamaged(f"LMDB: {e}; check it with msgboard check, restore a snapshot")
    return StoreError(f"LMDB: {e}")


class Guard:
    """Translates lmdb errors into store errors, at this one boundary; first
    calls ``on_error`` (which aborts the transaction: a failed LMDB write
    leaves the transaction unusable). ``queue``: the queue the calls under
    it are on, set by the transaction as it goes, named in StoreDamaged."""

    __slots__ = ("_on_error", "queue")

    def __init__(self, on_error: Callable[[], None] | None = None) -> None:
        self._on_error = on_error
        self.queue = ""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, lmdb.Error):
            if self._on_error is not None:
                self._on_error()
            raise translate(exc, self.queue) from exc
