"""The idempotency keys of a DurableStore's transaction: ``keys`` and
``keyends`` (their layout is in ``layout.py``).

A queue holds one message per key. The key is filed (until 0) in the
transaction that appends its message; when the message leaves the queue
(taken with no history kept, trimmed from history) the key gets its end,
``now`` plus the queue's ``dedup_window``, and is filed under that end in
``keyends``, which ``sweep`` reads from its start: the sweep reads only
ended keys, and a lookup is one ``get``. A key whose end has passed but
which the sweep has not reached yet is not held (``held`` compares).
"""

from __future__ import annotations

from typing import Any

import lmdb

from msgboard.lmdbstore.layout import HOLD, U64, key_end


class Dedup:
    """``keys`` and ``keyends`` as seen by one LMDB transaction ``txn``."""

    __slots__ = ("_ends", "_keys", "_txn")

    def __init__(self, txn: lmdb.Transaction[bytes], keys: Any, ends: Any) -> None:
        self._txn, self._keys, self._ends = txn, keys, ends

    def any(self, prefix: bytes) -> bool:
        """Whether the queue of ``prefix`` holds any key (one cursor read)."""
        with self._txn.cursor(self._keys) as cur:
            return cur.set_range(prefix) and cur.key()[:4] == prefix

    def held(self, prefix: bytes, key: str, now: int) -> int:
        """The seq holding ``key`` at ``now``; 0 if none."""
        raw = self._txn.get(prefix + key.encode(), db=self._keys)
        if raw is None:
            return 0
        seq, until = HOLD.unpack(raw)
        return seq if until == 0 or until > now else 0

    def hold(self, prefix: bytes, key: str, seq: int) -> None:
        """Files ``key`` as held by ``seq``, on the board (a post, a
        message given back)."""
        k = prefix + key.encode()
        old = self._txn.replace(k, HOLD.pack(seq, 0), db=self._keys)
        if old is not None:
            until = HOLD.unpack(old)[1]
            if until:
                self._txn.delete(key_end(until, prefix, k[4:]), db=self._ends)

    def left(self, prefix: bytes, key: str, seq: int, now: int, window: int) -> None:
        """``seq``, holding ``key``, left its queue: the key ends after
        ``window`` µs (at once if 0)."""
        k = prefix + key.encode()
        raw = self._txn.get(k, db=self._keys)
        if raw is None or HOLD.unpack(raw)[0] != seq:
            return  # held by another message since, or never filed
        if window <= 0:
            self._txn.delete(k, db=self._keys)
            return
        until = now + window
        self._txn.put(k, HOLD.pack(seq, until), db=self._keys)
        self._txn.put(key_end(until, prefix, k[4:]), b"", db=self._ends)

    def lost(self, prefix: bytes, seq: int, now: int, window: int) -> None:
        """``seq`` left its queue unread (a damaged record dropped): the key
        it holds, found by a walk of the queue's keys, ends as ``left``
        ends it."""
        held = []
        with self._txn.cursor(self._keys) as cur:
            if cur.set_range(prefix):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    if HOLD.unpack(v) == (seq, 0):
                        held.append(bytes(k[4:]).decode())
        for key in held:
            self.left(prefix, key, seq, now, window)

    def drop(self, prefix: bytes) -> None:
        """Removes a deleted queue's keys and their ends."""
        txn = self._txn
        gone = []
        with txn.cursor(self._keys) as cur:
            if cur.set_range(prefix):
                for k, v in cur:
                    if k[:4] != prefix:
                        break
                    gone.append((k, HOLD.unpack(v)[1]))
        for k, until in gone:
            txn.delete(k, db=self._keys)
            if until:
                txn.delete(key_end(until, prefix, k[4:]), db=self._ends)

    def sweep(self, now: int, budget: int) -> tuple[int, int]:
        """Drops up to ``budget`` keys whose end is at or before ``now``;
        returns how many, and when the next one ends (``now`` if the budget
        ran out first, 0 if none is left)."""
        txn = self._txn
        due: list[bytes] = []
        after = 0
        with txn.cursor(self._ends) as cur:
            for k in cur.iternext(values=False):
                until = U64.unpack_from(k)[0]
                if until > now:
                    after = until
                    break
                if len(due) >= budget:
                    after = now
                    break
                due.append(k)
        for k in due:
            until, held = U64.unpack_from(k)[0], k[8:]
            raw = txn.get(held, db=self._keys)
            if raw is not None and HOLD.unpack(raw)[1] == until:
                txn.delete(held, db=self._keys)
            txn.delete(k, db=self._ends)
        return len(due), after
