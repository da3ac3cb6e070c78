"""The holders of waiting messages, and how what they hold comes back.

Two kinds of caller hold messages (``holds.py`` keeps which): a consumer,
its deliveries not yet acked, and a Take with a lease, its leases. Here
they attach and detach (a consumer), ack and nack, lease and run out. An
ack processes the message for good; a nack, a detach or a lease running
out gives it back, its delivery count raised: dead-lettered past
``max_deliveries``, else routed again after a backoff: a nack's own
delay, or the step of the consumer's or the queue's redelivery policy
(``spec.Redelivery``) for its delivery count, or with no policy
``NACK_BACKOFF`` for a nack and none for a lost consumer or lease.
``Holders`` is a part of the ``Network`` (network.py), which hands it the
routing it needs (processing a waiting message, routing one that came
back); network.py's docstring tells the rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from functools import partial

from msgboard.engine.holds import Holds
from msgboard.engine.overflow import Overflow, Process
from msgboard.engine.pulling import Pulling
from msgboard.engine.selectors import Backoff, Consumer, Lease, Selector
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import InvalidArgument, MsgboardError, NotFound
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import ACKED, Exit, ExitKind, Message, Section, stamp
from msgboard.results import Acked
from msgboard.spec import NACK_BACKOFF, Delivery, Op, Redelivery

#: Processes waiting messages into history, their Messages unused
#: (``Network.finish``).
Finish = Callable[[Batch, Txn, QueueInfo, list[Message], Exit], None]
#: Routes a message that came back (``Network.requeue``).
Requeue = Callable[[Batch, Txn, QueueInfo, Message], None]


def _refused(c: Consumer, i: int, where: str) -> MsgboardError:
    """Why delivery ``i`` (at ``where`` in the request) is not outstanding
    on ``c``."""
    if 0 < i < c.next_id:
        return NotFound(f"{where}: delivery {i} was already acked or given back", field=where)
    return InvalidArgument(f"{where}: delivery {i} was never delivered on this subscription")


def acks(
    ids: list[int],
    held: Container[int],
    refused: Callable[[int, str], MsgboardError],
    where: str,
) -> tuple[dict[int, None], dict[int, MsgboardError]]:
    """The one rule of acks, for a consumer's deliveries and for leases:
    each id is applied if it is ``held``, else answered on its own with why
    (``refused(id, path)``, the path its place in the request: ``where[k]``);
    one bad id does not stop the others. An id given twice counts once.
    Returns the ids to apply, in request order, and the rejected ones."""
    chosen: dict[int, None] = {}
    rejected: dict[int, MsgboardError] = {}
    for k, i in enumerate(ids):
        if i in held:
            chosen[i] = None
        elif i not in rejected:
            rejected[i] = refused(i, f"{where}[{k}]")
    return chosen, rejected


def delivered(m: Message) -> Message:
    """``m`` as its consumer sees it: delivery_count counts this delivery."""
    return stamp(m, m.queue, m.seq, m.posted_at, 0, m.delivery_count + 1, m.section)


class Holders:
    """The consumers and leases of one board: what they hold comes back."""

    def __init__(
        self,
        writer: Writer,
        holds: Holds,
        pulls: Pulling,
        overflow: Overflow,
        process: Process,
        finish: Finish,
        requeue: Requeue,
    ) -> None:
        self._writer = writer
        self._holds = holds
        self._pulls = pulls
        self._overflow = overflow
        self._process = process
        self._finish = finish
        self._requeue = requeue
        #: Lease id -> the lease, while it holds its message.
        self._leases: dict[int, Lease] = {}
        #: Lease ids start at this board's start time in microseconds, so no
        #: id is given twice across a restart or a failover (leases live in
        #: memory: an ack of a lease given before must never ack a message
        #: leased since). Below 2**53, so JavaScript numbers hold them; ids
        #: stay ahead of the clock unless a board leases over 10**6 a second.
        self._first_lease = max(1, time.time_ns() // 1000)
        self._next_lease = self._first_lease

    # -- consumers ----------------------------------------------------------

    def attach(self, b: Batch, s: Selector, c: Consumer) -> None:
        """Attaches a consumer to its terminal selector, which then pulls."""
        b.set(s, "consumer", c)
        self._pulls.wake(s)

    def detach(self, b: Batch, c: Consumer) -> None:
        """Ends a consumer: its outstanding messages go back to their queue,
        in seq order, with their delivery count raised."""
        s = c.selector
        if s.consumer is c:
            b.set(s, "consumer", None)
        b.set(c, "closed", True)
        ids = sorted(c.outstanding, key=lambda i: c.outstanding[i].seq)
        self._return(b, c, ids, nack=False)

    def ack(self, b: Batch, c: Consumer, ids: list[int], up_to: int) -> Acked:
        """Acks every delivery it can (``ids`` and, with ``up_to``, every
        outstanding one up to it: an ``up_to`` past the last delivery covers
        every one so far); the others are answered as rejected (``acks``'s
        rule, as for leases)."""
        outstanding = c.outstanding
        chosen, rejected = acks(ids, outstanding, partial(_refused, c), "ack.ids")
        if up_to:
            chosen.update(dict.fromkeys(i for i in outstanding if i <= up_to))
        if not chosen:
            return Acked([], rejected)
        s = c.selector
        taken = [(i, outstanding.pop(i)) for i in chosen]
        b.undo(partial(outstanding.update, taken))
        b.count(s.source, acked=len(taken))
        if s.spec.op is not Op.COPY:
            # Every message a consumer holds came from its selector's source.
            found = b.lookup(s.source)
            if found is not None:
                how = Exit(ExitKind.ACKED, "", "", s.id)
                self._finish(b, *found, [m for _, m in taken], how)
        self._pulls.wake(s)
        return Acked(list(chosen), rejected)

    def nack(
        self, b: Batch, c: Consumer, ids: list[int], reject: bool, delay: int | None = None
    ) -> list[int]:
        """Gives deliveries back, after a backoff (``delay`` µs, or the
        redelivery policy's next step), or dead-letters them (``reject``);
        every id must be outstanding."""
        chosen = self._chosen(c, ids)
        if reject:
            for i in chosen:
                m = c.outstanding.pop(i)
                b.undo(partial(c.outstanding.__setitem__, i, m))
                found = b.lookup(m.queue)
                if found is not None and c.selector.spec.op is not Op.COPY:
                    self._overflow.dead(b, *found, m, "rejected", 0)
        else:
            self._return(b, c, chosen, nack=True, wait=delay)
        self._pulls.wake(c.selector)
        return chosen

    @staticmethod
    def _chosen(c: Consumer, ids: list[int]) -> list[int]:
        for k, i in enumerate(ids):
            if i not in c.outstanding:
                raise _refused(c, i, f"nack.ids[{k}]")
        return list(dict.fromkeys(ids))

    def _return(
        self, b: Batch, c: Consumer, ids: list[int], *, nack: bool, wait: int | None = None
    ) -> None:
        """Gives outstanding deliveries back: after ``wait`` µs if given,
        else after the consumer's redelivery policy's next step, else its
        queue's, else (a nack) ``NACK_BACKOFF``'s or (a lost consumer) at
        once."""
        copy = c.selector.spec.op is Op.COPY
        for i in ids:
            m = c.outstanding.pop(i)
            b.undo(partial(c.outstanding.__setitem__, i, m))
            if copy:
                continue
            found = b.lookup(m.queue)
            if found is not None:
                policy = c.redelivery or found[1].spec.redelivery
                if policy is None and nack:
                    policy = NACK_BACKOFF
                self.give_back(b, *found, m, policy=policy, wait=wait)

    # -- giving back ----------------------------------------------------------

    def give_back(
        self,
        b: Batch,
        txn: Txn,
        info: QueueInfo,
        m: Message,
        *,
        policy: Redelivery | None,
        wait: int | None = None,
    ) -> None:
        """A held message comes back, its delivery count raised: dead-lettered
        past max_deliveries, else held back ``wait`` µs, or ``policy``'s
        step for its delivery count, or (neither) routed again at once."""
        q = info.spec.name
        back = stamp(m, q, m.seq, m.posted_at, 0, m.delivery_count + 1, Section.UNPROCESSED)
        txn.restore(q, back)
        limit = info.spec.max_deliveries
        if limit and back.delivery_count >= limit:
            self._overflow.dead(b, txn, info, back, "max-deliveries", 0)
            return
        b.count(q, redelivered=1)
        if wait is None and policy is not None:
            wait = policy.delay(back.delivery_count)
        if wait:
            hold = Backoff(q, back, b.now + wait)
            self._holds.hold(b, q, back.seq, hold)
            deadline = time.monotonic() + wait / 1e6
            b.after(partial(self._writer.at, deadline, partial(self._release, hold=hold)))
            return
        self._holds.unhold(b, q, back.seq)
        self._requeue(b, txn, info, back)

    def _release(self, b: Batch, *, hold: Backoff) -> None:
        """A backoff is over: its message is routed again."""
        if self._holds.held(hold.queue).get(hold.message.seq) is not hold:
            return
        found = b.lookup(hold.queue)
        if found is None:
            return
        txn, info = found
        self._holds.unhold(b, hold.queue, hold.message.seq)
        self._requeue(b, txn, info, hold.message)
        self._pulls.settle(b)

    # -- leases ---------------------------------------------------------

    def lease(
        self, b: Batch, txn: Txn, info: QueueInfo, msgs: list[Message], seconds: float
    ) -> list[Delivery]:
        """Holds ``msgs`` for a Take with a lease."""
        q = info.spec.name
        out = []
        deadline = time.monotonic() + seconds
        for m in msgs:
            lid = self._next_lease
            b.set(self, "_next_lease", lid + 1)
            lease = Lease(lid, q, m, since=b.now, until=b.now + round(seconds * 1e6))
            self._leases[lid] = lease
            b.undo(partial(self._leases.pop, lid, None))
            self._holds.hold(b, q, m.seq, lease)
            b.after(partial(self._writer.at, deadline, partial(self._expire, lid=lid)))
            out.append(Delivery(lid, delivered(m)))
        b.count(q, delivered=len(out))
        return out

    def _expire(self, b: Batch, *, lid: int) -> None:
        lease = self._leases.pop(lid, None)
        if lease is None:
            return
        b.undo(lambda: self._leases.__setitem__(lid, lease))
        found = b.lookup(lease.queue)
        if found is not None:
            self.give_back(b, *found, lease.message, policy=found[1].spec.redelivery)
            self._pulls.settle(b)

    def ack_leases(
        self, b: Batch, queue: str, ids: list[int], nack: bool, *, lost: bool = False
    ) -> Acked:
        """Processes every leased message it can (or, with ``nack``, gives it
        back: without a queue policy after ``NACK_BACKOFF``, or with ``lost``,
        its taker never having got it, at once); the other leases are
        answered as rejected (``acks``'s rule, as for a consumer's
        deliveries)."""
        leases = self._leases
        mine = {lid for lid in ids if lid in leases and leases[lid].queue == queue}

        def refused(lid: int, where: str) -> MsgboardError:
            if lid in leases:
                other = leases[lid].queue
                return InvalidArgument(f"{where}: lease {lid} is on queue {other!r}, not {queue!r}")
            if self._first_lease <= lid < self._next_lease:
                gone = f"{where}: lease {lid} was already acked or given back, or ran out"
                return NotFound(gone, field=where)
            if lid < self._first_lease:
                return InvalidArgument(
                    f"{where}: lease {lid} was never given by this board since it started "
                    "(leases end with a restart or a failover: a message leased before "
                    "is waiting again)"
                )
            return InvalidArgument(f"{where}: lease {lid} was never given")

        chosen, rejected = acks(ids, mine, refused, "lease_ids")
        found = b.lookup(queue)
        for lid in chosen:
            lease = self._leases.pop(lid)
            b.undo(partial(self._leases.__setitem__, lid, lease))
            if found is None:
                continue
            if nack:
                policy = found[1].spec.redelivery
                if policy is None and not lost:
                    policy = NACK_BACKOFF
                self.give_back(b, *found, lease.message, policy=policy)
            else:
                self._process(b, *found, lease.message, ACKED)
                b.count(queue, taken=1, acked=1)
        return Acked(list(chosen), rejected)

    def ack_leases_quietly(self, b: Batch, queue: str, lid: int) -> None:
        """Gives back a leased message whose taker never got it."""
        lease = self._leases.get(lid)
        if lease is not None and lease.queue == queue:
            self.ack_leases(b, queue, [lid], nack=True, lost=True)

    def leases(self, queue: str = "") -> list[Lease]:
        """The leases held now (of ``queue``, or all), oldest first."""
        return [x for x in self._leases.values() if not queue or x.queue == queue]

    def drop_queue(self, b: Batch, queue: str) -> None:
        """Forgets a deleted queue's leases."""
        for lid, lease in list(self._leases.items()):
            if lease.queue == queue:
                del self._leases[lid]
                b.undo(partial(self._leases.__setitem__, lid, lease))
