"""A queue's first message posted at or after a time, through the sparse
``times`` index (``layout.py``: one entry per second in which the queue's
posted second changed, holding the first seq posted in it) and a binary
search by seq within that second: a few cursor reads, never a walk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lmdb

from msgboard.errors import RecordDamaged
from msgboard.lmdbstore.cache import QueueState
from msgboard.lmdbstore.layout import KEY, MAX_U64, U64, decode
from msgboard.message import Message, Section

_US = 1_000_000


def seq_at(
    txn: lmdb.Transaction[bytes],
    times: Any,
    sections: Iterable[tuple[Any, Section]],
    met: Callable[[RecordDamaged], None],
    name: str,
    q: QueueState,
    time_us: int,
) -> int | None:
    """The seq of queue ``name``'s (``q``) first message, in either of
    ``sections`` (sub-database, section), posted at or after ``time_us``;
    None if there is none. Damaged records met are handed to ``met`` and
    passed over."""
    second = min(max(time_us, 0) // _US, MAX_U64)
    cur = txn.cursor(times)
    if not cur.set_range(KEY.pack(q.qid, second)) or cur.key()[:4] != q.prefix:
        return None  # nothing was posted in that second or later
    lo = U64.unpack(cur.value())[0]
    if U64.unpack_from(cur.key(), 4)[0] > second:
        hi = lo  # lo is the first seq posted after that second
    elif cur.next() and cur.key()[:4] == q.prefix:
        hi = U64.unpack(cur.value())[0]
    else:
        hi = q.next_seq
    # Binary search within [lo, hi]: posted_at rises with seq.
    first = _first_from(txn, sections, met, name, q.prefix)
    while lo < hi:
        mid = (lo + hi) // 2
        found = first(mid)
        if found is None or found.posted_at >= time_us:
            hi = mid
        else:
            lo = found.seq + 1
    found = first(lo)
    return None if found is None else found.seq


def _first_from(
    txn: lmdb.Transaction[bytes],
    sections: Iterable[tuple[Any, Section]],
    met: Callable[[RecordDamaged], None],
    name: str,
    prefix: bytes,
) -> Callable[[int], Message | None]:
    """A function giving the first message (either section) at or after a seq."""
    curs = [(txn.cursor(db), section) for db, section in sections]

    def first(seq: int) -> Message | None:
        while True:
            key = prefix + U64.pack(seq)
            best: tuple[bytes, bytes, Section] | None = None
            for cur, section in curs:
                if cur.set_range(key):
                    k = cur.key()
                    if k[:4] == prefix and (best is None or k < best[0]):
                        best = (k, cur.value(), section)
            if best is None:
                return None
            k, raw, section = best
            seq = U64.unpack_from(k, 4)[0]
            try:
                return decode(k, raw, name, seq, section)
            except RecordDamaged as e:
                met(e)
                seq += 1  # the next one, as if it were not there

    return first
