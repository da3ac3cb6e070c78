"""The one place lmdb errors become store errors: ``Guard``, a context
manager around every LMDB call of the durable store (``durable.py``,
``txn.py``), and ``translate``, its table.

``lmdb.MapFullError`` is MapFull (grow and run the transaction again); a
disk that refuses a write is StoreFull; a damaged or foreign data file is
DataFileDamaged; any other lmdb error is StoreError.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from types import TracebackType

import lmdb

from msgboard.errors import DataFileDamaged, MsgboardError, StoreError, StoreFull
from msgboard.lmdbstore.store import MapFull


def translate(e: lmdb.Error) -> MsgboardError:
    """The store error an lmdb error stands for."""
    if isinstance(e, lmdb.MapFullError):
        return MapFull(f"LMDB map full: {e}")
    if isinstance(e, lmdb.DiskError) or getattr(e, "code", 0) == errno.ENOSPC:
        return StoreFull(f"disk full: the disk refused a write: {e}")
    if isinstance(e, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return DataFileDamaged(f"LMDB: {e}; check it with msgboard check, restore a snapshot")
    return StoreError(f"LMDB: {e}")


class Guard:
    """Translates lmdb errors into store errors, at this one boundary; first
    calls ``on_error`` (which aborts the transaction: a failed LMDB write
    leaves the transaction unusable)."""

    __slots__ = ("_on_error",)

    def __init__(self, on_error: Callable[[], None] | None = None) -> None:
        self._on_error = on_error

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
            raise translate(exc) from exc
