"""Message records to Arrow columns with a compiled decoder: ptars.

``batch(keys, payloads, queue, section)`` gives the record batch that
``columns.batch`` gives, field for field, with no Python object per record
or per field: ptars (a Rust protobuf-to-Arrow decoder from PyPI, Apache-2.0)
parses the whole batch of ``msgboard.v1.Message`` payloads straight into
Arrow arrays, one call, from the generated descriptor; this module then
shapes them into ``columns.ARROW`` with Arrow compute and numpy over whole
columns:

- ``queue``, ``queue_id``, ``seq`` and ``section`` from the keys;
- the tuple's ``type``: the one member of the oneof that is set (none: null);
- header maps sorted by key;
- times: ``posted_at`` absent reads as the epoch, ``expires_at`` and
  ``processed_at`` absent or zero as null (as the board means them), and
  every time clamped to ``columns.MIN_US..MAX_US`` (ptars saturates);
- the exit's kind as its name, an empty reason or queue as null.

Where ptars and protobuf's own rules part, the batch goes to
``columns.batch`` (upb, the same result by definition): a Value with two
members of its oneof (ptars keeps both, protobuf the last), a header key
written twice in one map (ptars keeps both, a map the last), and any
payload ptars refuses (a damaged record, which ``columns.batch`` names by
queue and seq). Without ptars installed (it is part of the ``spark``
extra) everything goes to ``columns.batch``. ``tests/test_spark_columns.py``
checks both against a record-by-record upb decode.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgboard.v1 import board_pb2 as pb
from pyspark_msgboard import columns

_STAMP = columns.ARROW.field("posted_at").type
_TUPLE = columns.ARROW.field("tuple").type
#: The tuple's value columns as ptars names them (the oneof's members).
_MEMBERS = [f.name for f in columns.Value.DESCRIPTOR.oneofs_by_name["kind"].fields]
_KINDS = pa.array(_MEMBERS, pa.string())
#: Exit kinds by number, as the ``exit`` column says them.
_EXITS = pa.array(
    [columns.EXIT_NAMES.get(n) for n in range(max(columns.EXIT_NAMES) + 1)], pa.string()
)


def _handler() -> Any:
    """ptars' decoder of ``msgboard.v1.Message``; None without ptars."""
    try:  # the spark extra installs it; without it, columns.batch does the work
        import ptars
    except ImportError:  # pragma: no cover - only where ptars is not installed
        return None
    config = ptars.PtarsConfig(timestamp_unit="us")
    return ptars.HandlerPool([pb.DESCRIPTOR], config=config).get_for_message(pb.Message.DESCRIPTOR)


_HANDLER = _handler()
#: True when ptars decodes; False: every batch goes to ``columns.batch``.
AVAILABLE = _HANDLER is not None


class _Fallback(Exception):
    """A batch whose protobuf semantics ptars does not give (module docstring)."""


def batch(keys: list[bytes], payloads: list[bytes], queue: str, section: str) -> pa.RecordBatch:
    """The records stored under ``keys`` (qid + seq), their checked
    ``payloads``, as one record batch of ``columns.ARROW``; RecordDamaged
    naming the first payload that does not parse."""
    if _HANDLER is None:
        return columns.batch(keys, payloads, queue, section)
    try:
        return _batch(keys, payloads, queue, section)
    except (_Fallback, ValueError):  # ValueError: ptars refused a payload
        return columns.batch(keys, payloads, queue, section)


def _batch(keys: list[bytes], payloads: list[bytes], queue: str, section: str) -> pa.RecordBatch:
    rb = _HANDLER.array_to_record_batch(pa.array(payloads, pa.binary()))
    n = len(keys)
    parsed = np.frombuffer(b"".join(keys), columns.KEYS)
    exits = rb.column("exit")
    present = exits.is_valid()
    kind = exits.field("kind").fill_null(0)
    bounds = pc.min_max(kind).as_py()
    if n and not 0 <= (bounds["min"] or 0) <= (bounds["max"] or 0) < len(_EXITS):
        raise _Fallback  # a kind this version does not name (upb's path: null)
    out = {
        "queue": pa.repeat(pa.scalar(queue, pa.string()), n),
        "queue_id": pa.array(parsed["qid"].astype(np.int64), pa.int64()),
        "seq": pa.array(parsed["seq"].astype(np.int64), pa.int64()),
        "section": pa.repeat(pa.scalar(section, pa.string()), n),
        "address": rb.column("address"),
        "priority": rb.column("priority"),
        "headers": _headers(rb.column("headers")),
        "reply_to": rb.column("reply_to"),
        "expires_at": _time(rb.column("expires_at"), optional=True),
        "tuple": _tuples(rb.column("tuple")),
        "content_type": rb.column("content_type"),
        "body": rb.column("body"),
        "posted_at": _time(rb.column("posted_at"), optional=False),
        "processed_at": _time(rb.column("processed_at"), optional=True),
        "delivery_count": rb.column("delivery_count").cast(pa.int32()),
        "exit": pc.if_else(present, _EXITS.take(kind), None),
        "exit_reason": _text(exits.field("reason"), present),
        "exit_queue": _text(exits.field("queue"), present),
        "exit_selector": _text(exits.field("selector"), present),
        "exit_seq": _seq(exits.field("seq"), present),
    }
    return pa.RecordBatch.from_arrays([out[f.name] for f in columns.ARROW], schema=columns.ARROW)


def _time(col: pa.Array, optional: bool) -> pa.Array:
    """A timestamp column clamped to MIN_US..MAX_US; absent: the epoch, or
    (``optional``) null, as zero is."""
    us = col.cast(pa.int64()).fill_null(0)
    us = pc.min_element_wise(pc.max_element_wise(us, columns.MIN_US), columns.MAX_US)
    if optional:
        us = pc.if_else(pc.equal(us, 0), None, us)
    return us.cast(_STAMP)


def _text(col: pa.Array, present: pa.Array) -> pa.Array:
    """An exit's string: null where there is no exit or it is empty."""
    return pc.if_else(pc.and_(present, pc.not_equal(col.fill_null(""), "")), col, None)


def _seq(col: pa.Array, present: pa.Array) -> pa.Array:
    """An exit's seq: null where there is no exit or it is 0."""
    seq = col.fill_null(0).cast(pa.int64())
    return pc.if_else(pc.and_(present, pc.not_equal(seq, 0)), seq, None)


def _tuples(col: pa.ListArray) -> pa.Array:
    """The tuple column: the member set names the type (none: null)."""
    values = col.values
    kind = np.zeros(len(values), np.int8)
    members = np.zeros(len(values), np.int8)
    for i, name in enumerate(_MEMBERS):
        valid = np.asarray(values.field(name).is_valid(), np.int8)
        members += valid
        kind += valid * i
    if (members > 1).any():
        raise _Fallback  # two members of the oneof: protobuf keeps the last
    fields = [_KINDS.take(pa.array(kind))]
    fields += [values.field(f.name) for f in list(_TUPLE.value_type)[1:]]
    inner = pa.StructArray.from_arrays(fields, fields=list(_TUPLE.value_type))
    return pa.ListArray.from_arrays(col.offsets, inner, type=_TUPLE)


def _headers(col: pa.MapArray) -> pa.Array:
    """The headers column, each map sorted by key."""
    headers = columns.sorted_map(col.offsets, col.keys, col.items)
    if headers is None:
        raise _Fallback  # a key written twice: the map keeps the last
    return headers
