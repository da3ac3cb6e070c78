"""The operation log of a replicated board: what each group commit did to
the LMDB sub-databases, as one entry under an increasing index.

Physical, not logical: an entry is the list of puts and deletes the
transaction made, key and value bytes as LMDB took them, recorded where
``DurableTxn`` writes (``Recorder``, a stand-in for py-lmdb's transaction).
A standby that applies them holds the same keys and values as the primary,
byte for byte, whatever the engine's memory (consumers, holds, timers)
decided: replaying "post M to Q" would need that memory, these bytes do
not. The cost: an entry also carries the index, ``times`` and ``state``
writes, and a processed message's whole record (docs/plans/replication.md
has the figures).

An entry (all integers big-endian)::

    index u64 | epoch u64 | count u32 | op * count | crc32c u32
    op = kind u8 | db u8 | klen u16 | vlen u32 | key | value
    kind: PUT (db[key] = value; a duplicate more in ``index``),
          DEL (db[key] and every duplicate of it), DELDUP (one duplicate)

``db`` is the sub-database's position in ``layout.NAMES``. ``oplog`` and
the log's keys in ``meta`` are never recorded. ``epoch`` is 0 with static
roles; leadership through etcd will set it.

Retention (``Log``): the log keeps at least ``keep`` entries, and the
entries a standby still needs (``pin``: the lowest index every standby has
acknowledged, kept itself since a standby's Hello names it), but never
more than ``limit``: a standby further behind must be seeded again.

Identity: a standby that follows names its last entry by (index, epoch,
CRC32C), ``identity``; the primary follows it on only if its own entry at
that index is the same (docs/replication.md). Entries' epochs never go
down along a log: ``apply`` refuses one below the entry before it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import google_crc32c
import lmdb

from msgboard.errors import StoreError
from msgboard.lmdbstore.layout import (
    LOG_FIRST_KEY,
    LOG_LAST,
    LOG_LAST_KEY,
    NAMES,
    U64,
    Dbs,
    dupsort,
)

PUT, DEL, DELDUP = 1, 2, 3
HEAD = struct.Struct(">QQI")
OP = struct.Struct(">BBHI")
CRC = struct.Struct(">I")

#: One recorded operation: kind, the sub-database's position, key, value.
Op = tuple[int, int, bytes, bytes]


class LogGap(StoreError):
    """An entry does not follow the last one applied (or is damaged): the
    standby must be seeded again."""


@dataclass
class Log:
    """A board's log settings and position. ``logged`` is called on the
    writer's thread after each logged commit with (index, entry); ``pin``
    is set by whoever ships the log (None: no standby holds entries back)."""

    keep: int = 10_000
    limit: int = 1_000_000
    epoch: int = 0
    logged: Callable[[int, bytes], object] | None = None
    pin: int | None = None
    #: A cluster's commit fence: the epoch of the term in which this board
    #: may commit now, or it raises (NoLease): nothing is committed.
    fence: Callable[[], int] | None = None
    #: The last index written (or applied), kept current by the store.
    last: int = 0


class Recorder:
    """py-lmdb's write transaction ``txn`` as ``DurableTxn`` uses it, which
    records each effective put and delete on ``ops``."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: Dbs) -> None:
        self._txn = txn
        self.ops: list[Op] = []
        self._pos = {id(getattr(dbs, name)): i for i, name in enumerate(NAMES)}
        self._dup = {i for i, name in enumerate(NAMES) if dupsort(name)}

    def get(self, key: bytes, default: Any = None, db: Any = None) -> Any:
        return self._txn.get(key, default, db=db)

    def put(self, key: bytes, value: bytes, db: Any = None, **kw: Any) -> bool:
        done = self._txn.put(key, value, db=db, **kw)
        if done:
            self.ops.append((PUT, self._pos[id(db)], key, value))
        return done

    def replace(self, key: bytes, value: bytes, db: Any = None) -> Any:
        old = self._txn.replace(key, value, db=db)
        self.ops.append((PUT, self._pos[id(db)], key, value))
        return old

    def pop(self, key: bytes, db: Any = None) -> Any:
        old = self._txn.pop(key, db=db)
        if old is not None:
            self.ops.append((DEL, self._pos[id(db)], key, b""))
        return old

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        done = self._txn.delete(key, value, db=db)
        if done:
            pos = self._pos[id(db)]
            if value and pos in self._dup:
                self.ops.append((DELDUP, pos, key, value))
            else:
                self.ops.append((DEL, pos, key, b""))
        return done

    def cursor(self, db: Any = None) -> RecordingCursor:
        pos = self._pos[id(db)]
        return RecordingCursor(self._txn.cursor(db), self.ops, pos, pos in self._dup)

    def stat(self, db: Any) -> Any:
        return self._txn.stat(db)

    def id(self) -> int:
        return self._txn.id()

    def commit(self) -> None:
        self._txn.commit()

    def abort(self) -> None:
        self._txn.abort()

    @property
    def raw(self) -> lmdb.Transaction[bytes]:
        return self._txn


class RecordingCursor:
    """A cursor of a ``Recorder``: reads pass through, deletes are recorded."""

    def __init__(self, cur: lmdb.Cursor[bytes], ops: list[Op], pos: int, dup: bool) -> None:
        self._cur = cur
        self._ops = ops
        self._pos = pos
        self._dup = dup

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __enter__(self) -> RecordingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()

    def close(self) -> None:
        self._cur.close()

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._cur)

    def delete(self, dupdata: bool = False) -> bool:
        key, value = self._cur.key(), self._cur.value()
        done = self._cur.delete(dupdata=dupdata)
        if done:
            if self._dup and not dupdata:
                self._ops.append((DELDUP, self._pos, key, value))
            else:
                self._ops.append((DEL, self._pos, key, b""))
        return done


def encode(index: int, epoch: int, ops: list[Op]) -> bytes:
    """An entry's bytes."""
    parts = [HEAD.pack(index, epoch, len(ops))]
    extend, pack = parts.extend, OP.pack
    for kind, db, key, value in ops:
        extend((pack(kind, db, len(key), len(value)), key, value))
    body = b"".join(parts)
    return body + CRC.pack(google_crc32c.value(body))


def index_of(entry: bytes) -> int:
    """The index an entry carries."""
    index: int = HEAD.unpack_from(entry)[0]
    return index


def identity(entry: bytes) -> tuple[int, int, int]:
    """(index, epoch, crc) of an entry: what tells two logs' entries at one
    index apart (a standby's Hello carries its last entry's). Not checked:
    ``decode`` checks."""
    index, epoch, _ = HEAD.unpack_from(entry)
    crc: int = CRC.unpack_from(entry, len(entry) - CRC.size)[0]
    return index, epoch, crc


def decode(entry: bytes) -> tuple[int, int, list[Op]]:
    """(index, epoch, ops) of an entry; LogGap if it fails its check."""
    if len(entry) < HEAD.size + CRC.size:
        raise LogGap(f"a log entry of {len(entry)} bytes is too short")
    body, (crc,) = entry[: -CRC.size], CRC.unpack_from(entry, len(entry) - CRC.size)
    if google_crc32c.value(body) != crc:
        raise LogGap("a log entry fails its checksum")
    index, epoch, count = HEAD.unpack_from(body)
    at, ops = HEAD.size, []
    for _ in range(count):
        kind, db, klen, vlen = OP.unpack_from(body, at)
        at += OP.size
        ops.append((kind, db, body[at : at + klen], body[at + klen : at + klen + vlen]))
        at += klen + vlen
    return index, epoch, ops


def bounds(txn: lmdb.Transaction[bytes], dbs: Dbs) -> tuple[int, int]:
    """(first, last) index of the log as ``txn`` sees it; (0, 0) if it was
    never written. first > last: no entry kept."""
    raw = txn.get(LOG_LAST_KEY, db=dbs.meta)
    if raw is None:
        return 0, 0
    last = LOG_LAST.unpack(raw)[0]
    raw = txn.get(LOG_FIRST_KEY, db=dbs.meta)
    return (last + 1 if raw is None else U64.unpack(raw)[0]), last


def append(txn: lmdb.Transaction[bytes], dbs: Dbs, ops: list[Op], log: Log) -> tuple[int, bytes]:
    """Writes the entry of ``ops`` under the next index, in ``txn`` (the raw
    transaction, not the recorder), and trims the log's front."""
    first, last = bounds(txn, dbs)
    index = last + 1
    entry = encode(index, log.epoch, ops)
    _store(txn, dbs, index, log.epoch, entry, first)
    keep_from = index - log.keep + 1
    if log.pin is not None:  # the pinned entry too: a Hello names it
        keep_from = min(keep_from, log.pin)
    _trim(txn, dbs, max(keep_from, index - log.limit + 1, first or index))
    return index, entry


def _store(
    txn: lmdb.Transaction[bytes], dbs: Dbs, index: int, epoch: int, entry: bytes, first: int
) -> None:
    txn.put(U64.pack(index), entry, db=dbs.oplog, append=True)
    txn.put(LOG_LAST_KEY, LOG_LAST.pack(index, epoch), db=dbs.meta)
    if not first or first > index:
        txn.put(LOG_FIRST_KEY, U64.pack(index), db=dbs.meta)


def _trim(txn: lmdb.Transaction[bytes], dbs: Dbs, first: int) -> None:
    """Drops the entries before ``first``."""
    dropped = False
    with txn.cursor(dbs.oplog) as cur:
        while cur.first() and U64.unpack(cur.key())[0] < first:
            cur.delete()
            dropped = True
    if dropped:
        txn.put(LOG_FIRST_KEY, U64.pack(first), db=dbs.meta)


def apply(txn: lmdb.Transaction[bytes], dbs: Dbs, entry: bytes, log: Log) -> int:
    """Applies ``entry`` in ``txn`` (a standby's) and stores it as the
    primary did; returns its index. LogGap if it does not follow the last
    entry applied."""
    index, epoch, ops = decode(entry)
    first, last = bounds(txn, dbs)
    if index != last + 1:
        raise LogGap(f"log entry {index} does not follow {last}, the last applied")
    raw = txn.get(LOG_LAST_KEY, db=dbs.meta)
    was = LOG_LAST.unpack(raw)[1] if raw is not None else 0
    if epoch < was:
        raise LogGap(f"log entry {index} has epoch {epoch}, below {was} of the entry before")
    handles = [getattr(dbs, name) for name in NAMES]
    for kind, pos, key, value in ops:
        db = handles[pos]
        if kind == PUT:
            txn.put(key, value, db=db)
        elif kind == DEL:
            txn.delete(key, db=db)
        elif kind == DELDUP:
            txn.delete(key, value, db=db)
        else:
            raise LogGap(f"log entry {index}: unknown operation {kind}")
    _store(txn, dbs, index, epoch, entry, first)
    _trim(txn, dbs, max(index - log.keep + 1, first or index))
    return index


def entries(txn: lmdb.Transaction[bytes], dbs: Dbs, start: int, budget: int) -> list[bytes]:
    """The entries from index ``start`` on, up to about ``budget`` bytes
    (at least one if there is one)."""
    out: list[bytes] = []
    with txn.cursor(dbs.oplog) as cur:
        if not cur.set_key(U64.pack(start)):
            return out
        size = 0
        for _, value in cur:
            out.append(value)
            size += len(value)
            if size >= budget:
                break
    return out


def hole(txn: lmdb.Transaction[bytes], dbs: Dbs) -> None:
    """Opened without its log: drops the entries and leaves the next index
    as a hole, so that no standby continues across unlogged writes (nor
    starts from index 1 on a board that wrote before it logged)."""
    first, last = bounds(txn, dbs)
    if last and first > last:
        return  # a hole already
    _trim(txn, dbs, last + 2)
    txn.put(LOG_LAST_KEY, LOG_LAST.pack(last + 1, 0), db=dbs.meta)
    txn.put(LOG_FIRST_KEY, U64.pack(last + 2), db=dbs.meta)
