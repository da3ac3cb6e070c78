"""Where a message goes when it cannot stay: dead letters (expired,
rejected, past ``max_deliveries``, unmatched or overflowing by policy) and
overflow (rule 6: a post to a full queue). ``Overflow`` is a part of
``Network`` (network.py), which provides the routing and the undo helpers it
uses; network.py's docstring tells the rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from msgboard.engine.events import DEAD_LETTERED, Events
from msgboard.engine.selectors import Selector
from msgboard.engine.writer import Batch
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Message, Section, stamp
from msgboard.spec import Disposition, Op, Role

#: Most hops one message makes through selectors in one arrival (a bound on
#: BOUNCE and dead-letter loops; static MOVE/COPY cycles are refused).
MAX_HOPS = 32


def _turn(s: Selector) -> int:
    return s.turn


def fresh(m: Message) -> Message:
    """``m`` as a new post: the fields the board sets cleared."""
    return stamp(m, "", 0, 0, 0, 0, Section.UNPROCESSED)


class Overflow:
    """Network's dead-letter and overflow methods."""

    # Provided by Network (network.py); events by Board (board.py).
    _turns: Iterator[int]
    events: Events

    if TYPE_CHECKING:

        @staticmethod
        def _set(b: Batch, obj: object, attr: str, value: Any) -> None: ...

        def _later(self, b: Batch, queue: str, reason: str = "", **by: int) -> None: ...

        def of(self, queue: str) -> list[Selector]: ...

        def process(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> Message: ...

        def _room(self, b: Batch, name: str) -> float: ...

        def append(self, b: Batch, name: str, msg: Message, hops: int) -> int: ...

        def _bump(self, sid: str, dropped: int = 0) -> None: ...

    # -- dead letters -----------------------------------------------------

    def dead(
        self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, reason: str, hops: int
    ) -> None:
        """Processes a waiting message and sends it to the dead-letter queue."""
        if reason == "expired":
            self._later(b, info.spec.name, expired=1)
        self.process(b, txn, info, msg)
        self.dead_letter(b, info, msg, reason, hops)

    def dead_letter(self, b: Batch, info: QueueInfo, msg: Message, reason: str, hops: int) -> bool:
        """Sends ``msg`` (not stored on its queue) to the queue's dead-letter
        queue, with headers saying why and whence; discarded when there is
        none, it is gone or it is full. Counted either way; True if stored."""
        spec = info.spec
        self._later(b, spec.name, reason, dead_lettered=1)
        self.events.emit(b, DEAD_LETTERED, spec.name, msg.seq, reason, about=spec.name)
        dlq = spec.dead_letter
        if not dlq or self._room(b, dlq) <= 0 or hops > MAX_HOPS:
            return False
        headers = {
            **msg.headers,
            "x-dead-letter-reason": reason,
            "x-dead-letter-queue": spec.name,
            "x-dead-letter-seq": str(msg.seq),
        }
        out = dataclasses.replace(fresh(msg), headers=headers, expires_at=0)
        return self.append(b, dlq, out, hops + 1) > 0

    def _swept(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> None:
        self.dead(b, txn, info, msg, "expired", 0)

    # -- overflow ---------------------------------------------------------

    def has_overflow(self, queue: str) -> bool:
        return any(s.spec.role is Role.OVERFLOW for s in self.of(queue))

    def overflow(self, b: Batch, info: QueueInfo, msg: Message) -> Disposition:
        """Rule 6: a post found the queue full. The matching overflow selectors
        take it round-robin, as MOVEs do: the first, in turn, with quota and
        room in its queue (an overflow DELETE drops it). With none that can,
        the overflow policy: dead-letter, or drop (drop-new, or reject when
        every overflow selector's queue is full too). Says what became of it."""
        q = info.spec.name
        self._later(b, q, overflowed=1)
        sels = [
            s for s in self.of(q) if s.spec.role is Role.OVERFLOW and s.spec.pattern.matches(msg)
        ]
        if len(sels) > 1:
            sels.sort(key=_turn)
        for s in sels:
            spec = s.spec
            if spec.op is Op.DELETE:
                self._set(b, s, "turn", next(self._turns))
                return Disposition.DROPPED
            if s.quota > 0 and self._room(b, spec.destination) > 0:
                self._set(b, s, "quota", s.quota - 1)
                self._set(b, s, "turn", next(self._turns))
                b.after(partial(self._bump, s.id))
                self.append(b, spec.destination, msg, 1)
                return Disposition.OVERFLOWED
        if info.spec.overflow.value == "dead-letter" and self.dead_letter(
            b, info, msg, "overflow", 0
        ):
            return Disposition.DEAD_LETTERED
        return Disposition.DROPPED
