"""Deliveries as protobuf bytes: a batch of deliveries written as the bytes
of a ``SubscribeResponse`` by concatenation, each message's stored bytes
(``message.wire``) followed by the fields the board sets (a later field
wins as protobuf parses), instead of a protobuf object filled per delivery.
The field numbers come from the descriptors; tests/test_stored_bytes.py
checks the result against ``codec.message_to_pb``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from msgboard.codec import SECTION, board_fields, message_to_pb
from msgboard.message import Message, keep_frame
from msgboard.v1 import board_pb2 as pb


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: Varints below 2**14 (lengths, small ids), ready-made.
_VARINTS = [_varint(n) for n in range(1 << 14)]


def _uvarint(n: int) -> bytes:
    if n < 0x4000:
        return _VARINTS[n]
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    return _varint(n)


def _tag(field: Any, wire_type: int) -> bytes:
    return _varint(field.number << 3 | wire_type)


_M = pb.Message.DESCRIPTOR.fields_by_name
_QUEUE_TAG = _tag(_M["queue"], 2)
_SEQ_TAG = _tag(_M["seq"], 0)
_SECTION_FIELD = {
    s: _tag(_M["section"], 0) + _varint(v) if v else b"" for s, v in SECTION.to_pb.items()
}
_ID_TAG = _tag(pb.Delivery.DESCRIPTOR.fields_by_name["id"], 0)
_MESSAGE_TAG = _tag(pb.Delivery.DESCRIPTOR.fields_by_name["message"], 2)
_ITEM_TAG = _tag(pb.Deliveries.DESCRIPTOR.fields_by_name["items"], 2)
_DELIVERIES_TAG = _tag(pb.SubscribeResponse.DESCRIPTOR.fields_by_name["deliveries"], 2)


@functools.lru_cache(maxsize=64)
def _queue_field(queue: str) -> bytes:
    data = queue.encode()
    return _QUEUE_TAG + _uvarint(len(data)) + data


def deliveries_to_bytes(batch: Iterable[tuple[int, Message]]) -> bytes:
    """The serialized SubscribeResponse carrying these (id, message)
    deliveries: what ``message_to_pb`` would give each message, as bytes
    joined without a protobuf object per message. Each message's part is
    made once and kept on it (``message.frame``): the COPY consumers of one
    message share it."""
    parts: list[bytes] = []
    for did, m in batch:
        part = m._frame
        if part is None:
            part = keep_frame(m, _part(m))
        item = _ID_TAG + _uvarint(did) + part
        parts += (_ITEM_TAG, _uvarint(len(item)), item)
    items = b"".join(parts)
    return _DELIVERIES_TAG + _uvarint(len(items)) + items


def _part(m: Message) -> bytes:
    """The ``message`` field of a Delivery carrying ``m``."""
    w = m._wire
    if w is None or not (m.delivery_count and (m.posted_at or m._pure)):
        # No bytes to start from, or a field that must be cleared
        # (message_to_pb's slow path): encoded field by field.
        body = message_to_pb(m).SerializeToString()
    else:
        body = b"".join(
            (
                w,
                board_fields(m.posted_at, m.processed_at, m.delivery_count),
                _queue_field(m.queue),
                _SEQ_TAG,
                _uvarint(m.seq),
                _SECTION_FIELD[m.section],
            )
        )
    return _MESSAGE_TAG + _uvarint(len(body)) + body
