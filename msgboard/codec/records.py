"""The bytes a store keeps for a message, and the message it reads back.

A record is a ``msgboard.v1.Message`` without what its key or table already
says (queue, seq, section), so a snapshot can be decoded by any language
that has the proto. A posted message is stored as the bytes it was posted
as followed by the fields the board sets (``board_fields``): protobuf merges
concatenated messages, a later scalar winning, so taking a message appends
``processed_suffix`` and ``exit_suffix`` (how it left) instead of encoding
it again. tests/test_stored_bytes.py
holds these bytes fixed.

``decode_record`` is the hot path of every take and of the Spark reader:
one parse in C, then ``messages.message_from_pb``.
"""

from __future__ import annotations

import functools

from msgboard.codec.messages import exit_to_pb, message_from_pb, message_to_pb, us_to_ts
from msgboard.message import Exit, Message, Section, keep_wire
from msgboard.v1 import board_pb2 as pb

_parse = pb.Message.FromString


def encode_record(m: Message) -> bytes:
    """The bytes a store keeps for a message: the bytes it was posted or
    stored as (``message.wire``) followed by the board's fields, else its
    encoding field by field."""
    w = m._wire
    if w is None:
        return message_to_pb(m, record=True).SerializeToString()
    if not m._pure:
        # Bytes read from a record carry its posted_at and delivery_count:
        # dropped (in C), so that a record moved or given back again and
        # again does not grow by its fields each time.
        p = _parse(w)
        p.ClearField("posted_at")
        p.ClearField("delivery_count")
        w = p.SerializeToString()
    return w + board_fields(m.posted_at, m.processed_at, m.delivery_count)


@functools.lru_cache(maxsize=256)
def board_fields(posted_at: int, processed_at: int, delivery_count: int) -> bytes:
    """The encoded fields the board sets on a record; cached, as the
    messages of one group commit share one time."""
    p = pb.Message(delivery_count=delivery_count)
    if posted_at:
        us_to_ts(posted_at, p.posted_at)
    if processed_at:
        us_to_ts(processed_at, p.processed_at)
    return p.SerializeToString()


def decode_record(data: bytes, queue: str, seq: int, section: Section) -> Message:
    """The message a store keeps as ``data``. An unprocessed record keeps
    its bytes (``message.wire``: they never carry processed_at); a history
    one does not."""
    m = message_from_pb(_parse(data), queue=queue, seq=seq, section=section)
    return keep_wire(m, data, False) if section is Section.UNPROCESSED else m


def processed_suffix(processed_at: int, delivery_count: int) -> bytes:
    """The bytes that, appended to an unprocessed record, make it the
    processed one: protobuf merges concatenated messages, a later scalar
    winning."""
    return board_fields(0, processed_at, delivery_count)


def exit_suffix(how: Exit) -> bytes:
    """The encoded ``exit`` field of a history record (``Message.exit``),
    appended after ``processed_suffix``: a few bytes, cached. The messages
    of one ack or Take share one Exit: the last one is kept by identity
    (one tuple, swapped whole), which costs less than hashing it."""
    global _last_exit
    last = _last_exit
    if last[0] is how:
        return last[1]
    data = _exit_bytes(how)
    _last_exit = (how, data)
    return data


_last_exit: tuple[Exit | None, bytes] = (None, b"")


@functools.lru_cache(maxsize=256)
def _exit_bytes(how: Exit) -> bytes:
    p = pb.Message()
    exit_to_pb(how, p.exit)
    return p.SerializeToString()
