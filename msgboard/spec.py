"""Queue and selector properties, fixed when they are created."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from msgboard.associative import EVERYTHING, Pattern
from msgboard.message import Message

#: ``max_history`` value meaning "keep every taken message".
UNLIMITED = 2**64 - 1
#: A queue's ``dedup_window`` when none is given: 2 minutes, in µs.
DEDUP_WINDOW = 120_000_000
#: The longest ``dedup_window``: 30 days, in µs.
MAX_DEDUP_WINDOW = 30 * 86_400_000_000
#: The longest idempotency key, in UTF-8 bytes.
MAX_KEY_BYTES = 256
#: The longest redelivery delay: 1 day, in µs.
MAX_REDELIVERY = 86_400_000_000
#: The largest redelivery multiplier.
MAX_MULTIPLIER = 1_000


@dataclass(frozen=True, slots=True)
class Redelivery:
    """When a message given back (nacked, its consumer gone, its lease run
    out) is delivered again: ``initial`` µs after it first comes back, then
    ``multiplier`` times the delay before each time, at most ``most`` µs."""

    initial: int = 1_000_000
    multiplier: float = 2.0
    most: int = MAX_REDELIVERY

    def delay(self, returns: int) -> int:
        """The delay (µs) after the message's ``returns``-th return (1 on).
        A step past ``most`` is capped before its power is computed, so no
        count or multiplier overflows a float."""
        n = max(0, returns - 1)
        if n == 0 or self.multiplier <= 1 or self.initial <= 0:
            return min(self.most, self.initial)
        if self.most <= self.initial or n >= math.log(self.most / self.initial, self.multiplier):
            return self.most
        return int(min(self.most, self.initial * self.multiplier**n))


#: A nack's delays when no policy is set: 0.1 s, doubling, up to 5 s.
NACK_BACKOFF = Redelivery(100_000, 2.0, 5_000_000)


class OverflowPolicy(enum.Enum):
    """What a post to a full queue does."""

    REJECT = "reject"  # the poster gets RESOURCE_EXHAUSTED
    DROP_NEW = "drop-new"  # accepted, answered with seq 0, not stored
    DEAD_LETTER = "dead-letter"  # to the queue's dead-letter queue
    DROP_HEAD = "drop-head"  # stored; the oldest waiting message is dropped


class UnmatchedPolicy(enum.Enum):
    """What happens to a message that no MOVE, BOUNCE or DELETE selector
    matches, on a queue that has selectors."""

    HOLD = "hold"  # it waits (default)
    DISCARD = "discard"  # processed at once, into history
    DEAD_LETTER = "dead-letter"  # to the queue's dead-letter queue


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue's name and properties."""

    name: str
    transient: bool = False
    #: Most waiting messages; 0: no limit.
    max_unprocessed: int = 0
    overflow: OverflowPolicy = OverflowPolicy.REJECT
    #: Most taken messages kept in history; 0 keeps none, UNLIMITED all.
    max_history: int = 0
    #: The queue that receives dead letters; "": they are discarded.
    dead_letter: str = ""
    unmatched: UnmatchedPolicy = UnmatchedPolicy.HOLD
    #: Delete the queue when its last selector goes.
    auto_delete: bool = False
    #: Deliveries of one message before it is dead-lettered; 0: no limit.
    max_deliveries: int = 0
    #: How long (µs) a message's idempotency key is still held once the
    #: message has left the board; 0: only while it is on the board.
    dedup_window: int = DEDUP_WINDOW
    #: How messages given back wait before they are delivered again; None:
    #: a nack waits ``NACK_BACKOFF``, a lost consumer or lease not at all.
    redelivery: Redelivery | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["overflow"] = self.overflow.value
        d["unmatched"] = self.unmatched.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueSpec:
        """The spec stored by ``to_json``; fields added since take their
        defaults."""
        r = d.get("redelivery")
        return cls(
            **{
                **d,
                "overflow": OverflowPolicy(d["overflow"]),
                "unmatched": UnmatchedPolicy(d.get("unmatched", "hold")),
                "redelivery": None if r is None else Redelivery(**r),
            }
        )


def _wire_value(field: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if value == UNLIMITED and field == "max_history":
        return "unlimited"
    if value is None:
        return "unset"
    if isinstance(value, Redelivery):  # its Durations as proto JSON writes them
        initial, most = value.initial / 1e6, value.most / 1e6
        return f"{{initial: {initial:g}s, multiplier: {value.multiplier:g}, max: {most:g}s}}"
    if field == "dedup_window" and isinstance(value, int):
        return f"{value / 1e6:g}s"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def field_words(field: str, have: object, asked: object) -> str:
    """One property that differs, as the wire names it: its QueueSpec field,
    the value it has and the one asked (``max_history 1000 (asked: 500)``,
    ``transient false (asked: true)``, ``overflow DROP_NEW (asked: REJECT)``,
    ``dead_letter "dlq" (asked: "")``, ``dedup_window 120s (asked: 0s)``,
    ``redelivery unset (asked: {initial: 1s, multiplier: 2, max: 300s})``;
    an unlimited history, the proto's ``unlimited_history``, is
    ``max_history unlimited``)."""
    return f"{field} {_wire_value(field, have)} (asked: {_wire_value(field, asked)})"


def differences(
    have: QueueSpec, asked: QueueSpec, words: Callable[[str, Any, Any], str] = field_words
) -> str:
    """The properties where ``asked`` differs from ``have``, each said by
    ``words(field, have, asked)``: by default in the proto's field names, as
    every error on the wire names the request's parts (``max_history 1000
    (asked: 500), transient false (asked: true)``); the CLI passes its own
    (its flags). "" when they are the same."""
    out = []
    for field in QueueSpec.__dataclass_fields__:
        a, b = getattr(have, field), getattr(asked, field)
        if a != b:
            out.append(words(field, a, b))
    return ", ".join(out)


#: A terminal selector's credit when none is given.
DEFAULT_CREDIT = 100


class Op(enum.Enum):
    """What a selector does with a matching message."""

    MOVE = "move"  # one selector gets it, round-robin among those with credit
    COPY = "copy"  # every COPY gets a copy; the message stays
    DELETE = "delete"  # processed without delivery
    BOUNCE = "bounce"  # MOVE to the message's reply_to, address and reply_to swapped


class Role(enum.Enum):
    """When a selector runs."""

    NORMAL = "normal"
    DEFAULT = "default"  # for messages no normal selector matches
    OVERFLOW = "overflow"  # for posts that find the queue full


class Position(enum.Enum):
    """Where a selector starts reading its source queue."""

    CURRENT = "current"  # MOVE: every waiting message; COPY: from now on
    HEAD = "head"  # COPY: from the oldest message in history
    SEQ = "seq"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class SelectorSpec:
    """A selector's properties, fixed when it is created."""

    source: str
    pattern: Pattern = EVERYTHING
    op: Op = Op.MOVE
    #: The queue it moves or copies to; "": terminal (a consumer).
    destination: str = ""
    #: Terminal: most deliveries not yet acked (0: DEFAULT_CREDIT). To a
    #: queue: most messages it will ever move (0: no limit).
    credit: int = 0
    unlimited_credit: bool = False
    start: Position = Position.CURRENT
    start_seq: int = 0
    #: µs since the epoch, with Position.TIME.
    start_time: int = 0
    role: Role = Role.NORMAL
    #: Push across a link: the link whose board holds ``destination``
    #: (``msgboard.links``); the messages wait in the selector's outbox.
    destination_link: str = ""
    #: Pull across a link: the link whose board holds ``source``.
    source_link: str = ""
    #: A selector that crosses a link: its translator's text (the
    #: language of ``msgboard.links.translate``); "": none.
    translator: str = ""

    @property
    def crossing(self) -> bool:
        """True when its destination is a queue on a linked board."""
        return bool(self.destination_link)

    @property
    def terminal(self) -> bool:
        """True when it delivers to a consumer rather than to a queue."""
        return self.op in (Op.MOVE, Op.COPY) and not self.destination

    def window(self) -> float:
        """A terminal selector's window: most deliveries a consumer may have
        not yet acked (the words are ``engine/selectors.py``'s)."""
        if self.unlimited_credit:
            return math.inf
        return self.credit or DEFAULT_CREDIT

    def quota(self) -> float:
        """An internal selector's quota: most messages it will move or copy."""
        if self.unlimited_credit or not self.credit:
            return math.inf
        return self.credit


class Disposition(enum.Enum):
    """What became of one posted message."""

    STORED = "stored"  # stored under its seq (then routed; drop-head: the oldest dropped)
    OVERFLOWED = "overflowed"  # the queue was full: moved to its overflow selector's queue
    DEAD_LETTERED = "dead-lettered"  # the queue was full: stored on its dead-letter queue
    DROPPED = "dropped"  # the queue was full: discarded (drop-new, an overflow DELETE, no room;
    # drop-head with every waiting message held)
    DUPLICATE = "duplicate"  # its key is held: nothing stored, the seq is the first message's


@dataclass(frozen=True, slots=True)
class Receipt:
    """The answer for one posted message: its seq on the queue (0 unless
    STORED) and what became of it."""

    seq: int
    disposition: Disposition


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message handed to a consumer (or leased by a Take): ack or nack it
    by ``id``."""

    id: int
    message: Message


#: A crossing selector's outbox: the board's own queue ``$link.`` + the
#: selector id, where what it moves or copies waits to cross its link.
OUTBOX = "$link."
#: The header that carries a message's hop count across a link: the
#: receiving board starts routing it at that count (``max-hops``).
HOPS = "x-msgboard-hops"
#: The headers that say where a forwarded message comes from.
ORIGIN_BOARD = "x-origin-board"
ORIGIN_QUEUE = "x-origin-queue"
ORIGIN_SEQ = "x-origin-seq"
#: A forwarded message's own idempotency key, kept (its key is the link's).
ORIGIN_KEY = "x-origin-key"


def outbox(sid: str) -> str:
    """The outbox queue of crossing selector ``sid``."""
    return OUTBOX + sid


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A link to another board (``msgboard.links``): its name, the remote
    board's address list and the credentials it shows there (issue 12's
    client options, the certificates as PEM text)."""

    name: str
    #: "host:port" or several, comma-separated.
    server: str
    token: str = ""
    tls_ca_pem: str = ""
    tls_cert_pem: str = ""
    tls_key_pem: str = ""
    #: TLS with the system's roots when no CA is given.
    tls: bool = False

    def redacted(self) -> LinkSpec:
        """The spec as it is shown: no token, no private key."""
        return LinkSpec(
            self.name, self.server, "", self.tls_ca_pem, self.tls_cert_pem, "", self.tls
        )
