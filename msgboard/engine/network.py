"""The routing network: where a message goes when it arrives on a queue.

The rules are DESIGN.md's, in its order. When a message arrives:

1. the selectors of its queue whose pattern matches are found;
2. every matching COPY gets a copy (a terminal COPY whose consumer has no
   credit loses it, counted as dropped; the queue never stalls);
3. a matching DELETE drops it (it is processed, into history); otherwise the
   first matching MOVE or BOUNCE with credit, in round-robin order, takes it
   and goes to the back of the order;
4. matching MOVEs without credit: it waits, and the first of them to get
   credit pulls it (oldest first);
5. no selectors: it waits. Selectors, but no MOVE, BOUNCE or DELETE matched
   (COPYs do not decide a message's fate): the ``default`` selector, else the
   queue's ``unmatched`` policy;
6. a post to a full queue goes to the ``overflow`` selector, else the
   queue's overflow policy (``Board._post``);
7. processed messages go to history, as ``max_history`` bounds;
8. an expired message is dead-lettered (or discarded), never delivered:
   whoever meets it first (a Take, a pull, a return), or the expiry sweep
   (``expiry.py``) within about a second of its ``expires_at``.

A message that waits is offered to blocked Reads (every one gets it) and
then to the oldest blocked Take.

Credit. A terminal selector's credit is its consumer's window (capped by
the board's ``max_credit``) less the deliveries not yet acked, and none while
those hold ``max_outstanding_bytes`` or more; an ack gives credit back as
it is applied, in its group commit, and what that credit pulls is delivered
once the group is durable (sending it before was measured: no gain while
the server is CPU-bound, see docs/performance.md). A
selector into a queue has as much credit as that queue has room under
``max_unprocessed`` (and its own quota), so when a consumer drains the
destination the parent pulls again: credit flows up the graph. Each
selector pulls from a cursor: no waiting message below it is one it could
take, except held ones, which rewind the cursors when they come back; pulls
are bounded per operation and continue in the next one, so one busy selector
cannot hold the writer.

Delivered-but-unacked messages (and leased Takes) stay in the unprocessed
section, *held*: invisible to everyone else, in memory only. Acking
processes them; a nack, a disconnect or a lease running out gives them back
with their delivery count raised (a nack after a short, growing backoff).
If the server dies, holds die with it and the messages are simply waiting
again: at-least-once, with nothing written per delivery.

Everything here runs on the writer thread; every change to memory is
registered with ``Batch.undo`` so that a group that aborts leaves no trace.

``Network`` is written in parts, one per concern: selectors, arrival and
routing here; credit and pulling in ``pulling.py``; consumers, give-backs
and leases in ``holds.py``; dead letters and overflow in ``overflow.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from msgboard.associative import Pattern
from msgboard.associative.index import PatternIndex
from msgboard.engine.expiry import Expiry
from msgboard.engine.holds import Holds, delivered
from msgboard.engine.overflow import MAX_HOPS, Overflow, _turn, fresh
from msgboard.engine.pulling import PULL_BUDGET, Pulling
from msgboard.engine.selectors import Consumer, Lease, Selector
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import Batch, Writer
from msgboard.lmdbstore import QueueInfo, Search, Txn
from msgboard.message import Message
from msgboard.spec import Delivery, Op, Position, Role

Found = tuple[Txn, QueueInfo]
Lookup = Callable[[Batch, str], Found | None]
Waiting = Callable[[Txn, str, Pattern, int | None], Search]


@dataclass(slots=True)
class Traffic:
    """Per-queue counts since the board opened."""

    posted: int = 0
    taken: int = 0
    overflowed: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    expired: int = 0
    #: Handed to a consumer or a Take; acked (a delivery or a lease); given
    #: back to be delivered again (nack, consumer gone, lease ran out).
    delivered: int = 0
    acked: int = 0
    redelivered: int = 0
    #: dead_lettered by reason ("expired", "max-deliveries", ...).
    reasons: dict[str, int] = field(default_factory=dict)

    def copy(self) -> Traffic:
        return replace(self, reasons=dict(self.reasons))


class Network(Pulling, Holds, Overflow):
    """Selectors, consumers, holds and leases of one board."""

    def __init__(self, writer: Writer, waiters: Waiters, lookup: Lookup, waiting: Waiting):
        self._writer = writer
        self._waiters = waiters
        self._lookup = lookup
        self._waiting = waiting
        #: By id, in creation order.
        self.selectors: dict[str, Selector] = {}
        #: Source queue -> its selectors, in round-robin order.
        self._by_source: dict[str, list[Selector]] = {}
        #: Source queue -> its selectors, indexed by pattern.
        self._index: dict[str, PatternIndex[Selector]] = {}
        #: Source queue -> how many normal or default selectors it has.
        self._normal: dict[str, int] = {}
        self._turns = itertools.count(1)
        #: Destination queue -> the MOVE selectors feeding it.
        self._by_dest: dict[str, list[Selector]] = {}
        self._holds: dict[str, dict[int, object]] = {}
        self._leases: dict[int, Lease] = {}
        self._next_lease = 1
        #: The last message handed out, and as its consumers see it: the
        #: COPY consumers of one message share one delivered Message.
        self._last_out: tuple[Message, Message] | None = None
        self._work: dict[Selector, None] = {}
        self._budget = PULL_BUDGET
        self.traffic: dict[str, Traffic] = {}
        self.expiry = Expiry(writer, lookup, self.held, self._swept, self.settle)

    # -- memory changes, undone if the batch aborts ---------------------

    @staticmethod
    def _set(b: Batch, obj: object, attr: str, value: Any) -> None:
        old = getattr(obj, attr)
        setattr(obj, attr, value)
        b.undo(lambda: setattr(obj, attr, old))

    def _hold(self, b: Batch, queue: str, seq: int, owner: object) -> None:
        held = self._holds.setdefault(queue, {})
        old = held.get(seq)
        held[seq] = owner
        b.undo(lambda: held.__setitem__(seq, old) if old is not None else held.pop(seq, None))

    def _unhold(self, b: Batch, queue: str, seq: int) -> None:
        held = self._holds.get(queue)
        if held is not None and seq in held:
            old = held.pop(seq)
            b.undo(lambda: held.__setitem__(seq, old))

    def held(self, queue: str) -> dict[int, object]:
        """The queue's held seqs (do not change it)."""
        return self._holds.get(queue) or {}

    def count(self, queue: str, reason: str = "", **by: int) -> None:
        """Adds to the queue's traffic counts (call from ``Batch.after``);
        ``reason``: one more dead letter for that reason."""
        t = self.traffic.get(queue)
        if t is None:
            t = self.traffic[queue] = Traffic()
        for k, v in by.items():
            setattr(t, k, getattr(t, k) + v)
        if reason:
            t.reasons[reason] = t.reasons.get(reason, 0) + 1

    def _later(self, b: Batch, queue: str, reason: str = "", **by: int) -> None:
        b.after(lambda: self.count(queue, reason, **by))

    # -- selectors ------------------------------------------------------

    def of(self, queue: str) -> list[Selector]:
        return self._by_source.get(queue) or []

    def add(self, b: Batch, s: Selector) -> None:
        self.selectors[s.id] = s
        lst = self._by_source.setdefault(s.source, [])
        lst.append(s)
        feeds = self._by_dest.setdefault(s.spec.destination, [])
        feeds.append(s)
        self._file(s, +1)
        s.turn = next(self._turns)

        def undo() -> None:
            self._file(s, -1)
            self.selectors.pop(s.id, None)
            if s in lst:
                lst.remove(s)
            if s in feeds:
                feeds.remove(s)

        b.undo(undo)
        self._work[s] = None

    def remove(self, b: Batch, s: Selector) -> Consumer | None:
        """Drops a selector; its consumer's outstanding messages go back.
        Returns the consumer it had."""
        c = s.consumer
        if c is not None:
            self.detach(b, c)
        self.selectors.pop(s.id, None)
        lst = self._by_source.get(s.source, [])
        i = lst.index(s)
        del lst[i]
        feeds = self._by_dest.get(s.spec.destination, [])
        j = feeds.index(s)
        del feeds[j]
        self._file(s, -1)

        def undo() -> None:
            self._file(s, +1)
            self.selectors[s.id] = s
            lst.insert(i, s)
            feeds.insert(j, s)

        b.undo(undo)
        self._work.pop(s, None)
        return c

    def _file(self, s: Selector, step: int) -> None:
        """Adds (+1) or removes (-1) ``s`` in its queue's pattern index."""
        q = s.source
        index = self._index.get(q)
        if step > 0:
            if index is None:
                index = self._index[q] = PatternIndex()
            index.add(s, s.spec.pattern)
        elif index is not None:
            index.remove(s)
            if not len(index):
                del self._index[q]
        if s.spec.role is not Role.OVERFLOW:
            n = self._normal.get(q, 0) + step
            if n:
                self._normal[q] = n
            else:
                self._normal.pop(q, None)

    def reaches(self, start: str, goal: str) -> bool:
        """True if messages can flow from queue ``start`` to ``goal`` through
        internal MOVE and COPY selectors."""
        seen, todo = {start}, [start]
        while todo:
            q = todo.pop()
            if q == goal:
                return True
            for s in self.of(q):
                d = s.spec.destination
                if d and d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False

    def start(self, txn: Txn, s: Selector) -> None:
        """Places a new selector's cursor as its start position says."""
        spec, q = s.spec, s.source
        if spec.start is Position.SEQ:
            s.cursor = max(spec.start_seq, 1)
        elif spec.start is Position.TIME:
            at = txn.seq_at(q, spec.start_time)
            s.cursor = txn.counts(q).next_seq if at is None else at
        elif spec.op is Op.COPY and spec.start is Position.CURRENT:
            s.cursor = txn.counts(q).next_seq
        else:
            s.cursor = 1
        s.behind = spec.op is not Op.COPY or s.cursor < txn.counts(q).next_seq

    # -- arrival ----------------------------------------------------------

    def arrive(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, hops: int = 0) -> None:
        """Routes a message just stored on its queue."""
        q = info.spec.name
        sels = self._by_source.get(q)
        if not sels and not msg.expires_at and not self._waiters.any(q):
            return  # the common case of a plain queue: it waits
        if hops > MAX_HOPS:
            self.process(b, txn, info, msg)
            self._later(b, q, "max-hops", dead_lettered=1)
            return
        if msg.expired(b.now):
            self.dead(b, txn, info, msg, "expired", hops)
            return
        if sels and self._route(b, txn, info, msg, hops, copies=True):
            self._offer(b, txn, info, msg, takeable=False)
            return
        if msg.expires_at:  # it waits: the sweep dead-letters it in time
            self.expiry.add(q, msg)
        self._offer(b, txn, info, msg, takeable=True)

    def _route(
        self,
        b: Batch,
        txn: Txn,
        info: QueueInfo,
        msg: Message,
        hops: int,
        *,
        copies: bool,
    ) -> bool:
        """Rules 2-5 for one waiting, unheld message; True if it left."""
        fate: list[Selector] = []
        defaults: list[Selector] = []
        q = info.spec.name
        index = self._index.get(q)
        for s in index.match(msg) if index is not None else ():
            spec = s.spec
            if spec.role is Role.OVERFLOW:
                continue
            if spec.role is Role.DEFAULT:
                defaults.append(s)
                continue
            if spec.op is Op.COPY:
                if copies and not s.behind:
                    self._copy(b, s, msg, hops)
            else:
                fate.append(s)
        if not fate:
            if defaults:
                # The default selectors act as the normal ones would: every
                # COPY copies, and the MOVEs share the message round-robin.
                fate = [s for s in defaults if s.spec.op is not Op.COPY]
                if copies:
                    for s in defaults:
                        if s.spec.op is Op.COPY:
                            self._copy(b, s, msg, hops)
                if not fate:
                    return False
            elif not self._normal.get(q):
                return False  # rule 5: no selectors, it waits
            else:
                return self._unmatched(b, txn, info, msg, hops)
        for s in fate:
            if s.spec.op is Op.DELETE:
                self._take(b, txn, info, s, msg, hops)
                return True
        if len(fate) > 1:
            fate.sort(key=_turn)  # round-robin: a selector that takes goes last
        for s in fate:
            if not s.behind and self.credit(b, s) > 0:
                self._take(b, txn, info, s, msg, hops)
                self._set(b, s, "turn", next(self._turns))
                if msg.seq >= s.cursor and copies:
                    self._set(b, s, "cursor", msg.seq + 1)
                return True
        return False

    def _unmatched(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, hops: int) -> bool:
        policy = info.spec.unmatched.value
        if policy == "discard":
            self.process(b, txn, info, msg)
            return True
        if policy == "dead-letter":
            self.dead(b, txn, info, msg, "unmatched", hops)
            return True
        return False

    def _offer(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, *, takeable: bool) -> None:
        """Hands a message to the blocked calls it matches: every matching
        Read gets it, then (if it is still waiting) the oldest matching Take."""
        q = info.spec.name
        if not self._waiters.any(q):
            return
        taker: Waiter | None = None
        for w in self._waiters.match(q, msg):
            if w.claimed:
                continue
            if not claim(w.future):  # its caller gave up
                self._waiters.remove(w)
            elif not w.take:
                self._hand(b, w, [msg])
            elif taker is None and takeable:
                taker = w
        if taker is None:
            return
        if taker.lease:
            self._hand(b, taker, self.lease(b, txn, info, [msg], taker.lease))
        else:
            self._hand(b, taker, [self.process(b, txn, info, msg)])
            self._later(b, q, taken=1, delivered=1)

    def _hand(self, b: Batch, w: Waiter, found: list[Any]) -> None:
        """Gives a waiter its answer once the batch is durable."""
        w.claimed = True
        b.undo(lambda: setattr(w, "claimed", False))

        def wake() -> None:
            self._waiters.remove(w)
            answer(w.future, found)

        b.after(wake)

    # -- what selectors do --------------------------------------------------

    def _take(
        self, b: Batch, txn: Txn, info: QueueInfo, s: Selector, msg: Message, hops: int
    ) -> None:
        """``s`` (DELETE, MOVE or BOUNCE) takes the waiting ``msg``."""
        spec, q = s.spec, info.spec.name
        if spec.terminal:
            c = s.consumer
            assert c is not None
            held = self._holds.setdefault(q, {})
            if msg.seq in held:
                self._hold(b, q, msg.seq, c)
            else:
                held[msg.seq] = c  # undone with the group's deliveries
            self._hand_out(b, c, msg)  # counted by its group's flush
            return
        sid = s.id
        b.after(lambda: self._bump(sid))
        if spec.op is Op.DELETE:
            self.process(b, txn, info, msg)
        elif spec.op is Op.BOUNCE:
            self.process(b, txn, info, msg)
            self._set(b, s, "quota", s.quota - 1)
            if not msg.reply_to or self._room(b, msg.reply_to) <= 0:
                self.dead_letter(b, info, msg, "bounce: no room in reply_to", hops)
                return
            headers = {**msg.headers, "x-bounced-from": msg.address}
            out = Message(
                tuple=msg.tuple,
                address=msg.reply_to,
                priority=msg.priority,
                headers=headers,
                reply_to=msg.address if msg.address else q,
                expires_at=msg.expires_at,
                content_type=msg.content_type,
                body=msg.body,
            )
            self.append(b, msg.reply_to, out, hops + 1)
        else:
            self.process(b, txn, info, msg)
            self._set(b, s, "quota", s.quota - 1)
            self.append(b, spec.destination, fresh(msg), hops + 1)

    def _bump(self, sid: str, dropped: int = 0) -> None:
        s = self.selectors.get(sid)
        if s is not None:
            if dropped:
                s.dropped += dropped
            else:
                s.delivered += 1

    def _copy(self, b: Batch, s: Selector, msg: Message, hops: int) -> bool:
        """``s`` copies ``msg``; False if it could not (no credit or room):
        the copy is lost to it and counted."""
        spec, sid = s.spec, s.id
        if spec.terminal:
            c = s.consumer
            if c is None or c.closed:
                return True  # a terminal COPY delivers only while attached
            if c.credit() <= 0:
                b.after(lambda: self._bump(sid, dropped=1))
                self._later(b, spec.source, dropped=1)
                return False
            self._hand_out(b, c, msg)  # counted by its group's flush
            return True
        if s.quota <= 0 or self._room(b, spec.destination) <= 0:
            b.after(lambda: self._bump(sid, dropped=1))
            self._later(b, spec.source, dropped=1)
            return False
        self._set(b, s, "quota", s.quota - 1)
        self.append(b, spec.destination, fresh(msg), hops + 1)
        b.after(lambda: self._bump(sid))
        return True

    def _hand_out(self, b: Batch, c: Consumer, msg: Message) -> None:
        """Gives ``msg`` to consumer ``c`` under its next delivery id."""
        did = c.next_id
        if not c.flushing:
            self._first_out(b, c, did)
        c.next_id = did + 1
        c.outstanding.add(did, msg)
        last = self._last_out
        if last is None or last[0] is not msg:
            last = self._last_out = (msg, delivered(msg))
        c.pending.append(Delivery(did, last[1]))

    def _first_out(self, b: Batch, c: Consumer, did: int) -> None:
        """``c``'s first delivery (``did``) in this group: one undo and one
        flush for all of its deliveries in the group, not one each. The
        undo runs after those of whatever the group did later (acks, give
        backs, a detach), which put back what they took: the group's
        deliveries are then exactly the ids from ``did`` on, and it also
        drops the holds they made (``_take``)."""
        pending = c.pending
        n = len(pending)
        c.flushing = True

        def undo() -> None:
            out = c.outstanding
            held = self._holds.get(c.selector.source)
            for i in range(did, c.next_id):
                m = out.pop(i, None)
                if held and m is not None and held.get(m.seq) is c:
                    del held[m.seq]
            c.next_id = did
            del pending[n:]
            c.flushing = False

        b.undo(undo)
        b.after(lambda: self._flush(c))

    def _flush(self, c: Consumer) -> None:
        batch, c.pending = c.pending, []
        c.flushing = False
        s = self.selectors.get(c.selector.id)
        if s is not None:
            s.delivered += len(batch)  # one for each message handed out
        if batch and not c.closed:
            c.deliver(batch)
            self.count(c.selector.source, delivered=len(batch))

    def append(self, b: Batch, name: str, msg: Message, hops: int) -> int:
        """Posts ``msg`` to queue ``name`` from inside the network (a MOVE,
        COPY, BOUNCE or dead letter) and routes it there; 0 if the queue is
        gone."""
        found = self._lookup(b, name)
        if found is None:
            return 0
        txn, info = found
        stored = txn.append(name, msg, b.now)
        b.stored += 1
        self._later(b, name, posted=1)
        self.arrive(b, txn, info, stored, hops)
        return stored.seq

    def process(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> Message:
        """Processes a waiting message into history (a Take, an ack, a
        DELETE, a MOVE out); the queue has room again, so the selectors
        feeding it may pull."""
        q = info.spec.name
        self._unhold(b, q, msg.seq)
        done = txn.process(q, msg.seq, b.now, info.spec.max_history, msg)
        self._drained(q)
        return done

    def finish(self, b: Batch, txn: Txn, info: QueueInfo, msgs: list[Message]) -> None:
        """Processes waiting messages into history as ``process`` does, for
        a caller that does not use them (an ack): no history Message built,
        and one undo for the holds the messages leave, not one each."""
        q = info.spec.name
        held = self._holds.get(q)
        if held:
            gone = [(m.seq, held.pop(m.seq)) for m in msgs if m.seq in held]
            if gone:
                b.undo(partial(held.update, gone))
        finish, now, most = txn.finish, b.now, info.spec.max_history
        for m in msgs:
            finish(q, m.seq, now, most, m)
        self._drained(q)

    def _drained(self, queue: str) -> None:
        feeds = self._by_dest.get(queue)
        if feeds:
            for s in feeds:
                self._work[s] = None

    # -- a message comes back ---------------------------------------------

    def requeue(self, b: Batch, txn: Txn, info: QueueInfo, m: Message) -> None:
        """Routes a message that came back (not its COPYs again); if it waits,
        every selector that could take it is rewound to it."""
        q = info.spec.name
        if m.expired(b.now):
            self.dead(b, txn, info, m, "expired", 0)
            return
        index = self._index.get(q)
        if index is not None and self._route(b, txn, info, m, 0, copies=False):
            return
        for s in index.match(m) if index is not None else ():
            if s.spec.op is not Op.COPY and s.cursor > m.seq:
                self._set(b, s, "cursor", m.seq)
                self._work[s] = None
        self._offer(b, txn, info, m, takeable=True)

    # -- a queue goes -----------------------------------------------------

    def queue_gone(self, b: Batch, queue: str) -> list[tuple[Selector, Consumer | None]]:
        """Forgets a deleted queue's holds and leases, and removes the
        selectors reading it or writing to it; returns those selectors and
        their consumers."""
        holds = self._holds.pop(queue, None)
        if holds is not None:
            b.undo(lambda: self._holds.__setitem__(queue, holds))
        for lid, lease in list(self._leases.items()):
            if lease.queue == queue:
                del self._leases[lid]
                b.undo(partial(self._leases.__setitem__, lid, lease))
        gone = [s for s in self.selectors.values() if queue in (s.source, s.spec.destination)]
        out = []
        for s in gone:
            c = s.consumer
            if c is not None and s.source == queue:
                stale = dict(c.outstanding)
                c.outstanding.clear()
                b.undo(partial(c.outstanding.update, stale))
            out.append((s, self.remove(b, s)))
        return out

    def figures(self) -> dict[str, tuple[int, int, int]]:
        """Queue -> (selectors, consumers, outstanding), for the queues that
        have any: a copy, for a read off the writer thread."""
        out: dict[str, tuple[int, int, int]] = {}
        for q, sels in self._by_source.items():
            if sels:
                out[q] = (len(sels), self.consumers(q), self.outstanding(q))
        for q, held in self._holds.items():
            if held and q not in out:
                out[q] = (0, 0, len(held))
        return out

    def consumers(self, queue: str) -> int:
        return sum(1 for s in self.of(queue) if s.consumer is not None)

    def outstanding(self, queue: str) -> int:
        return len(self._holds.get(queue) or ())
