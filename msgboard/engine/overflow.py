"""Where a message goes when it cannot stay: dead letters (expired,
rejected, past ``max_deliveries``, unmatched or overflowing by policy) and
overflow (rule 6: a post to a full queue). ``Overflow`` is a part of the
``Network`` (network.py), which hands it the routing it needs (processing a
waiting message, appending to a queue, the held messages); network.py's
docstring tells the rules.

The drop-head policy makes room instead: the oldest waiting message that
is not held (delivered or leased, not yet acked) leaves, processed with the
exit ``dropped`` (reason ``overflow``), and the post is stored. Scheduled
messages are not waiting, so never dropped; one that comes due into a full
drop-head queue makes room as a post does. Like every policy it acts on
posts and on scheduled messages coming due, not on what selectors move or
copy into the queue: those wait for room (credit.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from functools import partial

from msgboard.engine.credit import room
from msgboard.engine.events import DEAD_LETTERED, Events
from msgboard.engine.table import Table, by_turn
from msgboard.engine.writer import Batch
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Exit, ExitKind, Message, Section, stamp
from msgboard.spec import Disposition, Op, OverflowPolicy, Role

#: Most hops one message makes through selectors in one arrival (a bound on
#: BOUNCE and dead-letter loops; static MOVE/COPY cycles are refused).
MAX_HOPS = 32

#: Processes a waiting message into history (``Network.process``).
Process = Callable[[Batch, Txn, QueueInfo, Message, Exit], Message]
#: Posts a message to a queue from inside the network and routes it there;
#: its seq, 0 if the queue is gone (``Network.append``).
Append = Callable[[Batch, str, Message, int], int]
#: A queue's held seqs and their holders (``Holds.held``).
Held = Callable[[str], dict[int, object]]

#: How a message dropped to make room for a post leaves (drop-head).
_DROPPED_HEAD = Exit(ExitKind.DROPPED, "overflow")


def fresh(m: Message) -> Message:
    """``m`` as a new post: the fields the board sets cleared."""
    return stamp(m, "", 0, 0, 0, 0, Section.UNPROCESSED)


class Overflow:
    """The dead letters and overflow of one board (writer thread)."""

    def __init__(
        self, table: Table, events: Events, process: Process, append: Append, held: Held
    ) -> None:
        self._table = table
        self._events = events
        self._process = process
        self._append = append
        self._held = held

    # -- dead letters -----------------------------------------------------

    def dead(
        self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, reason: str, hops: int
    ) -> None:
        """Processes a waiting message and sends it to the dead-letter queue;
        its history record says so (expired or dead-lettered, with the
        reason and the queue it will be stored on, "" if discarded)."""
        kind = ExitKind.DEAD_LETTERED
        if reason == "expired":
            b.count(info.spec.name, expired=1)
            kind = ExitKind.EXPIRED
        self._process(b, txn, info, msg, Exit(kind, reason, self.target(b, info, hops)))
        self.dead_letter(b, info, msg, reason, hops)

    def target(self, b: Batch, info: QueueInfo, hops: int) -> str:
        """The dead-letter queue that ``dead_letter`` will store a message
        of ``info``'s queue on once it has left that queue (as ``dead``
        processes it first), "" if it will be discarded: the same test."""
        dlq = info.spec.dead_letter
        if not dlq or hops > MAX_HOPS:
            return ""
        if dlq != info.spec.name and room(b, dlq) <= 0:
            return ""
        return dlq

    def dead_letter(self, b: Batch, info: QueueInfo, msg: Message, reason: str, hops: int) -> bool:
        """Sends ``msg`` (not stored on its queue) to the queue's dead-letter
        queue, with headers saying why and whence; discarded when there is
        none, it is gone or it is full. Counted either way; True if stored."""
        spec = info.spec
        b.count(spec.name, reason, dead_lettered=1)
        self._events.emit(b, DEAD_LETTERED, spec.name, msg.seq, reason, about=spec.name)
        dlq = spec.dead_letter
        if not dlq or room(b, dlq) <= 0 or hops > MAX_HOPS:
            return False
        headers = {
            **msg.headers,
            "x-dead-letter-reason": reason,
            "x-dead-letter-queue": spec.name,
            "x-dead-letter-seq": str(msg.seq),
        }
        out = dataclasses.replace(fresh(msg), headers=headers, expires_at=0)
        return self._append(b, dlq, out, hops + 1) > 0

    def expired(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> None:
        """Dead-letters a waiting message the expiry sweep found expired."""
        self.dead(b, txn, info, msg, "expired", 0)

    # -- overflow ---------------------------------------------------------

    def takes(self, b: Batch, info: QueueInfo, msg: Message) -> bool:
        """Whether a scheduled message released into its full queue can go
        (``released``): always, unless the policy is reject and neither an
        overflow selector nor the dead-letter queue has room for it."""
        spec = info.spec
        if spec.overflow is not OverflowPolicy.REJECT or self._selected(b, info, msg):
            return True
        return bool(spec.dead_letter) and room(b, spec.dead_letter) > 0

    def _selected(self, b: Batch, info: QueueInfo, msg: Message) -> bool:
        """Whether an overflow selector of the queue would take ``msg``."""
        for s in self._table.of(info.spec.name):
            if s.spec.role is not Role.OVERFLOW or not s.spec.pattern.matches(msg):
                continue
            if s.spec.op is Op.DELETE or (s.quota > 0 and room(b, s.spec.destination) > 0):
                return True
        return False

    def makes_room(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> bool:
        """For a scheduled ``msg`` coming due into its full queue: under
        drop-head, when no overflow selector would take it, drops the
        oldest waiting message for it; True if it did (``msg`` then comes
        in as into a queue with room)."""
        if info.spec.overflow is not OverflowPolicy.DROP_HEAD or self._selected(b, info, msg):
            return False
        if not self._drop_head(b, txn, info):
            return False
        b.count(info.spec.name, overflowed=1)
        return True

    def _drop_head(self, b: Batch, txn: Txn, info: QueueInfo) -> bool:
        """Drop-head: the oldest waiting message that is not held leaves,
        dropped (dead-lettered as expired if it has expired); False if every
        waiting message is held. It is read, and the walk closed, before
        anything is written."""
        q = info.spec.name
        held = self._held(q)
        if len(held) >= txn.counts(q).unprocessed:
            return False  # every waiting message is held: no walk
        head = None
        with contextlib.closing(txn.scan(q, Section.UNPROCESSED)) as rows:
            for m in rows:
                if m.seq not in held:
                    head = m
                    break
        if head is None:
            return False
        if not head.expired(b.now):
            self._process(b, txn, info, head, _DROPPED_HEAD)
            return True
        self.dead(b, txn, info, head, "expired", 0)
        # Room, unless the dead letter came back (a queue its own dead-letter queue).
        return txn.counts(q).unprocessed < info.spec.max_unprocessed

    def released(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> None:
        """A scheduled message was released into its full queue: it leaves
        it (processed) and goes where a post's overflow would, but with no
        poster to refuse, reject dead-letters it (``takes`` said it can).
        Its history record says where it went: moved by an overflow
        selector (to its queue, at the seq it got there), dead-lettered or
        dropped, reason ``overflow``."""
        went, moved = self._routed(b, txn, info, msg, dead=True)
        if moved is not None:
            how = moved
        elif went is Disposition.DEAD_LETTERED:
            how = Exit(ExitKind.DEAD_LETTERED, "overflow", info.spec.dead_letter)
        else:
            how = Exit(ExitKind.DROPPED, "overflow")
        self._process(b, txn, info, msg, how)

    def route(
        self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, *, dead: bool = False
    ) -> Disposition:
        """Rule 6: a post found the queue full. The matching overflow selectors
        take it round-robin, as MOVEs do: the first, in turn, with quota and
        room in its queue (an overflow DELETE drops it). With none that can,
        the overflow policy: dead-letter, or drop (drop-new, or reject when
        every overflow selector's queue is full too; with ``dead``, reject
        dead-letters too); drop-head (not with ``dead``: ``makes_room`` was
        asked first) drops the oldest waiting message and answers STORED:
        the post is to be stored, or drops the post if every waiting
        message is held. Says what became of it."""
        return self._routed(b, txn, info, msg, dead=dead)[0]

    def _routed(
        self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, *, dead: bool = False
    ) -> tuple[Disposition, Exit | None]:
        """``route``, and for a message an overflow selector moved, its exit
        (the selector, the queue and the seq it got there)."""
        q = info.spec.name
        b.count(q, overflowed=1)
        sels = [
            s
            for s in self._table.of(q)
            if s.spec.role is Role.OVERFLOW and s.spec.pattern.matches(msg)
        ]
        if len(sels) > 1:
            sels.sort(key=by_turn)
        for s in sels:
            spec = s.spec
            if spec.op is Op.DELETE:
                self._table.to_back(b, s)
                return Disposition.DROPPED, None
            if s.quota > 0 and room(b, spec.destination) > 0:
                b.set(s, "quota", s.quota - 1)
                self._table.to_back(b, s)
                b.after(partial(self._table.bump, s.id))
                at = self._append(b, spec.destination, fresh(msg), 1)
                how = Exit(ExitKind.MOVED, "overflow", spec.destination, s.id, at)
                return Disposition.OVERFLOWED, how
        policy = info.spec.overflow
        if policy is OverflowPolicy.DROP_HEAD:
            if not dead and self._drop_head(b, txn, info):
                return Disposition.STORED, None
            return Disposition.DROPPED, None
        if (
            policy is not OverflowPolicy.DROP_NEW
            and (dead or policy is OverflowPolicy.DEAD_LETTER)
            and self.dead_letter(b, info, msg, "overflow", 0)
        ):
            return Disposition.DEAD_LETTERED, None
        return Disposition.DROPPED, None
