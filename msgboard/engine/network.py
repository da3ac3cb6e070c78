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

Credit (window, quota and room are defined in ``selectors.py``). A
terminal selector's credit is its consumer's window (capped by the board's
``max_credit``) less the deliveries not yet acked, and none while
those hold ``max_outstanding_bytes`` or more; an ack gives credit back as
it is applied, in its group commit, and what that credit pulls is delivered
once the group is durable (sending it before was measured: no gain while
the server is CPU-bound, see docs/performance.md). A
selector into a queue has as much credit as that queue has room under
``max_unprocessed`` (and its own quota at most), so when a consumer drains the
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

Everything here runs on the writer thread; every change to memory goes
through the batch (``b.set``, ``b.undo``, ``b.count``: writer.py) so that a
group that aborts leaves no trace.

``Network`` routes (arrival, rules 1-5, handing out, processing, messages
coming back) and composes the parts that own the rest, each an object
with its own state, given the routing it needs when the network makes it:

- ``table`` (``Table``, table.py): every selector, filed by source,
  pattern and destination;
- ``holds`` (``Holds``, holds.py): which waiting messages are held, by whom;
- ``holders`` (``Holders``, holders.py): consumers attaching and
  detaching, acks, nacks, leases, and held messages coming back;
- ``pulls`` (``Pulling``, pulling.py): the selectors that may pull, and
  their pulls (how much each may take: ``credit.py``);
- ``overflow`` (``Overflow``, overflow.py): dead letters and rule 6;
- ``expiry`` (``Expiry``, expiry.py): the expiry sweep.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from msgboard.engine.credit import credit, room
from msgboard.engine.events import Events
from msgboard.engine.expiry import Expiry
from msgboard.engine.holders import Holders, delivered
from msgboard.engine.holds import Holds
from msgboard.engine.linked import stamped
from msgboard.engine.overflow import MAX_HOPS, Overflow, fresh
from msgboard.engine.pulling import Pulling
from msgboard.engine.selectors import Consumer, Selector
from msgboard.engine.table import Table, by_turn
from msgboard.engine.traffic import count
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import Batch, Writer
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import TAKEN, Exit, ExitKind, Message
from msgboard.spec import Delivery, Op, Role


class Network:
    """The routing network of one board: its selectors, what they hold,
    and where each message goes."""

    def __init__(self, writer: Writer, waiters: Waiters, events: Events) -> None:
        self._waiters = waiters
        self._traffic = writer.traffic
        self.table = Table()
        self.holds = Holds()
        self.overflow = Overflow(self.table, events, self.process, self.append, self.holds.held)
        self.pulls = Pulling(writer, self.table, self.holds, self.overflow, self.take, self.copy)
        self.holders = Holders(
            writer, self.holds, self.pulls, self.overflow, self.process, self.finish, self.requeue
        )
        self.expiry = Expiry(writer, self.holds.held, self.overflow.expired, self.pulls.settle)
        #: The last message handed out, and as its consumers see it: the
        #: COPY consumers of one message share one delivered Message.
        self._last_out: tuple[Message, Message] | None = None

    # -- selectors come and go ----------------------------------------------

    def add(self, b: Batch, s: Selector) -> None:
        """Adds a selector; it pulls what waits for it at the end of the
        operation."""
        self.table.add(b, s)
        self.pulls.wake(s)

    def remove(self, b: Batch, s: Selector) -> Consumer | None:
        """Drops a selector; its consumer's outstanding messages go back.
        Returns the consumer it had."""
        c = s.consumer
        if c is not None:
            self.holders.detach(b, c)
        self.table.remove(b, s)
        self.pulls.forget(s)
        return c

    # -- arrival ----------------------------------------------------------

    def arrive(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, hops: int = 0) -> None:
        """Routes a message just stored on its queue."""
        q = info.spec.name
        sels = self.table.of(q)
        if not sels and not msg.expires_at and not self._waiters.any(q):
            return  # the common case of a plain queue: it waits
        if hops > MAX_HOPS:  # never sent to a dead-letter queue
            self.process(b, txn, info, msg, Exit(ExitKind.DEAD_LETTERED, "max-hops"))
            b.count(q, "max-hops", dead_lettered=1)
            return
        if msg.expired(b.now):
            self.overflow.dead(b, txn, info, msg, "expired", hops)
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
        for s in self.table.match(q, msg):
            spec = s.spec
            if spec.role is Role.OVERFLOW:
                continue
            if spec.role is Role.DEFAULT:
                defaults.append(s)
                continue
            if spec.op is Op.COPY:
                if copies and not s.behind:
                    self.copy(b, s, msg, hops)
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
                            self.copy(b, s, msg, hops)
                if not fate:
                    return False
            elif not self.table.normal(q):
                return False  # rule 5: no selectors, it waits
            else:
                return self._unmatched(b, txn, info, msg, hops)
        for s in fate:
            if s.spec.op is Op.DELETE:
                self.take(b, txn, info, s, msg, hops)
                return True
        if len(fate) > 1:
            fate.sort(key=by_turn)  # round-robin: a selector that takes goes last
        for s in fate:
            if not s.behind and credit(b, s) > 0:
                self.take(b, txn, info, s, msg, hops)
                self.table.to_back(b, s)
                if msg.seq >= s.cursor and copies:
                    b.set(s, "cursor", msg.seq + 1)
                return True
        return False

    def _unmatched(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, hops: int) -> bool:
        policy = info.spec.unmatched.value
        if policy == "discard":
            self.process(b, txn, info, msg, Exit(ExitKind.DROPPED, "unmatched"))
            return True
        if policy == "dead-letter":
            self.overflow.dead(b, txn, info, msg, "unmatched", hops)
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
            self._hand(b, taker, self.holders.lease(b, txn, info, [msg], taker.lease))
        else:
            self._hand(b, taker, [self.process(b, txn, info, msg, TAKEN)])
            b.count(q, taken=1, delivered=1)

    def _hand(self, b: Batch, w: Waiter, found: list[Any]) -> None:
        """Gives a waiter its answer once the batch is durable."""
        w.claimed = True
        b.undo(lambda: setattr(w, "claimed", False))

        def wake() -> None:
            self._waiters.remove(w)
            if b.failed is None:
                answer(w.future, found)
            elif not w.future.done():  # a held group that failed: no OK
                w.future.set_exception(b.failed)

        b.after(wake)

    # -- what selectors do --------------------------------------------------

    def take(
        self, b: Batch, txn: Txn, info: QueueInfo, s: Selector, msg: Message, hops: int
    ) -> None:
        """``s`` (DELETE, MOVE or BOUNCE) takes the waiting ``msg``."""
        spec, q = s.spec, info.spec.name
        if spec.terminal:
            c = s.consumer
            assert c is not None
            self.holds.deliver(b, q, msg.seq, c)
            self._hand_out(b, c, msg)  # counted by its group's flush
            return
        b.after(partial(self.table.bump, s.id))
        if spec.op is Op.DELETE:
            self.process(b, txn, info, msg, Exit(ExitKind.DROPPED, "delete", "", s.id))
        elif spec.op is Op.BOUNCE:
            b.set(s, "quota", s.quota - 1)
            # Its own queue has room once it has left it (processed first).
            fits = msg.reply_to == q or room(b, msg.reply_to) > 0
            if not msg.reply_to or not fits:
                why = "bounce: no room in reply_to"
                dlq = self.overflow.target(b, info, hops)
                self.process(b, txn, info, msg, Exit(ExitKind.DEAD_LETTERED, why, dlq, s.id))
                self.overflow.dead_letter(b, info, msg, why, hops)
                return
            at = self.landing(b, msg.reply_to)
            self.process(b, txn, info, msg, Exit(ExitKind.MOVED, "bounce", msg.reply_to, s.id, at))
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
            out, to = self._out(s, msg, hops), spec.destination
            at = self.landing(b, to, out.key)
            self.process(b, txn, info, msg, Exit(ExitKind.MOVED, "selector", to, s.id, at))
            b.set(s, "quota", s.quota - 1)
            self.append(b, to, out, self._next(s, hops))

    def copy(self, b: Batch, s: Selector, msg: Message, hops: int) -> bool:
        """``s`` copies ``msg``; False if it could not (no credit or room):
        the copy is lost to it and counted."""
        spec = s.spec
        if spec.terminal:
            c = s.consumer
            if c is None or c.closed:
                return True  # a terminal COPY delivers only while attached
            if c.credit() <= 0:
                b.after(partial(self.table.bump, s.id, dropped=1))
                b.count(spec.source, dropped=1)
                return False
            self._hand_out(b, c, msg)  # counted by its group's flush
            return True
        if s.quota <= 0 or room(b, spec.destination) <= 0:
            b.after(partial(self.table.bump, s.id, dropped=1))
            b.count(spec.source, dropped=1)
            return False
        b.set(s, "quota", s.quota - 1)
        self.append(b, spec.destination, self._out(s, msg, hops), self._next(s, hops))
        b.after(partial(self.table.bump, s.id))
        return True

    @staticmethod
    def _next(s: Selector, hops: int) -> int:
        """The hop count ``s``'s destination routes at: one more, but 0 in
        a crossing selector's outbox, whose count travels in the message
        (the receiving board stops a loop; the outbox, with no selectors,
        never routes it)."""
        return hops + 1 if s.shown is None else 0

    @staticmethod
    def _out(s: Selector, msg: Message, hops: int) -> Message:
        """What selector ``s`` moves or copies of ``msg``: a new post, and
        into a crossing selector's outbox with its hop count and origin."""
        if s.shown is None:
            return fresh(msg)
        return stamped(fresh(msg), hops + 1, msg.queue, msg.seq)

    def _hand_out(self, b: Batch, c: Consumer, msg: Message) -> None:
        """Gives ``msg`` to consumer ``c`` under its next delivery id."""
        did = c.next_id
        if c.flushing is not b:
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
        group's deliveries go in a list of their own (``c.pending`` while
        the group runs, ``c.flushing`` its batch), sent by the group's own
        flush: a replicated board releases a group only once its standbys
        have it, and a later group's deliveries must not leave with an
        earlier one's. The undo runs after those of whatever the group did
        later (acks, give backs, a detach), which put back what they took:
        the group's deliveries are then exactly the ids from ``did`` on,
        and it also drops the holds they made (``Holds.deliver``)."""
        pending: list[Delivery] = []
        c.pending = pending
        c.flushing = b
        handed = c.handed
        handed.append((did, b.now))

        def undo() -> None:
            out = c.outstanding
            taken = [out.pop(i, None) for i in range(did, c.next_id)]
            self.holds.undeliver(c.selector.source, c, [m for m in taken if m is not None])
            c.next_id = did
            pending.clear()
            c.flushing = None
            if handed and handed[-1][0] == did:
                handed.pop()

        b.undo(undo)
        # The groups' times are kept while they have a delivery outstanding:
        # the others are dropped here once the entries outnumber twice the
        # deliveries outstanding (a sort of those, every so many groups: a
        # group costs O(log n) amortized), so a consumer that keeps one
        # delivery unacked for hours holds a few entries, not hours'.
        if len(handed) > 2 * len(c.outstanding) + 16:
            b.undo(partial(handed.__setitem__, slice(None), c.prune()))
        b.after(lambda: self._flush(c, pending, b))

    def _flush(self, c: Consumer, batch: list[Delivery], b: Batch) -> None:
        """Sends the deliveries ``batch`` handed out in group ``b`` (once it
        is durable); a group that failed (``b.failed``) ends the consumer's
        subscription with the error instead: its deliveries stay
        outstanding and come back when it detaches."""
        if c.flushing is b:
            c.flushing = None
            c.pending = []
        s = self.table.selectors.get(c.selector.id)
        if s is not None:
            s.delivered += len(batch)  # one for each message handed out
        if not batch or c.closed:
            return
        if b.failed is not None:
            c.end(b.failed)
            return
        c.deliver(batch)
        count(self._traffic, c.selector.source, "", {"delivered": len(batch)})

    def append(self, b: Batch, name: str, msg: Message, hops: int) -> int:
        """Posts ``msg`` to queue ``name`` from inside the network (a MOVE,
        COPY, BOUNCE or dead letter) and routes it there; 0 if the queue is
        gone. A message whose key the queue holds is not stored again:
        the holder's seq."""
        found = b.lookup(name)
        if found is None:
            return 0
        txn, info = found
        if msg.key:
            seq = txn.keyed(name, msg.key, b.now)
            if seq:
                b.count(name, duplicates=1)
                return seq
        stored = txn.append(name, msg, b.now)
        b.stored += 1
        b.count(name, posted=1)
        self.arrive(b, txn, info, stored, hops)
        return stored.seq

    def landing(self, b: Batch, name: str, key: str = "") -> int:
        """The seq ``append`` gives a message with ``key`` in queue ``name``
        if it is the next one there (the holder's for a key the queue
        holds; 0 if the queue is gone): a move records it in the source's
        history record, written before the message lands."""
        found = b.lookup(name)
        if found is None:
            return 0
        txn = found[0]
        if key:
            seq = txn.keyed(name, key, b.now)
            if seq:
                return seq
        return txn.counts(name).next_seq

    def process(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, how: Exit) -> Message:
        """Processes a waiting message into history (a Take, an ack, a
        DELETE, a MOVE out), recording ``how`` it left; the queue has room
        again, so the selectors feeding it may pull."""
        q = info.spec.name
        self.holds.unhold(b, q, msg.seq)
        done = txn.process(q, msg.seq, b.now, info.spec.max_history, msg, how)
        self.pulls.drained(q)
        b.count(q, left=1)
        return done

    def finish(self, b: Batch, txn: Txn, info: QueueInfo, msgs: list[Message], how: Exit) -> None:
        """Processes waiting messages into history as ``process`` does, for
        a caller that does not use them (an ack): no history Message built,
        and one undo for the holds the messages leave, not one each."""
        q = info.spec.name
        self.holds.finish(b, q, msgs)
        finish, now, most = txn.finish, b.now, info.spec.max_history
        for m in msgs:
            finish(q, m.seq, now, most, m, how)
        self.pulls.drained(q)
        b.count(q, left=len(msgs))

    def release(self, b: Batch, txn: Txn, info: QueueInfo, seq: int, at: int) -> bool:
        """Moves a scheduled message now due to the waiting ones, under its
        seq, and routes it as if it had just arrived: into a full queue its
        overflow (``Overflow.released``; False, left scheduled, when reject
        has nowhere to put it; drop-head makes room, ``makes_room``); else
        the selectors that could take it and have gone past its seq are
        rewound to it (a COPY still replaying that has gone past it owes
        it: ``Selector.owed``)."""
        q = info.spec.name
        limit = info.spec.max_unprocessed
        if limit and txn.counts(q).unprocessed >= limit:
            due = txn.fetch(q, seq)
            if due is not None and not self.overflow.takes(b, info, due):
                return False
            if due is None or not self.overflow.makes_room(b, txn, info, due):
                m = txn.release(q, seq, at)
                if m is not None:
                    self.overflow.released(b, txn, info, m)
                return True
        m = txn.release(q, seq, at)
        if m is None:
            return True
        for s in self.table.match(q, m):
            if s.cursor <= m.seq:
                continue
            if s.spec.op is not Op.COPY:
                b.set(s, "cursor", m.seq)
                self.pulls.wake(s)
            elif s.behind and s.spec.role is not Role.OVERFLOW:  # its replay skipped it
                b.set(s, "owed", (*s.owed, m.seq))
                self.pulls.wake(s)
        self.arrive(b, txn, info, m)
        return True

    # -- a message comes back ---------------------------------------------

    def requeue(self, b: Batch, txn: Txn, info: QueueInfo, m: Message) -> None:
        """Routes a message that came back (not its COPYs again); if it waits,
        every selector that could take it is rewound to it."""
        q = info.spec.name
        if m.expired(b.now):
            self.overflow.dead(b, txn, info, m, "expired", 0)
            return
        if self._route(b, txn, info, m, 0, copies=False):
            return
        for s in self.table.match(q, m):
            if s.spec.op is not Op.COPY and s.cursor > m.seq:
                b.set(s, "cursor", m.seq)
                self.pulls.wake(s)
        self._offer(b, txn, info, m, takeable=True)

    # -- a queue goes -----------------------------------------------------

    def queue_gone(self, b: Batch, queue: str) -> list[tuple[Selector, Consumer | None]]:
        """Forgets a deleted queue's holds and leases, and removes the
        selectors reading it or writing to it; returns those selectors and
        their consumers."""
        self.holds.drop_queue(b, queue)
        self.holders.drop_queue(b, queue)
        gone = [s for s in self.table.selectors.values() if queue in (s.source, s.spec.destination)]
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
        holds = self.holds
        out = {q: (n, c, holds.outstanding(q)) for q, (n, c) in self.table.figures().items()}
        for q, n in holds.counts().items():
            if q not in out:
                out[q] = (0, 0, n)
        return out
