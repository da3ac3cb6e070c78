"""The keys and records of ``durable.py``'s layout, as code: the key
structs, decoding a record, walking a queue's keys with a cursor, the one
place lmdb errors become store errors (``_Guard``), and a queue's counters
(``_Queue``). Shared by ``DurableStore`` and ``DurableTxn``; the layout
itself is drawn in ``durable.py``'s docstring.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable, Iterator
from types import TracebackType

import lmdb

from msgboard.codec import decode_record
from msgboard.errors import (
    DataFileDamaged,
    MsgboardError,
    RecordDamaged,
    StoreError,
    StoreFull,
)
from msgboard.lmdbstore import record
from msgboard.lmdbstore.store import MapFull, QueueInfo
from msgboard.message import Message, Section

_QID = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_KEY = struct.Struct(">IQ")
_STATE = struct.Struct(">QQQ")
_LAST = b"\xff" * 8  # sorts after every seq of a queue
_MAX_U64 = 2**64 - 1
_US = 1_000_000

_UNPROCESSED = Section.UNPROCESSED
_HISTORY = Section.HISTORY


def _translate(e: lmdb.Error) -> MsgboardError:
    if isinstance(e, lmdb.MapFullError):
        return MapFull(f"LMDB map full: {e}")
    if isinstance(e, lmdb.DiskError) or getattr(e, "code", 0) == errno.ENOSPC:
        return StoreFull(f"disk full: the disk refused a write: {e}")
    if isinstance(e, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return DataFileDamaged(f"LMDB: {e}; check it with msgboard check, restore a snapshot")
    return StoreError(f"LMDB: {e}")


def _decode(key: bytes, raw: bytes, name: str, seq: int, section: Section) -> Message:
    """The message stored as ``raw`` under ``key``; RecordDamaged if it fails
    its check."""
    try:
        return decode_record(record.unseal(key, raw), name, seq, section)
    except record.Damaged as e:
        raise RecordDamaged(name, seq, str(e)) from None
    except Exception as e:  # a payload that passed its checksum but does not parse
        raise RecordDamaged(name, seq, f"undecodable: {e}") from None


class _Guard:
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
            raise _translate(exc) from exc


def _seek_last(cur: lmdb.Cursor[bytes], key: bytes) -> bool:
    """Positions ``cur`` on the last key <= ``key``; False if there is none."""
    if cur.set_range(key):
        return cur.key() == key or cur.prev()
    return cur.last()


def _walk(
    cur: lmdb.Cursor[bytes], prefix: bytes, key: bytes, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Yields the items from ``key`` on (down, if ``reverse``) while their keys
    start with ``prefix``."""
    if not (_seek_last(cur, key) if reverse else cur.set_range(key)):
        return
    step = cur.prev if reverse else cur.next
    k, v = cur.item()
    while k[:4] == prefix:
        yield k, v
        if not step():
            return
        k, v = cur.item()


class _Queue:
    """A queue's counters: the committed ones in the store's cache, a private
    copy in a transaction that writes the queue."""

    __slots__ = (
        "history",
        "info",
        "known",
        "last_posted",
        "last_second",
        "next_seq",
        "prefix",
        "qid",
        "unprocessed",
    )

    def __init__(
        self, qid: int, info: QueueInfo, next_seq: int, unprocessed: int, history: int
    ) -> None:
        self.qid = qid
        self.prefix = _QID.pack(qid)
        self.info = info
        self.next_seq = next_seq
        self.unprocessed = unprocessed
        self.history = history
        #: False until last_posted and last_second are read from the records.
        self.known = False
        self.last_posted = 0
        self.last_second = -1

    def copy(self) -> _Queue:
        q = _Queue(self.qid, self.info, self.next_seq, self.unprocessed, self.history)
        q.known, q.last_posted, q.last_second = self.known, self.last_posted, self.last_second
        return q
