"""A snapshot read straight from its LMDB file: the message schema, the key
ranges that split it into partitions, and Arrow record batches of messages.

No JVM here: the data source (``source.py``) calls this on the driver to plan
and on each executor to read, and the benchmark calls it for the raw floor.
The layout it reads is the one written down in
``msgboard/lmdbstore/durable.py``; it opens only the sub-databases it needs
(``meta``, ``queues``, ``state``, ``unprocessed``, ``history``) and ignores any
others. A snapshot is opened read-only with no lock file, so it can sit on
read-only shared storage.

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

import contextlib
import itertools
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lmdb
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from msgboard.errors import FailedPrecondition
from msgboard.v1 import board_pb2 as pb

#: The storage schema versions this reader understands (``meta/schema``).
SCHEMAS = (b"1",)
SECTIONS = ("unprocessed", "history")

_QID = struct.Struct(">I")
_KEY = struct.Struct(">IQ")
_SEQ = struct.Struct(">Q")
_STATE = struct.Struct(">QQQ")

VALUE = StructType(
    [
        StructField("type", StringType(), False),
        StructField("bool", BooleanType()),
        StructField("int", LongType()),
        StructField("float", DoubleType()),
        StructField("string", StringType()),
        StructField("bytes", BinaryType()),
    ]
)
#: One row per message, both sections of every durable queue.
SCHEMA = StructType(
    [
        StructField("queue", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("section", StringType(), False),
        StructField("address", StringType(), False),
        StructField("priority", LongType(), False),
        StructField("headers", MapType(StringType(), StringType(), False), False),
        StructField("reply_to", StringType(), False),
        StructField("expires_at", TimestampType()),
        StructField("tuple", ArrayType(VALUE, False), False),
        StructField("content_type", StringType(), False),
        StructField("body", BinaryType(), False),
        StructField("posted_at", TimestampType(), False),
        StructField("processed_at", TimestampType()),
        StructField("delivery_count", IntegerType(), False),
    ]
)
#: What Spark expects read() to yield for SCHEMA, exactly (it checks).
ARROW = to_arrow_schema(SCHEMA, timezone="UTC")
_TYPES = {n: ARROW.field(n).type for n in ("headers", "tuple", "posted_at")}
_VALUE_ARROW = _TYPES["tuple"].value_type
#: The value columns of a tuple field, named as the wire's kinds.
_KINDS = [f.name for f in VALUE.fields if f.name != "type"]


class SnapshotError(FailedPrecondition):
    """The path is not a snapshot this reader can read."""


@dataclass(frozen=True, slots=True)
class Range:
    """The keys of one queue section from seq ``lo`` (inclusive) to ``hi``
    (exclusive; None: to the queue's end)."""

    section: str
    queue: str
    qid: int
    lo: int
    hi: int | None
    #: Rows expected (exact for whole sections, planned for cuts).
    rows: int

    def bounds(self) -> tuple[bytes, bytes | None]:
        """First key and the key past the last (None: no key is past it)."""
        if self.hi is not None:
            return _KEY.pack(self.qid, self.lo), _KEY.pack(self.qid, self.hi)
        end = _QID.pack(self.qid + 1) if self.qid < 0xFFFFFFFF else None
        return _KEY.pack(self.qid, self.lo), end


@contextlib.contextmanager
def opened(path: str) -> Iterator[tuple[lmdb.Environment, dict[str, Any]]]:
    """The snapshot's environment, read-only with no lock file, and its
    sub-databases by name."""
    if not os.path.isfile(os.path.join(path, "data.mdb")):
        raise SnapshotError(f"{path}: no data.mdb here; is it a msgboard snapshot?")
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
    try:
        dbs = {
            name: env.open_db(name.encode(), create=False)
            for name in ("meta", "queues", "state", *SECTIONS)
        }
        with env.begin() as txn:
            schema = txn.get(b"schema", db=dbs["meta"])
        if schema not in SCHEMAS:
            raise SnapshotError(f"{path}: storage schema {schema!r}; this reader reads {SCHEMAS}")
        yield env, dbs
    except lmdb.Error as e:
        raise SnapshotError(f"{path}: {e}") from e
    finally:
        env.close()


@dataclass(frozen=True, slots=True)
class _Section:
    section: str
    queue: str
    qid: int
    rows: int
    first: int
    last: int


def _sections(txn: lmdb.Transaction[bytes], dbs: dict[str, Any]) -> list[_Section]:
    """Every non-empty queue section, in key order, with its exact count."""
    out = []
    queues = []
    for key, value in txn.cursor(db=dbs["queues"]):
        queues.append((json.loads(value)["id"], key.decode()))
    for section in SECTIONS:
        cur = txn.cursor(db=dbs[section])
        for qid, name in sorted(queues):
            state = txn.get(_QID.pack(qid), db=dbs["state"])
            if state is None:
                continue
            _, unprocessed, history = _STATE.unpack(state)
            rows = unprocessed if section == "unprocessed" else history
            prefix = _QID.pack(qid)
            if rows == 0 or not cur.set_range(prefix) or cur.key()[:4] != prefix:
                continue
            first = _SEQ.unpack_from(cur.key(), 4)[0]
            if qid < 0xFFFFFFFF and cur.set_range(_QID.pack(qid + 1)):
                cur.prev()
            else:
                cur.last()
            last = _SEQ.unpack_from(cur.key(), 4)[0]
            out.append(_Section(section, name, qid, rows, first, last))
    return out


def _cuts(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], s: _Section, n: int) -> list[int]:
    """``n - 1`` seqs that cut the section into ``n`` ranges of about equal
    row count."""
    span = s.last - s.first + 1
    if span <= 2 * s.rows:
        return [s.first + span * i // n for i in range(1, n)]
    step = math.ceil(s.rows / n)
    cuts = []
    prefix = _QID.pack(s.qid)
    cur = txn.cursor(db=dbs[s.section])
    cur.set_range(prefix)
    for i, key in enumerate(cur.iternext(values=False)):
        if key[:4] != prefix:
            break
        if i and i % step == 0:
            cuts.append(_SEQ.unpack_from(key, 4)[0])
    return cuts


def plan(path: str, rows_per_part: int = 250_000, parts: int = 0) -> list[list[Range]]:
    """The snapshot's partitions: lists of ranges of about ``rows_per_part``
    rows (or, with ``parts``, of total/parts rows), covering every message
    exactly once. Raises SnapshotError."""
    with opened(path) as (env, dbs), env.begin() as txn:
        sections = _sections(txn, dbs)
        total = sum(s.rows for s in sections)
        target = max(1, math.ceil(total / parts) if parts > 0 else rows_per_part)
        out: list[list[Range]] = []
        small: list[Range] = []
        size = 0
        for s in sections:
            if s.rows <= target:
                if size + s.rows > target and small:
                    out.append(small)
                    small, size = [], 0
                small.append(Range(s.section, s.queue, s.qid, 0, None, s.rows))
                size += s.rows
                continue
            n = math.ceil(s.rows / target)
            edges = [0, *_cuts(txn, dbs, s, n), None]
            for lo, hi in itertools.pairwise(edges):
                assert lo is not None
                out.append([Range(s.section, s.queue, s.qid, lo, hi, s.rows // n)])
        if small:
            out.append(small)
        return out


def read(path: str, ranges: list[Range], batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """The messages in ``ranges`` as record batches of at most
    ``batch_rows`` rows, in the schema ARROW."""
    with opened(path) as (env, dbs), env.begin() as txn:
        for r in ranges:
            cur = txn.cursor(db=dbs[r.section])
            start, end = r.bounds()
            if not cur.set_range(start):
                continue
            batch = _Batch(r.queue, r.section)
            for key, value in cur.iternext():
                if end is not None and key >= end:
                    break
                batch.add(_SEQ.unpack_from(key, 4)[0], value)
                if batch.rows >= batch_rows:
                    yield batch.finish()
                    batch = _Batch(r.queue, r.section)
            if batch.rows:
                yield batch.finish()


def _us(ts: Any) -> int:
    return int(ts.seconds) * 1_000_000 + int(ts.nanos) // 1000


class _Batch:
    """Columns of one record batch, filled record by record."""

    def __init__(self, queue: str, section: str) -> None:
        self.queue = queue
        self.section = section
        self.rows = 0
        self.cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA.fields}
        # Headers and tuples are flattened, with offsets per row.
        self.header_offsets = [0]
        self.keys: list[str] = []
        self.values: list[str] = []
        self.tuple_offsets = [0]
        self.fields: dict[str, list[Any]] = {f.name: [] for f in VALUE.fields}

    def add(self, seq: int, raw: bytes) -> None:
        m = pb.Message.FromString(raw)
        c = self.cols
        c["seq"].append(seq)
        c["address"].append(m.address)
        c["priority"].append(m.priority)
        c["reply_to"].append(m.reply_to)
        c["expires_at"].append(_us(m.expires_at) if m.HasField("expires_at") else None)
        c["content_type"].append(m.content_type)
        c["body"].append(m.body)
        c["posted_at"].append(_us(m.posted_at))
        c["processed_at"].append(_us(m.processed_at) if m.HasField("processed_at") else None)
        c["delivery_count"].append(m.delivery_count)
        if m.headers:
            for k, v in m.headers.items():
                self.keys.append(k)
                self.values.append(v)
        self.header_offsets.append(len(self.keys))
        if m.tuple:
            f = self.fields
            for field in m.tuple:
                kind = field.WhichOneof("kind") or "null"
                f["type"].append(kind)
                for name in _KINDS:
                    f[name].append(None)
                if kind != "null":
                    f[kind][-1] = getattr(field, kind)
        self.tuple_offsets.append(len(self.fields["type"]))
        self.rows += 1

    def finish(self) -> pa.RecordBatch:
        n = self.rows
        c = self.cols
        c["queue"] = [self.queue] * n
        c["section"] = [self.section] * n
        headers = pa.MapArray.from_arrays(
            pa.array(self.header_offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
            type=_TYPES["headers"],
        )
        values = pa.StructArray.from_arrays(
            [pa.array(col, _VALUE_ARROW.field(name).type) for name, col in self.fields.items()],
            fields=list(_VALUE_ARROW),
        )
        tuples = pa.ListArray.from_arrays(
            pa.array(self.tuple_offsets, pa.int32()), values, type=_TYPES["tuple"]
        )
        arrays = []
        for field in ARROW:
            if field.name == "headers":
                arrays.append(headers)
            elif field.name == "tuple":
                arrays.append(tuples)
            else:
                arrays.append(pa.array(c[field.name], field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW)


def raw_scan(path: str) -> int:
    """Walks every message record with a bare cursor and touches its bytes:
    the physical floor a full scan is measured against. Returns the count."""
    n = 0
    with opened(path) as (env, dbs), env.begin() as txn:
        for section in SECTIONS:
            for _ in txn.cursor(db=dbs[section]):
                n += 1
    return n
