"""A DurableTxn's queue as its readers see it, through the transaction's
LMDB handles: ``QueueReader``, the unprocessed section and the index of
one queue for ``Search``; ``seq_at``, the first seq posted at a time."""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import ExitStack
from typing import Any

import lmdb

from msgboard.errors import RecordDamaged
from msgboard.lmdbstore.cache import QueueState
from msgboard.lmdbstore.guard import Guard
from msgboard.lmdbstore.layout import KEY, MAX_U64, U64, decode
from msgboard.lmdbstore.owned import Owned
from msgboard.lmdbstore.search import Reader
from msgboard.message import Message, Section


class QueueReader(Reader):
    """One LMDB queue's unprocessed section and index, for ``Search``:
    ``txn`` and its ``index`` and ``unprocessed`` sub-databases, the
    transaction's ``guard`` and ``strays`` (``owned.py``: the cursors of its
    generators are ``Owned``), ``met`` for a damaged record, ``stale`` for an
    index entry pointing at no waiting record (index damage: the name and
    the seq), ``scan`` to walk the section from a seq."""

    def __init__(
        self,
        txn: lmdb.Transaction[bytes],
        index: Any,
        unprocessed: Any,
        guard: Guard,
        strays: list[object],
        met: Callable[[RecordDamaged], None],
        stale: Callable[[str, int], None],
        scan: Callable[[bytes], Generator[Message, None, None]],
        name: str,
        prefix: bytes,
        count: int,
    ) -> None:
        self._txn, self._index, self._db = txn, index, unprocessed
        self._guard, self._met, self._stale, self._scan = guard, met, stale, scan
        self._strays = strays
        self._name, self._prefix = name, prefix
        self.unprocessed = count

    def count(self, key: bytes) -> int:
        with self._guard, self._txn.cursor(self._index) as cur:
            return cur.count() if cur.set_key(self._prefix + key) else 0

    def keys(self, prefix: bytes) -> Generator[tuple[bytes, int], None, None]:
        full = self._prefix + prefix
        with self._guard, Owned(self._txn.cursor(self._index), self._strays) as cur:
            if not cur.set_range(full):
                return
            while True:
                key = cur.key()
                if not key.startswith(full):
                    return
                yield key[4:], cur.count()
                if not cur.next_nodup():
                    return

    def seqs(self, key: bytes, start: int) -> Generator[int, None, None]:
        unpack = U64.unpack
        with self._guard, Owned(self._txn.cursor(self._index), self._strays) as cur:
            if cur.set_range_dup(self._prefix + key, U64.pack(min(start, MAX_U64))):
                for v in cur.iternext_dup(keys=False):
                    yield unpack(v)[0]

    def get(self, seq: int) -> Message | None:
        key = self._prefix + U64.pack(seq)
        with self._guard:
            raw = self._txn.get(key, db=self._db)
        if raw is None:  # the index said it waits: index damage
            self._stale(self._name, seq)
            return None
        try:
            return decode(key, raw, self._name, seq, Section.UNPROCESSED)
        except RecordDamaged as e:
            self._met(e)
            return None

    def scan(self, start: int) -> Generator[Message, None, None]:
        return self._scan(self._prefix + U64.pack(min(start, MAX_U64)))


_US = 1_000_000


def seq_at(
    txn: lmdb.Transaction[bytes],
    times: Any,
    sections: list[tuple[Any, Section]],
    met: Callable[[RecordDamaged], None],
    name: str,
    q: QueueState,
    time_us: int,
) -> int | None:
    """The seq of queue ``q``'s first message (in ``sections``) posted at
    or after ``time_us``: a few cursor reads in ``times``, then a binary
    search between two of its entries."""
    second = min(max(time_us, 0) // _US, MAX_U64)
    with ExitStack() as opened:
        cur = opened.enter_context(txn.cursor(times))
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
        curs = [(opened.enter_context(txn.cursor(db)), section) for db, section in sections]
        first = _first_from(curs, met, name, q.prefix)
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
    curs: list[tuple[lmdb.Cursor[bytes], Section]],
    met: Callable[[RecordDamaged], None],
    name: str,
    prefix: bytes,
) -> Callable[[int], Message | None]:
    """A function giving the first message (in the sections ``curs`` are
    cursors of, which its caller opened and closes) at or after a seq."""

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
