"""Stored bytes end to end: a posted message is stored as the bytes it was
posted as, followed by the board's fields, and delivered from the bytes it
was stored as (``message.wire``), and what comes out is what the
field-by-field encoding gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lmdb
import pytest

from msgboard import codec
from msgboard.engine import Board
from msgboard.lmdbstore import record
from msgboard.message import Message, Section, build, frame, stamp, wire
from msgboard.server.deliveries import deliveries_to_bytes
from msgboard.spec import QueueSpec
from msgboard.v1 import board_pb2 as pb

U = Section.UNPROCESSED
POSTED = 1_700_000_000_123_456


def _posted(**fields: object) -> tuple[pb.Message, Message]:
    """A message as a client posts it, and as the server reads it."""
    p = codec.message_to_pb(
        Message(tuple=("job", 7, 1.5, None, b"\x00"), address="a.b", body=b"x" * 100, **fields)  # type: ignore[arg-type]
    )
    [m] = codec.messages_from_pb([p])
    return p, m


def _plain(m: Message) -> Message:
    """``m`` without its bytes: encoded field by field."""
    out = dataclasses.replace(m)
    assert wire(out) == (None, False)
    return out


def test_a_post_is_stored_as_its_bytes_then_the_boards_fields() -> None:
    p, m = _posted(headers={"k": "v"}, priority=3)
    p.ClearField("section")  # cleared by the post (message_to_pb set it)
    stored = stamp(m, "q", 5, POSTED, 0, 0, U)
    data = codec.encode_record(stored)
    assert data.startswith(p.SerializeToString())
    assert codec.decode_record(data, "q", 5, U) == stored


def test_what_a_post_must_not_set_is_not_stored() -> None:
    p, _ = _posted()
    p.queue, p.seq, p.section, p.delivery_count = "other", 99, pb.SECTION_HISTORY, 4
    p.posted_at.seconds, p.processed_at.seconds = 1, 2
    [m] = codec.messages_from_pb([p])
    assert wire(m)[1] is False  # a posted_at and delivery_count: impure
    stored = stamp(m, "q", 5, POSTED, 0, 0, U)
    back = pb.Message.FromString(codec.encode_record(stored))
    assert (back.queue, back.seq, back.section, back.delivery_count) == ("", 0, 0, 0)
    assert codec.ts_to_us(back.posted_at) == POSTED
    assert not back.HasField("processed_at")


def test_deliveries_from_the_bytes_are_the_field_by_field_encoding() -> None:
    _, m = _posted(headers={"t": "1"}, expires_at=POSTED + 10**9)
    data = codec.encode_record(stamp(m, "q", 5, POSTED, 0, 2, U))
    read = codec.decode_record(data, "q", 5, U)
    assert wire(read) == (data, False)
    cases = [
        stamp(read, "q", 5, read.posted_at, 0, read.delivery_count + 1, U),  # delivered
        stamp(read, "q", 5, read.posted_at, POSTED + 1, 3, Section.HISTORY),  # taken
        stamp(read, "", 0, 0, 0, 0, U),  # moved on: what the record said is stale
        stamp(read, "r", 1, POSTED + 7, 0, 0, U),
    ]
    for m in cases:
        assert codec.message_to_pb(m) == codec.message_to_pb(_plain(m))
        parse = pb.Message.FromString  # the bytes differ in field order
        assert parse(codec.encode_record(m)) == parse(codec.encode_record(_plain(m)))


def test_a_batch_of_deliveries_joined_as_bytes_is_the_field_by_field_encoding() -> None:
    """Given deliveries of messages read from records, posted ones, ones
    without bytes and ones whose stale fields must be cleared, with ids and
    seqs that need multi-byte varints, when joined as the bytes of a
    SubscribeResponse, I expect what filling the protobuf gives."""
    _, posted = _posted(headers={"t": "1"}, priority=-3)
    data = codec.encode_record(stamp(posted, "q", 5, POSTED, 0, 2, U))
    read = codec.decode_record(data, "q", 5, U)
    messages = [
        stamp(read, "q", 5, read.posted_at, 0, 3, U),
        stamp(read, "queue-" + "x" * 200, 2**40, POSTED, 0, 1, U),
        stamp(posted, "q", 20_000, POSTED + 1, 0, 1, U),
        stamp(read, "q", 6, 0, 0, 1, U),  # a stale posted_at to clear
        stamp(read, "q", 7, POSTED, 0, 0, U),  # a stale delivery_count to clear
        _plain(stamp(read, "q", 8, POSTED, POSTED + 5, 1, Section.HISTORY)),
    ]
    ids = [1, 127, 128, 16_383, 16_384, 2**33]
    expected = pb.SubscribeResponse()
    for i, m in zip(ids, messages, strict=True):
        codec.message_to_pb(m, expected.deliveries.items.add(id=i).message)
    joined = deliveries_to_bytes(zip(ids, messages, strict=True))
    assert pb.SubscribeResponse.FromString(joined) == expected
    assert pb.SubscribeResponse.FromString(deliveries_to_bytes([])) == pb.SubscribeResponse(
        deliveries=pb.Deliveries()
    )


def test_a_message_delivered_to_many_consumers_is_encoded_once() -> None:
    """Given one delivered message (as the COPY consumers of a message share
    it), when it goes out in two consumers' batches under their own ids, I
    expect its part made once, kept on it, and each batch right."""
    _, posted = _posted()
    m = stamp(posted, "q", 9, POSTED, 0, 1, U)
    assert frame(m) is None
    first = pb.SubscribeResponse.FromString(deliveries_to_bytes([(4, m)]))
    kept = frame(m)
    assert kept is not None
    second = pb.SubscribeResponse.FromString(deliveries_to_bytes([(70, m)]))
    assert frame(m) is kept
    for got, i in ((first, 4), (second, 70)):
        [d] = got.deliveries.items
        assert (d.id, d.message) == (i, codec.message_to_pb(m))


def test_a_message_given_back_again_and_again_keeps_its_size() -> None:
    _, m = _posted()
    data = codec.encode_record(stamp(m, "q", 5, POSTED, 0, 0, U))
    sizes = set()
    for n in range(1, 20):
        m = codec.decode_record(data, "q", 5, U)
        data = codec.encode_record(stamp(m, "q", 5, m.posted_at, 0, n, U))
        sizes.add(len(data))
    assert len(sizes) <= 2  # the delivery count's varint may grow a byte
    assert codec.decode_record(data, "q", 5, U).delivery_count == 19


def test_the_board_stores_the_posted_bytes(tmp_path: Path) -> None:
    p, m = _posted(headers={"k": "v"})
    p.ClearField("section")
    with Board(tmp_path / "b") as b:
        b.create_queue(QueueSpec("q", max_history=10))
        [seq] = b.post("q", [m])
        [got] = b.take("q")
        assert got.body == m.body and got.tuple == m.tuple and got.seq == seq
    env = lmdb.open(str(tmp_path / "b"), max_dbs=16, readonly=True, lock=False)
    with env.begin() as txn:
        cur = txn.cursor(env.open_db(b"history", txn=txn, create=False))
        assert cur.first()
        assert record.unseal(cur.key(), cur.value()).startswith(p.SerializeToString())
    env.close()


def test_a_client_posts_without_what_a_post_does_not_keep() -> None:
    taken = stamp(Message(body=b"x"), "q", 5, POSTED, 0, 0, U)
    [p] = codec.messages_to_pb([taken])
    assert (p.queue, p.seq, p.section) == ("", 0, 0)  # no clearing on the server


def test_build_makes_the_message_the_constructor_makes() -> None:
    """Given every field set, I expect ``build`` (which fills the slots of an
    unfrozen twin and then changes its class) to give a frozen Message equal
    to the constructor's, with every slot set and no attribute store allowed."""
    kw = dict(
        tuple=("a", 1, 2.5, b"b", None, True),
        address="addr",
        priority=3,
        headers={"h": "v"},
        reply_to="back",
        expires_at=POSTED + 9,
        content_type="text/plain",
        body=b"body",
        queue="q",
        seq=5,
        posted_at=POSTED,
        processed_at=POSTED + 1,
        delivery_count=2,
        section=Section.HISTORY,
    )
    made = Message(**kw)  # type: ignore[arg-type]
    built = build(*kw.values())  # type: ignore[arg-type]
    assert type(built) is Message and built == made
    assert [getattr(built, s) for s in Message.__slots__] == [
        getattr(made, s) for s in Message.__slots__
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.body = b"other"  # type: ignore[misc]
