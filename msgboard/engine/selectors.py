"""Selectors, consumers and deliveries: the parts of the routing network.

A selector reads one source queue with a pattern and an operation (MOVE,
COPY, DELETE, BOUNCE) toward a destination queue or, when it has none, a
terminal consumer attached through Subscribe. ``SelectorSpec`` is what a
client asks for and what the store keeps; ``Selector`` is its running state
on the writer thread: credit, the cursor it pulls waiting messages from, and
its consumer. ``network.py`` routes messages through them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from msgboard.message import Message
from msgboard.spec import Delivery, SelectorSpec


@dataclass(eq=False, slots=True)
class Lease:
    """A message taken with a lease: invisible until acked or run out."""

    id: int
    queue: str
    #: As stored: delivery_count does not count this delivery.
    message: Message
    done: bool = False


@dataclass(eq=False, slots=True)
class Backoff:
    """A nacked message held back for a moment before redelivery."""

    queue: str
    message: Message


@dataclass(eq=False, slots=True)
class Consumer:
    """A client attached to a terminal selector. ``deliver`` and ``end`` are
    called on the writer thread, once a batch is durable: they must only
    hand over (e.g. ``loop.call_soon_threadsafe``)."""

    selector: Selector
    window: float
    deliver: Callable[[list[Delivery]], None]
    #: Called once when the board ends the subscription (its queue or
    #: selector deleted, the board closing), with the reason.
    end: Callable[[BaseException | None], None]
    #: Delivery id -> message as stored (MOVE) or as copied (COPY).
    outstanding: dict[int, Message] = field(default_factory=dict)
    next_id: int = 1
    pending: list[Delivery] = field(default_factory=list)
    flushing: bool = False
    closed: bool = False

    def credit(self) -> float:
        return self.window - len(self.outstanding)


@dataclass(eq=False, slots=True)
class Selector:
    """A selector's running state (writer thread only)."""

    id: str
    spec: SelectorSpec
    #: Kept in the durable store (its source queue is durable, and it is no
    #: subscription's session selector).
    durable: bool
    session: bool
    #: Internal selectors: messages it may still move or copy.
    quota: float = math.inf
    consumer: Consumer | None = None
    #: MOVE/DELETE: no waiting message below it is one this selector could
    #: take (except held ones, which rewind it when they come back). COPY:
    #: the next seq its replay copies.
    cursor: int = 1
    #: It has messages to pull before it takes new arrivals (a COPY
    #: replaying, or a pull cut short by its budget).
    behind: bool = False
    delivered: int = 0
    dropped: int = 0
    #: Round-robin order among MOVEs: the lowest turn goes first; a selector
    #: that takes a message gets the next turn, to the back of the line.
    turn: int = 0

    @property
    def source(self) -> str:
        return self.spec.source
