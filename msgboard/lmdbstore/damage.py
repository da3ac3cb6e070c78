"""A damaged record found by its seq or by its place, and dropped without
being decoded: the store's half of the DropDamaged call. The record's
index entries cannot be read from damaged bytes; they stay, and are
skipped (logged, counted) when a search meets them, until ``msgboard check
--repair`` rebuilds the index.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import lmdb

from msgboard.errors import FailedPrecondition, NotFound
from msgboard.lmdbstore.layout import DAMAGED, U64, intact
from msgboard.message import Section


def drop(
    txn: lmdb.Transaction[bytes],
    dbs: Iterable[tuple[Section, Any]],
    name: str,
    prefix: bytes,
    seq: int,
    after: bool,
) -> tuple[int, Section]:
    """Deletes queue ``name``'s (``prefix``) damaged record at ``seq``, or
    (``after``) the first damaged one after the good record ``seq``, from
    the first of ``dbs`` (section, sub-database) that has it; the seq its
    key read and its section. Any record of ``$damaged`` may go by seq.
    NotFound, or FailedPrecondition for a record that passes its check."""
    for section, db in dbs:
        with txn.cursor(db) as cur:
            if after:
                if not _after(cur, prefix, seq):
                    continue
            elif not cur.set_key(prefix + U64.pack(seq)):
                continue
            elif name != DAMAGED and intact(cur.key(), cur.value()):
                raise FailedPrecondition(f"queue {name!r} seq {seq}: the record passes its check")
            dropped = U64.unpack_from(cur.key(), 4)[0]
            cur.delete()
            return dropped, section
    where = f"after seq {seq}" if after else f"at seq {seq}"
    raise NotFound(f"queue {name!r}: no damaged record {where}")


def unindex(txn: lmdb.Transaction[bytes], index: Any, prefix: bytes, seq: int) -> None:
    """Removes the ``index`` entries of queue ``prefix``'s unprocessed
    ``seq``, whose record was dropped unread: a walk of the queue's index."""
    want = U64.pack(seq)
    gone = []
    with txn.cursor(index) as cur:
        if cur.set_range(prefix):
            for k, v in cur:  # every duplicate
                if k[:4] != prefix:
                    break
                if bytes(v) == want:
                    gone.append(bytes(k))
    for k in gone:
        txn.delete(k, want, db=index)


def _after(cur: lmdb.Cursor[bytes], prefix: bytes, seq: int) -> bool:
    """Puts ``cur`` on the first damaged record met, walking the queue from
    its start, after the good record ``seq`` (0: before any); False if there
    is none. A walk, not a seek: a damaged key may sit out of order, or
    carry another queue's id between two of this queue's keys (as
    ``layout.walk`` walks over it)."""
    prev = 0
    ok = cur.set_range(prefix)
    while ok:
        k, v = cur.item()
        if k[:4] != prefix:  # another queue's key: the end, or a stray
            if not cur.next() or cur.key()[:4] != prefix:
                return False
            cur.prev()  # back on the stray
        if intact(k, v):
            prev = U64.unpack_from(k, 4)[0]
        elif prev == seq:
            return True
        ok = cur.next()
    return False
