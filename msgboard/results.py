"""What the board answers with, as plain data: the result types the engine
returns and the Python client rebuilds from the wire (``QueueView``,
``Page``, ``QueueStats``, ``SelectorView``, ``ConsumerView``, ``BoardStats``
and its ``StoreInfo``, ``Acked``, ``Purged``, ``Moved``, ``LeaseView``),
and where a Browse page starts (``Start``).

Their one home, below both: the engine, the store and the server import
them from here (the engine does not re-export them), and so does
``msgboard.client``, which thus loads neither the engine nor
LMDB (a client speaks only gRPC).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from msgboard.errors import MsgboardError
from msgboard.message import Message
from msgboard.spec import LinkSpec, QueueSpec, SelectorSpec


class Start(enum.Enum):
    """Where a Browse page starts."""

    OLDEST = "oldest"
    LATEST = "latest"
    SEQ = "seq"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue's properties and counts at one moment."""

    spec: QueueSpec
    created_at: int
    unprocessed: int
    history: int
    next_seq: int
    waiting: int
    #: Posted with a not_before still to come: stored, not yet visible.
    scheduled: int = 0


@dataclass(frozen=True, slots=True)
class Page:
    """One Browse page; ``next_seq`` starts the next (0: no more)."""

    messages: list[Message]
    next_seq: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str
    transient: bool
    unprocessed: int
    history: int
    waiting: int
    posted: int
    taken: int
    overflowed: int
    ready: int
    outstanding: int
    consumers: int
    dropped: int
    dead_lettered: int
    selectors: int
    expired: int
    #: Damaged records met (and skipped) since the board started.
    damaged: int = 0
    scheduled: int = 0


@dataclass(frozen=True, slots=True)
class SelectorView:
    """A selector and its figures at one moment."""

    id: str
    spec: SelectorSpec
    durable: bool
    attached: bool
    outstanding: int
    delivered: int
    dropped: int


@dataclass(frozen=True, slots=True)
class LinkView:
    """A link to another board and its figures at one moment (since the
    board started): its spec without secrets, its state ("connecting",
    "connected", "disconnected"), messages the remote stored from it and
    refused as duplicates, sent and not yet answered, waiting here to cross
    (and the oldest one's age, s), why its last call failed, the selectors
    crossing it and when its state last changed (µs)."""

    spec: LinkSpec
    state: str
    connected: bool
    forwarded: int = 0
    duplicates: int = 0
    in_flight: int = 0
    lag_messages: int = 0
    lag_seconds: float = 0.0
    last_error: str = ""
    selectors: tuple[str, ...] = ()
    since: int = 0


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """The store's figures for Stats."""

    durable: bool
    #: "fsync", "weaker-no-fsync" (LMDB) or "memory".
    sync: str
    map_size: int
    map_used: int
    #: Write transactions that changed something, since open.
    commits: int


@dataclass(frozen=True, slots=True)
class BoardStats:
    store: StoreInfo
    commits: int
    committed_ops: int
    queues: list[QueueStats]
    #: The board's stable id (``board-id`` in its directory); "" when the
    #: answer did not say (an embedded board's Stats leaves it to the server).
    board_id: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerView:
    """One consumer at one moment."""

    id: str
    #: The client's address as gRPC gives it ("ipv4:127.0.0.1:5555"); ""
    #: for a consumer attached in-process.
    peer: str
    #: The user it authenticated as; "" on an open board.
    identity: str
    queue: str
    selector: str
    #: "move" or "copy".
    op: str
    #: Its effective credit (window capped by the board); inf: unlimited.
    credit: float
    outstanding: int
    delivered: int
    #: When it attached, µs since the epoch.
    since: int
    #: When the oldest delivery it has not acked was handed out, µs since
    #: the epoch; 0: none outstanding. Not on the wire (ListConsumers):
    #: the console reads it in-process.
    oldest: int = 0


@dataclass(frozen=True, slots=True)
class Acked:
    """What an ack request did, of a consumer's deliveries or of Take's
    leases: acks are per id, so the ids it could apply are ``ids`` and each
    one it could not (never delivered or given, already acked or given back,
    a lease run out or on another queue) is in ``rejected`` with the reason,
    whose ``field`` is the id's place in the request (``lease_ids[1]``); a
    rejected id is information, not a failure of the others."""

    ids: list[int]
    rejected: dict[int, MsgboardError] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge removed: waiting messages, and history records."""

    purged: int
    history: int


@dataclass(frozen=True, slots=True)
class Moved:
    """One message a move took: its seq on the source, the queue it went
    to and the seq it has there."""

    seq: int
    queue: str
    new_seq: int


@dataclass(frozen=True, slots=True)
class LeaseView:
    """A message taken with a lease and not yet acked, at one moment: the
    lease's id (which ``Ack`` takes), its queue and seq, when it was given
    and when it runs out (µs since the epoch)."""

    id: int
    queue: str
    seq: int
    since: int
    until: int
