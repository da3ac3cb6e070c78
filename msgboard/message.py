"""The message: an envelope, a typed tuple and an opaque body.

A message is immutable once posted. The board sets ``queue``, ``seq``,
``posted_at`` and, when it is taken, ``processed_at``, ``delivery_count`` and
``section``. Times are integers: microseconds since the Unix epoch (UTC), so
they compare and store exactly.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

#: A tuple field: null, bool, int (64-bit), float (64-bit), str or bytes.
Value = None | bool | int | float | str | bytes
#: An ordered list of typed fields.
Fields = tuple[Value, ...]


class Section(enum.Enum):
    """The two parts of a queue."""

    UNPROCESSED = "unprocessed"
    HISTORY = "history"


def now_us() -> int:
    """The current time in microseconds since the epoch."""
    return time.time_ns() // 1000


def to_datetime(us: int) -> datetime:
    """A microsecond timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC)


@dataclass(frozen=True, slots=True)
class Message:
    """One message. Construct with the envelope; the board fills the rest."""

    tuple: Fields = ()
    address: str = ""
    priority: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    reply_to: str = ""
    #: Microseconds since the epoch after which it is never delivered; 0: never.
    expires_at: int = 0
    content_type: str = ""
    body: bytes = b""
    # Set by the board.
    queue: str = ""
    seq: int = 0
    posted_at: int = 0
    processed_at: int = 0
    delivery_count: int = 0
    section: Section = Section.UNPROCESSED
    # The board's own: the bytes the message was posted or stored as (see
    # ``wire``). Not compared, not copied by ``dataclasses.replace``.
    _wire: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _pure: bool = field(default=False, init=False, repr=False, compare=False)

    def expired(self, now: int) -> bool:
        """True once the message's lease has run out."""
        return self.expires_at != 0 and now >= self.expires_at


# Every slot's setter, in field order, for ``build``.
(
    _s_tuple,
    _s_address,
    _s_priority,
    _s_headers,
    _s_reply_to,
    _s_expires_at,
    _s_content_type,
    _s_body,
    _s_queue,
    _s_seq,
    _s_posted_at,
    _s_processed_at,
    _s_delivery_count,
    _s_section,
    _s_wire,
    _s_pure,
) = (getattr(Message, f.name).__set__ for f in dataclasses.fields(Message))
_new = object.__new__


def build(
    fields: Fields,
    address: str,
    priority: int,
    headers: Mapping[str, str],
    reply_to: str,
    expires_at: int,
    content_type: str,
    body: bytes,
    queue: str,
    seq: int,
    posted_at: int,
    processed_at: int,
    delivery_count: int,
    section: Section,
    wire: bytes | None = None,
    pure: bool = False,
) -> Message:
    """A Message from every field, in field order, unchecked. Fills the
    frozen dataclass's slots directly: less than half the cost of its
    ``__init__``, on the hot path of decoding records and protobufs.
    ``wire`` and ``pure`` are as ``wire`` tells."""
    r: Message = _new(Message)
    _s_tuple(r, fields)
    _s_address(r, address)
    _s_priority(r, priority)
    _s_headers(r, headers)
    _s_reply_to(r, reply_to)
    _s_expires_at(r, expires_at)
    _s_content_type(r, content_type)
    _s_body(r, body)
    _s_queue(r, queue)
    _s_seq(r, seq)
    _s_posted_at(r, posted_at)
    _s_processed_at(r, processed_at)
    _s_delivery_count(r, delivery_count)
    _s_section(r, section)
    _s_wire(r, wire)
    _s_pure(r, pure)
    return r


def wire(m: Message) -> tuple[bytes | None, bool]:
    """The protobuf bytes (a board.proto ``Message``) ``m`` was posted or
    stored as, and whether they are pure; (None, False) if it has none.

    Kept so that storing and delivering a message is a concatenation, not a
    field-by-field encoding (``codec.encode_record``, ``codec.message_to_pb``).
    The bytes parse to ``m``'s own fields (tuple, address, priority,
    headers, reply_to, expires_at, content_type, body) exactly, and never
    carry queue, seq, section or processed_at. They may carry a posted_at and
    a delivery_count, possibly stale, unless pure: the encoders write the
    board's fields after them (protobuf lets a later field win). Only the
    board's fields change between stamped copies (``stamp``), so the bytes
    stay true; ``dataclasses.replace``, which may change the others, drops
    them."""
    return m._wire, m._pure


def keep_wire(m: Message, data: bytes, pure: bool) -> Message:
    """``m``, just built and not yet shared, with the bytes it came as
    (``wire``: they must parse to its own fields)."""
    _s_wire(m, data)
    _s_pure(m, pure)
    return m


def stamp(
    m: Message,
    queue: str,
    seq: int,
    posted_at: int,
    processed_at: int,
    delivery_count: int,
    section: Section,
) -> Message:
    """``m`` with the fields the board sets replaced. Fills the frozen
    dataclass's slots directly: twice as fast as ``dataclasses.replace``, on
    the hot path of post, append and process."""
    return build(
        m.tuple,
        m.address,
        m.priority,
        m.headers,
        m.reply_to,
        m.expires_at,
        m.content_type,
        m.body,
        queue,
        seq,
        posted_at,
        processed_at,
        delivery_count,
        section,
        m._wire,
        m._pure,
    )
