"""The message: an envelope, a typed tuple and an opaque body.

A message is immutable once posted. The board sets ``queue``, ``seq``,
``posted_at`` and, when it is taken, ``processed_at``, ``delivery_count`` and
``section``. Times are integers: microseconds since the Unix epoch (UTC), so
they compare and store exactly.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: A tuple field: null, bool, int (64-bit), float (64-bit), str or bytes.
Value = None | bool | int | float | str | bytes
#: An ordered list of typed fields.
Fields = tuple[Value, ...]


class Section(enum.Enum):
    """The parts of a queue."""

    UNPROCESSED = "unprocessed"
    HISTORY = "history"
    #: Posted with a ``not_before`` still to come: stored, not yet visible.
    SCHEDULED = "scheduled"


def now_us() -> int:
    """The current time in microseconds since the epoch."""
    return time.time_ns() // 1000


def to_datetime(us: int) -> datetime:
    """A microsecond timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC)


class ExitKind(enum.Enum):
    """How a message left its queue's waiting section."""

    #: A Take (no lease).
    TAKEN = "taken"
    #: A consumer's ack, or a leased Take's lease acked.
    ACKED = "acked"
    #: A MOVE or BOUNCE selector put it on another queue.
    MOVED = "moved"
    #: Dead-lettered (rejected, max-deliveries, unmatched, max-hops, bounce).
    DEAD_LETTERED = "dead_lettered"
    #: Its ``expires_at`` passed.
    EXPIRED = "expired"
    #: A DELETE selector, the unmatched policy discard, or trimming.
    DROPPED = "dropped"


@dataclass(frozen=True, slots=True)
class Exit:
    """How a history message left: its kind; the reason (as
    ``x-dead-letter-reason`` and Stats say it); the queue it went to
    (moved, dead-lettered, expired; "" nowhere); the selector that took it;
    moved, the seq it has in ``queue`` (0: not known)."""

    kind: ExitKind
    reason: str = ""
    queue: str = ""
    selector: str = ""
    seq: int = 0


#: The exits without a reason, queue or selector (the hot paths share them).
TAKEN = Exit(ExitKind.TAKEN)
ACKED = Exit(ExitKind.ACKED)
#: ``$sys`` events moved to history past its waiting bound.
TRIMMED = Exit(ExitKind.DROPPED, "trimmed")


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
    #: An idempotency key, at most 256 bytes: a queue holds one message per
    #: key (a second post of it is a DUPLICATE); "": none.
    key: str = ""
    #: Microseconds since the epoch before which it is not visible; 0: none.
    not_before: int = 0
    # Set by the board.
    queue: str = ""
    seq: int = 0
    posted_at: int = 0
    processed_at: int = 0
    delivery_count: int = 0
    section: Section = Section.UNPROCESSED
    #: In a Browse page only: when a message held back after a nack or a
    #: lost consumer is routed again (µs); 0 otherwise.
    redeliver_at: int = 0
    #: On a history message: how it left (``Exit``); None while it waits, or
    #: for a record written before exits were recorded.
    exit: Exit | None = None
    # The board's own: the bytes the message was posted or stored as (see
    # ``wire``). Not compared, not copied by ``dataclasses.replace``.
    _wire: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _pure: bool = field(default=False, init=False, repr=False, compare=False)
    # Its encoding as a delivered message, made once (``frame``).
    _frame: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def expired(self, now: int) -> bool:
        """True once ``now`` (µs since the epoch) is at or past
        ``expires_at``, the message's time to live (never, when it is 0)."""
        return self.expires_at != 0 and now >= self.expires_at


def size(m: Message) -> int:
    """About how many bytes ``m`` holds: its body, address, key, headers and
    tuple (a str or bytes field its length, any other field 9). The one
    measure of a message's size: ``Limits.max_message_bytes`` bounds it; a
    consumer's outstanding bytes count it plus a fixed overhead per
    message (``selectors.Outstanding``); a post reserves disk for it plus
    its keys (``Board``'s posting)."""
    n = len(m.body) + len(m.address) + len(m.key)
    for f in m.tuple:
        n += len(f) if isinstance(f, str | bytes) else 9
    for k, v in m.headers.items():
        n += len(k) + len(v)
    return n


# The setters of the board's own slots (a frozen dataclass refuses plain
# stores), for a Message already built.
_s_wire, _s_pure, _s_frame, _s_exit = (
    getattr(Message, n).__set__ for n in ("_wire", "_pure", "_frame", "exit")
)
_new = object.__new__


class _Blank:
    """A Message's slots, not frozen: ``build`` fills one with plain stores
    (half the cost of calling the frozen class's slot setters) and then
    makes it a Message, which CPython allows between classes with the same
    slots."""

    __slots__ = Message.__slots__


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
    key: str = "",
    not_before: int = 0,
) -> Message:
    """A Message from every field, in field order, unchecked. Fills its
    slots directly (``_Blank``): a fraction of the cost of its
    ``__init__``, on the hot path of decoding records and protobufs.
    ``wire`` and ``pure`` are as ``wire`` tells; ``key`` is the message's
    idempotency key and ``not_before`` its time (last, as the newest fields)."""
    r: Any = _new(_Blank)
    r.tuple = fields
    r.address = address
    r.priority = priority
    r.headers = headers
    r.reply_to = reply_to
    r.expires_at = expires_at
    r.content_type = content_type
    r.body = body
    r.key = key
    r.not_before = not_before
    r.queue = queue
    r.seq = seq
    r.posted_at = posted_at
    r.processed_at = processed_at
    r.delivery_count = delivery_count
    r.section = section
    r.redeliver_at = 0
    r.exit = None
    r._wire = wire
    r._pure = pure
    r._frame = None
    r.__class__ = Message
    m: Message = r
    return m


def wire(m: Message) -> tuple[bytes | None, bool]:
    """The protobuf bytes (a board.proto ``Message``) ``m`` was posted or
    stored as, and whether they are pure; (None, False) if it has none.

    Kept so that storing and delivering a message is a concatenation, not a
    field-by-field encoding (``codec.encode_record``, ``codec.message_to_pb``).
    The bytes parse to ``m``'s own fields (tuple, address, priority,
    headers, reply_to, expires_at, content_type, body, key,
    not_before) exactly, and never
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


def left(m: Message, how: Exit | None) -> Message:
    """``m``, a history message just built and not yet shared, with how it
    left (``Message.exit``)."""
    _s_exit(m, how)
    return m


def frame(m: Message) -> bytes | None:
    """The protobuf bytes of ``m`` as a delivered message, if made already
    (``deliveries.py``): the COPY consumers of one message share one
    delivered Message, so its encoding is made once for all of them."""
    return m._frame


def keep_frame(m: Message, data: bytes) -> bytes:
    """Keeps ``data``, the delivered encoding of ``m`` (``frame``); a value
    cached on an immutable message: two threads making it make the same."""
    _s_frame(m, data)
    return data


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
        m.key,
        m.not_before,
    )
