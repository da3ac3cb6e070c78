"""The bulk decoders of the Spark data source (``pyspark_msgboard.columns``,
upb and numpy, and ``pyspark_msgboard.compiled``, ptars) give, for any
bytes upb reads as a ``msgboard.v1.Message``, the row a record-by-record
upb decode gives: the plain encodings they read in bulk, and every other
one (a Value with two members or an unknown field, a header entry written
value first or twice, a processed suffix appended) through their
fallbacks."""

from __future__ import annotations

import math
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgboard.codec import exit_suffix, processed_suffix
from msgboard.errors import RecordDamaged
from msgboard.message import Exit, ExitKind
from msgboard.v1 import board_pb2 as pb
from tests.sparking import exact

pytest.importorskip("pyspark")

from pyspark_msgboard import columns, compiled

Value = columns.Value
#: Both decoders of a batch, by the data source's ``decoder`` option.
DECODERS = pytest.mark.parametrize(
    "decode", [columns.batch, compiled.batch], ids=["protobuf", "compiled"]
)

KINDS = ("bool", "int", "float", "string", "bytes")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _varint(n: int) -> bytes:
    return columns._varint(n)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


plain_values = st.one_of(
    st.builds(lambda: Value(null=0)),
    st.booleans().map(lambda b: Value(bool=b)),
    st.sampled_from([0, 1, -1, 300, -(2**63), 2**63 - 1]).map(lambda i: Value(int=i)),
    st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf, -math.inf]).map(lambda f: Value(float=f)),
    st.sampled_from(["", "a", "é\x00z", "x" * 200]).map(lambda s: Value(string=s)),
    st.sampled_from([b"", b"\x00", b"\xff" * 300]).map(lambda b: Value(bytes=b)),
)
#: The bytes of one tuple field: mostly plain, sometimes shapes only upb reads.
value_bytes = st.one_of(
    plain_values.map(lambda v: v.SerializeToString()),
    st.tuples(plain_values, plain_values).map(
        lambda vs: vs[0].SerializeToString() + vs[1].SerializeToString()  # the last wins
    ),
    plain_values.map(lambda v: v.SerializeToString() + b"\x78\x01"),  # unknown field 15
    st.just(b""),  # no member set: a null
)
entry_bytes = st.one_of(
    st.tuples(st.sampled_from(["a", "b", "tenant"]), st.sampled_from(["", "1", "é"])).map(
        lambda kv: _field(1, kv[0].encode()) + _field(2, kv[1].encode())
    ),
    st.just(_field(2, b"v") + _field(1, b"b")),  # value first
    st.just(_field(1, b"k")),  # no value: ""
)


@st.composite
def payloads(
    draw: st.DrawFn,
    values: st.SearchStrategy[bytes] = value_bytes,
    entries: st.SearchStrategy[bytes] = entry_bytes,
    unique: bool = False,
) -> bytes:
    m = pb.Message(
        address=draw(st.sampled_from(["", "a.b", "é"])),
        priority=draw(st.sampled_from([0, -5, 2**62])),
        reply_to=draw(st.sampled_from(["", "r"])),
        content_type=draw(st.sampled_from(["", "text/plain"])),
        body=draw(st.sampled_from([b"", b"\x00body"])),
        delivery_count=draw(st.sampled_from([0, 3])),
    )
    m.posted_at.FromMicroseconds(draw(st.sampled_from([0, 1_795_000_000_123_456])))
    if draw(st.booleans()):
        m.expires_at.seconds = draw(st.sampled_from([1, 2**62, -(2**40)]))
    data = m.SerializeToString()
    data += b"".join(_field(5, e) for e in draw(st.lists(entries, max_size=3, unique=unique)))
    data += b"".join(_field(8, v) for v in draw(st.lists(values, max_size=4)))
    if draw(st.booleans()):
        data += processed_suffix(1_795_000_100_000_000, 2)
        how = draw(st.sampled_from([None, *ExitKind]))
        if how is not None:  # some with a reason and queue, as dead letters have
            reason, queue = draw(st.sampled_from([("", ""), ("expired", "dlq"), ("rejected", "")]))
            # ... and a selector and seq, as moves have
            selector, seq = draw(st.sampled_from([("", 0), ("s-1", 0), ("s-2", 7), ("", 2**40)]))
            data += exit_suffix(Exit(how, reason, queue, selector, seq))
    return data


def _time(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=columns.clamp(us))


def _us(t: Any) -> int:
    return int(t.seconds * 1_000_000 + t.nanos // 1000)


def expected(seq: int, payload: bytes) -> dict[str, Any]:
    """The row of one record, decoded by upb field by field."""
    m = pb.Message.FromString(payload)
    fields = []
    for v in m.tuple:
        kind = v.WhichOneof("kind") or "null"
        fields.append({"type": kind, **{k: getattr(v, k) if k == kind else None for k in KINDS}})
    expires, processed = _us(m.expires_at), _us(m.processed_at)
    return {
        "queue": "q",
        "queue_id": 7,
        "seq": seq,
        "section": "history",
        "address": m.address,
        "priority": m.priority,
        "headers": sorted(m.headers.items()),
        "reply_to": m.reply_to,
        "expires_at": _time(expires) if expires else None,
        "tuple": fields,
        "content_type": m.content_type,
        "body": m.body,
        "posted_at": _time(_us(m.posted_at)),
        "processed_at": _time(processed) if processed else None,
        "delivery_count": m.delivery_count,
        "exit": pb.ExitKind.Name(m.exit.kind)[10:].lower() if m.HasField("exit") else None,
        "exit_reason": m.exit.reason or None,
        "exit_queue": m.exit.queue or None,
        "exit_selector": m.exit.selector or None,
        "exit_seq": m.exit.seq or None,
    }


def key(seq: int) -> bytes:
    return struct.pack(">IQ", 7, seq)


@DECODERS
@settings(max_examples=150, deadline=None)
@given(st.lists(payloads(), min_size=1, max_size=6))
def test_a_batch_is_what_upb_reads_record_by_record(decode: Any, batch: list[bytes]) -> None:
    # Given records of any encoding upb reads
    keys = [key(i + 1) for i in range(len(batch))]
    # When a bulk decoder turns them into one record batch
    got = decode(keys, batch, "q", "history")
    # I expect each row to be what upb reads from its record alone
    assert got.schema == columns.ARROW
    assert exact(got.to_pylist()) == exact([expected(i + 1, p) for i, p in enumerate(batch)])


#: Records as the board writes them (one member per Value, each header key
#: once, in order), a history record's processed suffix and exit appended.
plain_payloads = payloads(
    plain_values.map(lambda v: v.SerializeToString()),
    st.sampled_from(["a", "b", "tenant"]).map(lambda k: _field(1, k.encode()) + _field(2, b"v")),
    unique=True,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(plain_payloads, min_size=1, max_size=6))
def test_plain_records_take_the_compiled_path(batch: list[bytes]) -> None:
    # Given records in the shapes the board writes, edge values included
    keys = [key(i + 1) for i in range(len(batch))]
    # When ptars decodes them (no fallback to upb: _batch raises if it would)
    got = compiled._batch(keys, batch, "q", "history")
    # I expect what upb reads record by record
    assert exact(got.to_pylist()) == exact([expected(i + 1, p) for i, p in enumerate(batch)])


def test_plain_records_take_the_bulk_path() -> None:
    # Given records as the board writes them, every kind of field
    values = [
        Value(null=0),
        Value(bool=True),
        Value(int=-(2**63)),
        Value(float=-0.0),
        Value(string="é"),
        Value(bytes=b"\x00"),
    ]
    m = pb.Message(tuple=values, headers={"b": "2", "a": "1"})
    rows = list(
        columns._Batch.FromString(
            columns._frame(len(m.SerializeToString())) + m.SerializeToString()
        ).rows
    )
    # I expect numpy to read their fields and entries (no upb fallback)
    kinds = columns._fields_bulk([v for r in rows for v in r.tuple])[0].to_pylist()
    assert kinds == ["null", "bool", "int", "float", "string", "bytes"]
    keys, values_ = columns._entries_bulk([e for r in rows for e in r.headers])
    assert sorted(zip(keys.to_pylist(), values_.to_pylist(), strict=True)) == [
        ("a", "1"),
        ("b", "2"),
    ]


@DECODERS
def test_a_record_that_does_not_parse_is_named(decode: Any) -> None:
    # Given a batch whose second record is cut short, and a third whose
    # tuple string is not UTF-8
    good = pb.Message(address="a").SerializeToString()
    cut = pb.Message(body=b"x" * 50).SerializeToString()[:10]
    bad_utf8 = _field(8, _field(5, b"\xff"))
    for payload in (cut, bad_utf8):
        # When it is decoded
        with pytest.raises(RecordDamaged) as e:
            decode([key(1), key(2)], [good, payload], "q", "history")
        # I expect the damaged record named by its queue and seq
        assert (e.value.queue, e.value.seq) == ("q", 2)
