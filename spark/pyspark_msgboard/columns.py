"""Message records to Arrow columns, in bulk: the data source's hot path.

``batch(keys, payloads, queue, section)`` turns a run of one queue
section's records (their LMDB keys and checked payloads, each a
``msgboard.v1.Message``) into one record batch of ARROW, with as little
Python per record as it can:

- **one parse per batch**: the payloads, framed as the repeated field of a
  wrapper message (``Batch { repeated Row rows = 1; }``), parse in one upb
  call. ``Row`` is ``msgboard.v1.Message`` built from its own descriptor
  with two fields read as repeated ``bytes``, same wire bytes: ``headers``
  (no map per record) and ``tuple`` (no Python object per field: making
  one costs about 0.5 µs);
- **a column per list comprehension** over the parsed rows, or numpy over
  the keys (``seq``) and the times;
- **the tuple's fields and the header entries decoded with numpy**: each
  field's bytes are one tuple-field message with one member of its oneof,
  so its first byte names the kind, a float is the 8 bytes after it, an int
  or bool a varint, a string or bytes a length and the bytes; a header
  entry is its key then its value, each a length and the bytes (field
  numbers and types come from the descriptors, not from here). A batch
  with one in any other shape (unknown or two members, an entry written
  value first, a key written twice, bad UTF-8) is decoded by upb instead,
  one by one, with the same result (``tests/test_spark_columns.py``).

Times outside what a timestamp holds are clamped (``clamp``); header maps
come out sorted by key, so the same snapshot exports to the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from msgboard.errors import RecordDamaged
from msgboard.lmdbstore.layout import KEY
from msgboard.v1 import board_pb2 as pb

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_UTC = pa.timestamp("us", tz="UTC")
#: A tuple field: its kind and the one value column of that kind.
_VALUE_ARROW = pa.struct(
    [
        pa.field("type", pa.string(), False),
        pa.field("bool", pa.bool_()),
        pa.field("int", pa.int64()),
        pa.field("float", pa.float64()),
        pa.field("string", pa.string()),
        pa.field("bytes", pa.binary()),
    ]
)
#: One row per message, both sections of every durable queue, as Arrow:
#: what the data source's read() yields (Spark checks it against
#: ``spark_schema()``, ``tests/test_spark_columns.py`` that they agree).
#: Written in pyarrow, not derived from Spark's types, so that a night
#: without Spark imports neither pyspark nor pandas.
ARROW = pa.schema(
    [
        pa.field("queue", pa.string(), False),
        #: The queue's id: a queue deleted and made again under its name
        #: has a new one (a new generation), its seqs starting again at 1.
        pa.field("queue_id", pa.int64(), False),
        pa.field("seq", pa.int64(), False),
        pa.field("section", pa.string(), False),
        pa.field("address", pa.string(), False),
        pa.field("priority", pa.int64(), False),
        pa.field(
            "headers",
            pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), False)),
            False,
        ),
        pa.field("reply_to", pa.string(), False),
        pa.field("expires_at", _UTC),
        pa.field("tuple", pa.list_(pa.field("element", _VALUE_ARROW, False)), False),
        pa.field("content_type", pa.string(), False),
        pa.field("body", pa.binary(), False),
        pa.field("posted_at", _UTC, False),
        pa.field("processed_at", _UTC),
        pa.field("delivery_count", pa.int32(), False),
        #: How a history message left, as the board recorded it: taken,
        #: acked, moved, dead_lettered, expired or dropped; null while it
        #: waits, or for a record written before exits were recorded.
        pa.field("exit", pa.string()),
        #: Why (expired, rejected, max-deliveries, unmatched, max-hops,
        #: delete, trimmed, "bounce: no room in reply_to"); null: none given.
        pa.field("exit_reason", pa.string()),
        #: The queue it went to (moved, dead-lettered, expired); null: none.
        pa.field("exit_queue", pa.string()),
        #: The selector that took it (moved, dropped or dead-lettered by
        #: one, or acked from a consumer's lease on one); null: none.
        pa.field("exit_selector", pa.string()),
        #: Moved: the seq it has in ``exit_queue`` (the row to follow it
        #: to); null when not moved, or moved by a board before it was
        #: recorded. A dataset's files written before these two columns
        #: lack them: read them with the dataset's schema (``export.load``
        #: does), and they are null there.
        pa.field("exit_seq", pa.int64()),
    ]
)
_TYPES = {n: ARROW.field(n).type for n in ("headers", "tuple", "posted_at")}
#: The value columns of a tuple field, named as the wire's kinds.
_KINDS = [f.name for f in _VALUE_ARROW if f.name != "type"]


def spark_schema() -> StructType:
    """ARROW as Spark's types (the data source's schema; pyspark imported
    here, on first use)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: StructType = from_arrow_schema(ARROW)
    return schema


#: The range of times Spark, Arrow and Python's datetime all hold, in µs
#: since the epoch: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z.
MIN_US = -62_135_596_800_000_000
MAX_US = 253_402_300_799_999_999


def clamp(us: int) -> int:
    """A stored time outside ``MIN_US..MAX_US`` (the board refuses such an
    ``expires_at`` since; older boards took one, say nanoseconds passed by
    mistake) as the nearest time a timestamp column can hold."""
    return min(max(us, MIN_US), MAX_US)


def _batch_type() -> Any:
    """The message class ``Batch { repeated Row rows = 1; }`` (module
    docstring), in a descriptor pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    row = descriptor_pb2.DescriptorProto()
    pb.Message.DESCRIPTOR.CopyToProto(row)
    row.name = "Row"
    del row.nested_type[:]  # HeadersEntry: the headers are read as bytes
    for f in row.field:
        if f.name in ("tuple", "headers"):
            f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            f.ClearField("type_name")
    batch = descriptor_pb2.DescriptorProto(name="Batch")
    batch.field.add(
        name="rows",
        number=1,
        label=FieldDescriptor.LABEL_REPEATED,
        type=FieldDescriptor.TYPE_MESSAGE,
        type_name=".msgboard.spark.Row",
    )
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: Any) -> None:  # board.proto after what it imports
        if file.name not in added:
            added.add(file.name)
            for dep in file.dependencies:
                add(dep)
            proto = descriptor_pb2.FileDescriptorProto()
            file.CopyToProto(proto)
            pool.Add(proto)

    add(pb.DESCRIPTOR)
    file = descriptor_pb2.FileDescriptorProto(
        name="msgboard/spark/batch.proto",
        package="msgboard.spark",
        syntax="proto3",
        dependency=[pb.DESCRIPTOR.name],
    )
    file.message_type.extend([row, batch])
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("msgboard.spark.Batch"))


_Batch = _batch_type()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: The tag and length that frame a payload of n bytes as one ``rows``
#: entry (field 1, length-delimited), for n below 2^14.
_FRAMES = [b"\x0a" + _varint(n) for n in range(1 << 14)]


def _frame(n: int) -> bytes:
    return _FRAMES[n] if n < 1 << 14 else b"\x0a" + _varint(n)


#: A record's key (``layout.KEY``: qid u32, seq u64, big-endian) as numpy
#: reads a run of them.
KEYS = np.dtype([("qid", ">u4"), ("seq", ">u8")])
assert KEYS.itemsize == KEY.size
#: Seconds beyond which a time is clamped anyway (so that µs never overflow).
_SECONDS = (MIN_US // 1_000_000 - 1, MAX_US // 1_000_000 + 1)


def batch(keys: list[bytes], payloads: list[bytes], queue: str, section: str) -> pa.RecordBatch:
    """The records stored under ``keys`` (qid + seq), their checked
    ``payloads``, as one record batch of ARROW. RecordDamaged naming the
    first payload that does not parse."""
    n = len(keys)
    try:
        rows = list(_Batch.FromString(b"".join([_frame(len(p)) + p for p in payloads])).rows)
        # upb checks the UTF-8 of the tuple's and headers' strings only here
        tuples, headers = _tuples(rows), _headers(rows)
    except DecodeError:
        _damaged(keys, payloads, queue)
        raise
    stamp = _TYPES["posted_at"]
    parsed = np.frombuffer(b"".join(keys), KEYS)
    seqs = parsed["seq"].astype(np.int64)
    columns = {
        "queue": pa.array([queue] * n, pa.string()),
        "queue_id": pa.array(parsed["qid"].astype(np.int64), pa.int64()),
        "seq": pa.array(seqs, pa.int64()),
        "section": pa.array([section] * n, pa.string()),
        "address": pa.array([m.address for m in rows], pa.string()),
        "priority": pa.array([m.priority for m in rows], pa.int64()),
        "headers": headers,
        "reply_to": pa.array([m.reply_to for m in rows], pa.string()),
        "expires_at": _optional_time(rows, "expires_at"),
        "tuple": tuples,
        "content_type": pa.array([m.content_type for m in rows], pa.string()),
        "body": pa.array([m.body for m in rows], pa.binary()),
        "posted_at": pa.array(_micros([m.posted_at for m in rows]), stamp),
        "processed_at": _optional_time(rows, "processed_at"),
        "delivery_count": pa.array([m.delivery_count for m in rows], pa.int32()),
        **_exits(rows),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW], schema=ARROW)


def _damaged(keys: list[bytes], payloads: list[bytes], queue: str) -> None:
    """RecordDamaged naming the first payload that does not parse."""
    for key, payload in zip(keys, payloads, strict=True):
        try:
            pb.Message.FromString(payload)
        except DecodeError as e:
            seq = int(np.frombuffer(key, KEYS)["seq"][0])
            raise RecordDamaged(queue, seq, str(e) or "undecodable") from None


def _micros(stamps: list[Any]) -> Any:
    """µs since the epoch of Timestamp messages, clamped to MIN_US..MAX_US."""
    seconds = np.clip(np.array([t.seconds for t in stamps], np.int64), *_SECONDS)
    nanos = np.array([t.nanos for t in stamps], np.int64)
    return np.clip(seconds * 1_000_000 + nanos // 1000, MIN_US, MAX_US)


def _optional_time(rows: list[Any], name: str) -> pa.Array:
    """The column of a Timestamp field that may be absent: null where it is
    absent or zero ("not set" to the board)."""
    present = [m.HasField(name) for m in rows]
    stamp = _TYPES["posted_at"]
    if not any(present):
        return pa.nulls(len(rows), stamp)
    us = np.zeros(len(rows), np.int64)
    us[np.array(present, bool)] = _micros(
        [getattr(m, name) for m, p in zip(rows, present, strict=True) if p]
    )
    return pa.array(us, stamp, mask=us == 0)


#: ExitKind numbers as the ``exit`` column says them (EXIT_KIND_ACKED: acked).
EXIT_NAMES: dict[int, str | None] = {
    v.number: v.name.removeprefix("EXIT_KIND_").lower() for v in pb.ExitKind.DESCRIPTOR.values
}
EXIT_NAMES[pb.EXIT_KIND_UNSPECIFIED] = None


def _exits(rows: list[Any]) -> dict[str, pa.Array]:
    """The ``exit`` columns (kind, reason, queue, selector, seq): null where
    a row has no exit (waiting, or written before exits), and any of the
    others null where it is empty (0 for the seq)."""
    n = len(rows)
    present = [m.HasField("exit") for m in rows]
    if not any(present):
        nulls = pa.nulls(n, pa.string())
        return {
            "exit": nulls,
            "exit_reason": nulls,
            "exit_queue": nulls,
            "exit_selector": nulls,
            "exit_seq": pa.nulls(n, pa.int64()),
        }
    how = [m.exit if p else None for m, p in zip(rows, present, strict=True)]
    return {
        "exit": pa.array([EXIT_NAMES.get(e.kind) if e else None for e in how], pa.string()),
        "exit_reason": pa.array([(e.reason or None) if e else None for e in how], pa.string()),
        "exit_queue": pa.array([(e.queue or None) if e else None for e in how], pa.string()),
        "exit_selector": pa.array([(e.selector or None) if e else None for e in how], pa.string()),
        "exit_seq": pa.array([(e.seq or None) if e else None for e in how], pa.int64()),
    }


_ENTRY = pb.Message.HeadersEntry.DESCRIPTOR
#: The tags of a header entry's key and value (length-delimited).
_KEY_TAG = _ENTRY.fields_by_name["key"].number << 3 | 2
_VALUE_TAG = _ENTRY.fields_by_name["value"].number << 3 | 2


def _headers(rows: list[Any]) -> pa.Array:
    """The headers column, each map sorted by key, a key written twice
    keeping its last value (as a map does)."""
    maps = [m.headers for m in rows]
    counts = np.fromiter(map(len, maps), np.int32, len(maps))
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    entries = [e for h in maps for e in h]
    try:
        headers = sorted_map(pa.array(offsets), *_entries_bulk(entries))
    except _Shape:
        headers = None
    return _headers_each(maps) if headers is None else headers


def sorted_map(offsets: pa.Array, keys: pa.Array, values: pa.Array) -> pa.Array | None:
    """The headers column of map entries (``offsets`` into ``keys`` and
    ``values``, in the order written), each map sorted by key; None if a
    map has a key twice (the map keeps its last value: upb's path)."""
    counts = np.diff(np.asarray(offsets))
    if (counts > 1).any():
        rows_of = pa.array(np.repeat(np.arange(len(counts)), counts))
        order = pc.sort_indices(
            pa.table({"row": rows_of, "key": keys}),
            sort_keys=[("row", "ascending"), ("key", "ascending")],
        )
        keys, values, rows_of = keys.take(order), values.take(order), rows_of.take(order)
        twice = pc.and_(pc.equal(keys[1:], keys[:-1]), pc.equal(rows_of[1:], rows_of[:-1]))
        if pc.any(twice).as_py():
            return None
    return pa.MapArray.from_arrays(offsets, keys, values, type=_TYPES["headers"])


def _entries_bulk(entries: list[bytes]) -> tuple[pa.Array, pa.Array]:
    """Keys and values of header entries, each the bytes of a map entry
    (key, then value), with numpy; _Shape if one is written otherwise."""
    buf, starts, lengths = _joined(entries)
    ends = starts + lengths
    if (lengths < 4).any() or (buf[starts] != _KEY_TAG).any():
        raise _Shape
    key_size, key_prefix = _varints(buf, starts + 1)
    key_at = starts + 1 + key_prefix
    value_tag = key_at + key_size.astype(np.int64)
    if (value_tag + 2 > ends).any() or (buf[value_tag] != _VALUE_TAG).any():
        raise _Shape
    value_size, value_prefix = _varints(buf, value_tag + 1)
    value_at = value_tag + 1 + value_prefix
    if (value_at + value_size.astype(np.int64) != ends).any():
        raise _Shape
    return _slices(buf, key_at, key_size, pa.string()), _slices(
        buf, value_at, value_size, pa.string()
    )


def _headers_each(maps: list[Any]) -> pa.Array:
    """The headers column, each entry parsed by upb."""
    parse = pb.Message.HeadersEntry.FromString
    offsets, keys, values = [0], [], []
    for h in maps:
        merged = {e.key: e.value for e in map(parse, h)}
        ks = sorted(merged)
        keys += ks
        values += [merged[k] for k in ks]
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=_TYPES["headers"],
    )


def _joined(parts: list[bytes]) -> tuple[Any, Any, Any]:
    """``parts`` as one numpy byte buffer (with room to read a varint past
    its end), and each part's start and length in it."""
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    buf = np.frombuffer(b"".join(parts) + bytes(11), np.uint8)
    starts = np.zeros(len(parts), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return buf, starts, lengths


def _slices(buf: Any, starts: Any, lengths: Any, arrow: pa.DataType) -> pa.Array:
    """A string or binary array of the bytes at ``starts`` of ``lengths``;
    _Shape for a string that is not UTF-8 (upb would refuse it)."""
    lengths = lengths.astype(np.int64)
    if lengths.sum() >= 2**31:
        raise _Shape
    offsets = np.zeros(len(starts) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    data = pa.py_buffer(buf[index].tobytes())
    out = pa.Array.from_buffers(arrow, len(starts), [None, pa.py_buffer(offsets), data])
    try:
        out.validate(full=True)
    except pa.ArrowInvalid:
        raise _Shape from None
    return out


#: The members of Value's oneof by field number: (kind, wire type).
_WIRE = {
    FieldDescriptor.TYPE_ENUM: 0,
    FieldDescriptor.TYPE_BOOL: 0,
    FieldDescriptor.TYPE_SINT64: 0,
    FieldDescriptor.TYPE_DOUBLE: 1,
    FieldDescriptor.TYPE_STRING: 2,
    FieldDescriptor.TYPE_BYTES: 2,
}
_FIELD = pb.Message.DESCRIPTOR.fields_by_name["tuple"].message_type
assert _FIELD is not None
#: A tuple field's message class (``msgboard.v1`` names it), found by the field.
Value: Any = message_factory.GetMessageClass(_FIELD)
_MEMBERS = Value.DESCRIPTOR.oneofs_by_name["kind"].fields
#: A Value's first byte (tag) -> index into _NAMES; -1: not one this reads.
_TAGS = np.full(256, -1, np.int8)
_NAMES = [f.name for f in _MEMBERS]
for _i, _f in enumerate(_MEMBERS):
    if _f.type in _WIRE and _f.number < 16:
        _TAGS[_f.number << 3 | _WIRE[_f.type]] = _i
_ZIGZAG = {f.name: f.type == FieldDescriptor.TYPE_SINT64 for f in _MEMBERS}


class _Shape(Exception):
    """A tuple field this bulk decoder does not read (upb does)."""


def _tuples(rows: list[Any]) -> pa.Array:
    """The tuple column."""
    tuples = [m.tuple for m in rows]
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum([len(t) for t in tuples], out=offsets[1:])
    fields = [v for t in tuples for v in t]
    try:
        columns = _fields_bulk(fields)
    except _Shape:
        columns = _fields_each(fields)
    values = pa.StructArray.from_arrays(columns, fields=list(_VALUE_ARROW))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=_TYPES["tuple"])


def _fields_bulk(fields: list[bytes]) -> list[pa.Array]:
    """The value columns of tuple fields, each the bytes of one Value, with
    numpy; _Shape if one is not a single member in its plain encoding."""
    count = len(fields)
    buf, starts, lengths = _joined(fields)
    kind = np.where(lengths > 0, _TAGS[buf[starts]], _NAMES.index("null"))
    if (kind < 0).any():
        raise _Shape
    null = np.flatnonzero((kind == _NAMES.index("null")) & (lengths > 0))
    if len(null) and (_varints(buf, starts[null] + 1)[1] != lengths[null] - 1).any():
        raise _Shape  # a null with more after it
    names = np.array(_NAMES, object)[kind]
    columns = [pa.array(names, pa.string())]
    for name in _KINDS:
        at = np.flatnonzero(kind == _NAMES.index(name))
        arrow = _VALUE_ARROW.field(name).type
        if not len(at):
            columns.append(pa.nulls(count, arrow))
            continue
        column = _column(name, arrow, buf, starts[at] + 1, lengths[at] - 1)
        if len(at) < count:
            where = np.full(count, -1, np.int64)
            where[at] = np.arange(len(at))
            column = column.take(pa.array(where, mask=where < 0))
        columns.append(column)
    return columns


def _varints(buf: Any, starts: Any) -> tuple[Any, Any]:
    """The varints at ``starts``: values (uint64) and lengths in bytes."""
    window = buf[starts[:, None] + np.arange(10)]
    ends = window < 0x80
    if not ends.any(axis=1).all():
        raise _Shape
    sizes = ends.argmax(axis=1) + 1
    keep = np.arange(10) < sizes[:, None]
    digits = np.where(keep, window & 0x7F, 0).astype(np.uint64)
    values = (digits << (7 * np.arange(10, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)
    return values, sizes


def _column(name: str, arrow: pa.DataType, buf: Any, starts: Any, sizes: Any) -> pa.Array:
    """The values of one kind, read at ``starts`` (just past the tag), each
    ``sizes`` bytes long up to the field's end."""
    if pa.types.is_floating(arrow):
        if (sizes != 8).any():
            raise _Shape
        return pa.array(buf[starts[:, None] + np.arange(8)].copy().view("<f8").ravel(), arrow)
    if pa.types.is_binary(arrow) or pa.types.is_string(arrow):
        lengths, prefix = _varints(buf, starts)
        if (prefix + lengths.astype(np.int64) != sizes).any():
            raise _Shape
        return _slices(buf, starts + prefix, lengths, arrow)
    values, used = _varints(buf, starts)
    if (used != sizes).any():
        raise _Shape
    if pa.types.is_boolean(arrow):
        return pa.array(values != 0, arrow)
    if _ZIGZAG[name]:
        values = (values >> np.uint64(1)) ^ (np.uint64(0) - (values & np.uint64(1)))
    return pa.array(values.view(np.int64), arrow)


def _fields_each(fields: list[bytes]) -> list[pa.Array]:
    """The value columns of tuple fields, each parsed by upb."""
    values = [Value.FromString(v) for v in fields]
    kinds = [v.WhichOneof("kind") or "null" for v in values]
    columns = [pa.array(kinds, pa.string())]
    count = len(values)
    for name in _KINDS:
        arrow = _VALUE_ARROW.field(name).type
        at = [i for i, k in enumerate(kinds) if k == name]
        if not at:
            columns.append(pa.nulls(count, arrow))
            continue
        where = np.full(count, -1, np.int64)
        where[at] = np.arange(len(at))
        got = pa.array([getattr(values[i], name) for i in at], arrow)
        columns.append(got.take(pa.array(where, mask=where < 0)))
    return columns
