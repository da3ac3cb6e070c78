"""Selectors, consumers and deliveries: the parts of the routing network.

A selector reads one source queue with a pattern and an operation (MOVE,
COPY, DELETE, BOUNCE) toward a destination queue or, when it has none, a
terminal consumer attached through Subscribe. ``SelectorSpec`` is what a
client asks for and what the store keeps; ``Selector`` is its running state
on the writer thread: its quota, the cursor it pulls waiting messages from,
and its consumer. ``network.py`` routes messages through them.

Credit, in the engine's words (the wire's are the proto's):

- **credit**: how many messages a selector may take now
  (``credit.credit``). A DELETE takes any; the others spend a budget
  named after what it bounds:
- **window**, a consumer's (for a terminal selector): the most deliveries
  it may have outstanding, delivered and not acked. It is what the
  subscription asked for, else its selector's (``SelectorSpec.window()``),
  widened by AddCredit and capped by the board's ``max_credit``
  (``Consumer.window``, which the wire calls the effective credit). A
  consumer's credit is its window less its outstanding deliveries, and
  none while they hold ``max_outstanding_bytes`` (``Consumer.credit()``);
  an ack gives it back.
- **quota**, an internal selector's (to a queue, or a BOUNCE): the most
  messages it will still move or copy, counted down
  (``SelectorSpec.quota()``, ``Selector.quota``; no limit unless asked).
- **room**, a queue's: how many more messages it takes under its
  ``max_unprocessed`` (``credit.room``). A selector to a queue may take
  the lesser of its quota and its destination's room, so credit flows up
  the graph as consumers drain the queues below.

``SelectorSpec.credit`` is the wire's one field for both budgets (a
terminal selector's window, an internal one's quota); the engine reads it
through ``window()`` and ``quota()``.

So no client can make the server hold much for it, a consumer is bounded
twice: by ``max_credit`` (whatever window it asks for) and by
``max_outstanding_bytes``, the bytes of the messages it has outstanding
(these include the deliveries still queued for sending, so the send queue
is bounded too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from msgboard.message import Message, size
from msgboard.spec import Delivery, Redelivery, SelectorSpec


@dataclass(eq=False, slots=True)
class Lease:
    """A message taken with a lease: invisible until acked or run out."""

    id: int
    queue: str
    #: As stored: delivery_count does not count this delivery.
    message: Message
    done: bool = False
    #: When it was given and when it runs out, µs since the epoch.
    since: int = 0
    until: int = 0


@dataclass(eq=False, slots=True)
class Backoff:
    """A nacked message held back for a moment before redelivery."""

    queue: str
    message: Message
    #: When it is routed again, µs since the epoch.
    until: int = 0


#: What one outstanding message costs in memory beyond its ``size``.
OVERHEAD = 64


class Outstanding(dict[int, Message]):
    """Delivery id -> message, keeping the bytes its messages hold (each
    its ``size`` and ``OVERHEAD``) in ``bytes`` through every change the
    network makes: what ``max_outstanding_bytes`` caps."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __setitem__(self, key: int, m: Message) -> None:
        old = self.get(key)
        if old is not None:
            self.bytes -= size(old) + OVERHEAD
        super().__setitem__(key, m)
        self.bytes += size(m) + OVERHEAD

    def add(self, key: int, m: Message) -> None:
        """``self[key] = m`` for a ``key`` it does not have (a new delivery)."""
        dict.__setitem__(self, key, m)
        self.bytes += size(m) + OVERHEAD

    def __delitem__(self, key: int) -> None:
        self.bytes -= size(self[key]) + OVERHEAD
        super().__delitem__(key)

    def pop(self, key: int, *default: Any) -> Any:
        if key in self:
            m = super().pop(key)
            self.bytes -= size(m) + OVERHEAD
            return m
        return super().pop(key, *default)

    def update(  # type: ignore[override]
        self, items: Mapping[int, Message] | Iterable[tuple[int, Message]] = (), /
    ) -> None:
        for k, m in dict(items).items():
            self[k] = m

    def clear(self) -> None:
        super().clear()
        self.bytes = 0


@dataclass(eq=False, slots=True)
class Consumer:
    """A client attached to a terminal selector. ``deliver`` and ``end`` are
    called on the writer thread, once a batch is durable: they must only
    hand over (e.g. ``loop.call_soon_threadsafe``)."""

    selector: Selector
    #: The most deliveries it may have outstanding: asked for, widened by
    #: AddCredit, capped by ``max_credit``.
    window: float
    deliver: Callable[[list[Delivery]], None]
    #: Called once when the board ends the subscription (its queue or
    #: selector deleted, the board closing), with the reason.
    end: Callable[[BaseException | None], None]
    #: The board's caps: the widest window, most message bytes outstanding.
    max_credit: float = math.inf
    max_bytes: float = math.inf
    #: Delivery id -> message as stored (MOVE) or as copied (COPY).
    outstanding: Outstanding = field(default_factory=Outstanding)
    next_id: int = 1
    #: Deliveries handed out in the running group, and that group's batch
    #: (network.py's ``_first_out``); None between groups.
    pending: list[Delivery] = field(default_factory=list)
    flushing: object = None
    closed: bool = False
    #: Who it is, for ListConsumers: its id ("con-N"), when it attached
    #: (µs), and what the server knows of the client (address, user).
    id: str = ""
    since: int = 0
    peer: str = ""
    identity: str = ""
    #: Its own redelivery policy (Subscribe); None: its queue's.
    redelivery: Redelivery | None = None
    #: (first delivery id, µs) of each group of deliveries handed out, in
    #: order, kept while one of the group's deliveries is outstanding (and
    #: the last group's): what ``oldest`` reads. One entry a group, not one
    #: a delivery; ``prune`` drops the others.
    handed: list[tuple[int, int]] = field(default_factory=list)

    def credit(self) -> float:
        """How many more messages it may be handed now."""
        if self.outstanding.bytes >= self.max_bytes:
            return 0
        return self.window - len(self.outstanding)

    def oldest(self) -> int:
        """When the oldest delivery it has not acked was handed out, µs
        since the epoch (the time of the group that handed it out); 0 when
        it has none outstanding."""
        if not self.outstanding:
            return 0
        lo = min(self.outstanding)
        at = self.handed[0][1] if self.handed else 0
        for first, when in self.handed:
            if first > lo:
                break
            at = when
        return at

    def prune(self) -> list[tuple[int, int]]:
        """Keeps the groups that have a delivery outstanding, and the last
        one (at most one entry per outstanding delivery, plus one); returns
        the list as it was, so that an undo can put it back."""
        h = self.handed
        ids = sorted(self.outstanding)
        kept: list[tuple[int, int]] = []
        j = 0
        for k, entry in enumerate(h):
            end = h[k + 1][0] if k + 1 < len(h) else math.inf
            while j < len(ids) and ids[j] < entry[0]:
                j += 1
            if end == math.inf or (j < len(ids) and ids[j] < end):
                kept.append(entry)
        was = h[:]
        h[:] = kept
        return was


@dataclass(eq=False, slots=True)
class Selector:
    """A selector's running state (writer thread only)."""

    id: str
    spec: SelectorSpec
    #: Kept in the durable store (its source queue is durable, and it is no
    #: subscription's session selector).
    durable: bool
    session: bool
    #: An internal selector's: messages it may still move or copy.
    quota: float = math.inf
    consumer: Consumer | None = None
    #: MOVE/DELETE: no waiting message below it is one this selector could
    #: take (except held ones, which rewind it when they come back). COPY:
    #: the next seq its replay copies.
    cursor: int = 1
    #: It has messages to pull before it takes new arrivals (a COPY
    #: replaying, or a pull cut short by its budget).
    behind: bool = False
    #: A replaying COPY's: seqs of scheduled messages that came due after
    #: its replay had gone past them, copied before the replay goes on.
    owed: tuple[int, ...] = ()
    delivered: int = 0
    dropped: int = 0
    #: Round-robin order among MOVEs: the lowest turn goes first; a selector
    #: that takes a message gets the next turn, to the back of the line.
    turn: int = 0
    #: A crossing selector's spec as created (its remote queue), kept and
    #: shown; ``spec`` routes into its outbox (``linked.py``).
    shown: SelectorSpec | None = None

    @property
    def source(self) -> str:
        return self.spec.source
