"""ptars (Rust protobuf -> Arrow) adapted to the data source's schema
(columns.ARROW): queue/seq/section from the keys, tuple 'type' from the
oneof member set, header maps sorted by key, 0 times as null, clamped."""
from __future__ import annotations
import numpy as np, pyarrow as pa, pyarrow.compute as pc
import ptars
from msgboard.v1 import board_pb2 as pb
from pyspark_msgboard import columns as C

_h = ptars.HandlerPool([pb.DESCRIPTOR], config=ptars.PtarsConfig(timestamp_unit="us")).get_for_message(pb.Message.DESCRIPTOR)
_KINDS = ["bool", "int", "float", "string", "bytes"]
_NAMES = pa.array(["null", *_KINDS], pa.string())
_STAMP = C.ARROW.field("posted_at").type
_TUPLE = C.ARROW.field("tuple").type
_HEADERS = C.ARROW.field("headers").type

def _time(col, nullable=True):
    us = col.cast(pa.int64())
    us = pc.max_element_wise(pc.min_element_wise(us, C.MAX_US, skip_nulls=False), C.MIN_US, skip_nulls=False)
    if nullable:
        us = pc.if_else(pc.equal(us, 0), pa.scalar(None, pa.int64()), us)
    return us.cast(_STAMP)

def _tuples(col):
    offsets = col.offsets
    v = col.flatten()
    kind = np.zeros(len(v), np.int8)
    members = np.zeros(len(v), np.int8)
    for i, k in enumerate(_KINDS, 1):
        valid = np.asarray(v.field(k).is_valid(), np.int8)
        members += valid
        kind += valid * i
    members += np.asarray(v.field("null").is_valid(), np.int8)
    if (members > 1).any():
        raise _Fallback  # two members of the oneof: protobuf keeps the last
    fields = [_NAMES.take(pa.array(kind))] + [v.field(k) for k in _KINDS]
    values = pa.StructArray.from_arrays(fields, fields=list(_TUPLE.value_type))
    return pa.ListArray.from_arrays(offsets, values, type=_TUPLE)

def _headers(col):
    counts = np.diff(np.asarray(col.offsets))
    keys, values = col.keys, col.items
    if (counts > 1).any():
        rows = pa.array(np.repeat(np.arange(len(col)), counts))
        order = pc.sort_indices(pa.table({"r": rows, "k": keys}), sort_keys=[("r", "ascending"), ("k", "ascending")])
        keys, values, rows = keys.take(order), values.take(order), rows.take(order)
        twice = pc.and_(pc.equal(keys[1:], keys[:-1]), pc.equal(rows[1:], rows[:-1]))
        if pc.any(twice).as_py():
            raise _Fallback  # a key written twice: the map keeps the last
    return pa.MapArray.from_arrays(col.offsets, keys, values, type=_HEADERS)

class _Fallback(Exception):
    pass

def batch(keys, payloads, queue, section):
    try:
        return _batch(keys, payloads, queue, section)
    except _Fallback:
        return C.batch(keys, payloads, queue, section)

def _batch(keys, payloads, queue, section):
    rb = _h.array_to_record_batch(pa.array(payloads, pa.binary()))
    n = len(keys)
    seqs = np.frombuffer(b"".join(keys), C._KEYS)["seq"].astype(np.int64)
    cols = {
        "queue": pa.repeat(pa.scalar(queue, pa.string()), n),
        "seq": pa.array(seqs, pa.int64()),
        "section": pa.repeat(pa.scalar(section, pa.string()), n),
        "address": rb.column("address"),
        "priority": rb.column("priority"),
        "headers": _headers(rb.column("headers")),
        "reply_to": rb.column("reply_to"),
        "expires_at": _time(rb.column("expires_at")),
        "tuple": _tuples(rb.column("tuple")),
        "content_type": rb.column("content_type"),
        "body": rb.column("body"),
        "posted_at": _time(rb.column("posted_at"), False).fill_null(0) if False else _time(rb.column("posted_at"), False),
        "processed_at": _time(rb.column("processed_at")),
        "delivery_count": rb.column("delivery_count").cast(pa.int32()),
    }
    return pa.RecordBatch.from_arrays([cols[f.name] for f in C.ARROW], schema=C.ARROW)
