"""A snapshot read straight from its LMDB file: the message schema, the key
ranges that split it into partitions, and Arrow record batches of messages.

No JVM here: the data source (``source.py``) calls this on the driver to plan
and on each executor to read, and the benchmark calls it for the raw floor.
The layout it reads is the one written down, and declared in code, in
``msgboard/lmdbstore/layout.py``, whose key structs and schema versions it
imports; it opens only the sub-databases it needs
(``meta``, ``queues``, ``state``, ``unprocessed``, ``history``) and ignores any
others. A snapshot is opened read-only with no lock file, so it can sit on
read-only shared storage, after its data file is checked against its meta
pages (``msgboard.lmdbstore.datafile``: a truncated copy is refused, not a
SIGBUS). From schema 3 every record is checked against its CRC32C
(``msgboard.lmdbstore.record``); a damaged one fails the read with
RecordDamaged naming queue and seq (``msgboard check`` lists them all):
a history export does not silently leave messages out.

Partitions are key ranges balanced on row count, planned without a scan of
the messages: ``state`` gives each queue's exact count per section and two
cursor reads give its first and last seq. Queue sections smaller than the
target share partitions; a larger one is cut into seq ranges of equal width
when its seqs are at least half dense (so no range holds more than twice the
target), and at every n-th key, found by walking that section's keys, when
they are sparser (a few stragglers far behind a long tail). Either way the
ranges of a section tile all of its keys: every message is read exactly once.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import lmdb
import pyarrow as pa

from msgboard.errors import RecordDamaged
from msgboard.lmdbstore import record
from msgboard.lmdbstore.layout import KEY, QID, STATE, U64, is_sealed
from pyspark_msgboard import columns, compiled
from pyspark_msgboard.columns import ARROW, MAX_US, MIN_US, clamp, spark_schema
from pyspark_msgboard.snapfile import SECTIONS, Range, SnapshotError, check, opened

__all__ = [  # where they were
    "ARROW",
    "MAX_US",
    "MIN_US",
    "SECTIONS",
    "Range",
    "SnapshotError",
    "check",
    "clamp",
    "opened",
    "spark_schema",
]


@dataclass(frozen=True, slots=True)
class _Section:
    section: str
    queue: str
    qid: int
    rows: int
    first: int
    last: int
    #: The seq the section is read from (0: its first).
    lo: int = 0


def _sections(
    txn: lmdb.Transaction[bytes], dbs: dict[str, Any], since: dict[str, int] | None = None
) -> list[_Section]:
    """Every non-empty queue section, in key order, with its exact count;
    with ``since``, the history of those queues only from that seq on (its
    count then estimated from the seqs it spans)."""
    out = []
    queues = []
    for key, value in txn.cursor(db=dbs["queues"]):
        queues.append((json.loads(value)["id"], key.decode()))
    for section in SECTIONS:
        cur = txn.cursor(db=dbs[section])
        for qid, name in sorted(queues):
            state = txn.get(QID.pack(qid), db=dbs["state"])
            if state is None:
                continue
            _, unprocessed, history = STATE.unpack(state)
            rows = unprocessed if section == "unprocessed" else history
            prefix = QID.pack(qid)
            if rows == 0 or not cur.set_range(prefix) or cur.key()[:4] != prefix:
                continue
            first = U64.unpack_from(cur.key(), 4)[0]
            if qid < 0xFFFFFFFF and cur.set_range(QID.pack(qid + 1)):
                cur.prev()
            else:
                cur.last()
            last = U64.unpack_from(cur.key(), 4)[0]
            lo = (since or {}).get(name, 0) if section == "history" else 0
            if lo > first:
                if lo > last:
                    continue
                cur.set_range(KEY.pack(qid, lo))
                seq = U64.unpack_from(cur.key(), 4)[0]
                rows = max(1, rows * (last - seq + 1) // (last - first + 1))
                first = seq
            else:
                lo = 0
            out.append(_Section(section, name, qid, rows, first, last, lo))
    return out


def _cuts(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], s: _Section, n: int) -> list[int]:
    """``n - 1`` seqs that cut the section into ``n`` ranges of about equal
    row count."""
    span = s.last - s.first + 1
    if span <= 2 * s.rows:
        return [s.first + span * i // n for i in range(1, n)]
    step = math.ceil(s.rows / n)
    cuts = []
    prefix = QID.pack(s.qid)
    cur = txn.cursor(db=dbs[s.section])
    cur.set_range(KEY.pack(s.qid, s.first))
    for i, key in enumerate(cur.iternext(values=False)):
        if key[:4] != prefix:
            break
        if i and i % step == 0:
            cuts.append(U64.unpack_from(key, 4)[0])
    return cuts


def plan(
    path: str, rows_per_part: int = 250_000, parts: int = 0, since: dict[str, int] | None = None
) -> list[list[Range]]:
    """The snapshot's partitions: lists of ranges of about ``rows_per_part``
    rows (or, with ``parts``, of total/parts rows), covering every message
    exactly once; one empty partition for a snapshot with no messages (Spark
    wants at least one). ``since``: read the history of these queues only
    from this seq on (an export's earlier runs have the rest). Raises
    SnapshotError."""
    with opened(path) as (env, dbs), env.begin() as txn:
        sections = _sections(txn, dbs, since)
        target = _target(sum(s.rows for s in sections), rows_per_part, parts)
        pieces: list[Range] = []
        for s in sections:
            if s.rows <= target:
                pieces.append(Range(s.section, s.queue, s.qid, s.lo, None, s.rows))
                continue
            n = math.ceil(s.rows / target)
            edges = [s.lo, *_cuts(txn, dbs, s, n), None]
            for lo, hi in itertools.pairwise(edges):
                assert lo is not None
                pieces.append(Range(s.section, s.queue, s.qid, lo, hi, s.rows // n))
        return _packed(pieces, target)


def _target(total: int, rows_per_part: int, parts: int) -> int:
    return max(1, math.ceil(total / parts) if parts > 0 else rows_per_part)


def _packed(pieces: list[Range], target: int) -> list[list[Range]]:
    """Ranges in order as partitions of about ``target`` rows; one empty
    partition for none (Spark wants at least one)."""
    out: list[list[Range]] = []
    small: list[Range] = []
    size = 0
    for r in pieces:
        if size + r.rows > target and small:
            out.append(small)
            small, size = [], 0
        small.append(r)
        size += r.rows
    if small:
        out.append(small)
    return out or [[]]


def pack(ranges: list[Range], rows_per_part: int = 250_000, parts: int = 0) -> list[list[Range]]:
    """Partitions for the explicit ``ranges`` of a night's changes
    (``changes.py``: runs of seqs that are all there, so a range of ``rows``
    rows is cut exactly at every ``rows_per_part``-th seq), as ``plan``
    makes them for whole sections; one empty partition for none."""
    target = _target(sum(r.rows for r in ranges), rows_per_part, parts)
    pieces = []
    for r in ranges:
        assert r.hi is not None and r.hi - r.lo == r.rows, r
        for lo in range(r.lo, r.hi, target):
            hi = min(lo + target, r.hi)
            pieces.append(Range(r.section, r.queue, r.qid, lo, hi, hi - lo))
    return _packed(pieces, target)


#: The decoders of a batch of records, by the data source's ``decoder``
#: option: the same rows either way (``tests/test_spark_columns.py``).
DECODERS: dict[str, Callable[[list[bytes], list[bytes], str, str], pa.RecordBatch]] = {
    "compiled": compiled.batch,
    "protobuf": columns.batch,
}


def read(
    path: str, ranges: list[Range], batch_rows: int = 8192, decoder: str = "compiled"
) -> Iterator[pa.RecordBatch]:
    """The messages in ``ranges`` as record batches of at most
    ``batch_rows`` rows, in the schema ARROW, decoded by ``DECODERS[decoder]``."""
    decode = DECODERS[decoder]
    with opened(path) as (env, dbs), env.begin() as txn:
        sealed = is_sealed(txn.get(b"schema", db=dbs["meta"]) or b"0")
        for r in ranges:
            cur = txn.cursor(db=dbs[r.section])
            start, end = r.bounds()
            if not cur.set_range(start):
                continue
            items = cur.iternext()
            while True:
                batch = _decode(items, end, batch_rows, r.queue, r.section, sealed, decode)
                if batch is None:
                    break
                yield batch
                if batch.num_rows < batch_rows:
                    break


def _decode(
    items: Iterator[tuple[bytes, bytes]],
    end: bytes | None,
    most: int,
    queue: str,
    section: str,
    sealed: bool = True,
    decode: Callable[[list[bytes], list[bytes], str, str], pa.RecordBatch] = compiled.batch,
) -> pa.RecordBatch | None:
    """Decodes up to ``most`` records from ``items`` (stopping at the key
    ``end``) into one record batch (``decode``); None if there were
    none. ``sealed``: the records carry their checksum (schema 3 on)."""
    unseal = record.unseal
    keys: list[bytes] = []
    payloads: list[bytes] = []
    for key, raw in items:
        if end is not None and key >= end:
            break
        try:
            payloads.append(unseal(key, raw) if sealed else raw)
        except record.Damaged as e:
            raise RecordDamaged(queue, U64.unpack_from(key, 4)[0], str(e)) from None
        keys.append(key)
        if len(keys) == most:
            break
    return decode(keys, payloads, queue, section) if keys else None


def raw_scan(path: str) -> int:
    """Walks every message record with a bare cursor and touches its bytes:
    the physical floor a full scan is measured against. Returns the count."""
    n = 0
    with opened(path) as (env, dbs), env.begin() as txn:
        for section in SECTIONS:
            for _ in txn.cursor(db=dbs[section]):
                n += 1
    return n
