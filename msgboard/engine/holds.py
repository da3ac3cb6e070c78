"""What consumers and leased Takes hold, and how it comes back: attaching
and detaching consumers, acks and nacks, giving a held message back (with a
backoff after a nack, dead-lettered past ``max_deliveries``), and leases.
``Holds`` is a part of ``Network`` (network.py), which provides the holds
table, the routing and the undo helpers it uses; network.py's docstring
tells the rules.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from msgboard.engine.selectors import Acked, Backoff, Consumer, Lease, Selector
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import InvalidArgument, MsgboardError, NotFound
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Message, Section, stamp
from msgboard.spec import Delivery, Op

if TYPE_CHECKING:
    from msgboard.engine.network import Lookup

#: A nacked message's first backoff, doubled per delivery, capped.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


def _refused(c: Consumer, i: int) -> MsgboardError:
    """Why delivery ``i`` is not outstanding on ``c``."""
    if 0 < i < c.next_id:
        return NotFound(f"delivery {i} was already acked or given back")
    return InvalidArgument(f"delivery {i} was never delivered on this subscription")


def delivered(m: Message) -> Message:
    """``m`` as its consumer sees it: delivery_count counts this delivery."""
    return stamp(m, m.queue, m.seq, m.posted_at, 0, m.delivery_count + 1, m.section)


class Holds:
    """Network's consumer, give-back and lease methods."""

    # Provided by Network (network.py).
    _writer: Writer
    _lookup: Lookup
    _leases: dict[int, Lease]
    _next_lease: int
    _work: dict[Selector, None]

    if TYPE_CHECKING:

        @staticmethod
        def _set(b: Batch, obj: object, attr: str, value: Any) -> None: ...

        def _hold(self, b: Batch, queue: str, seq: int, owner: object) -> None: ...

        def _unhold(self, b: Batch, queue: str, seq: int) -> None: ...

        def held(self, queue: str) -> dict[int, object]: ...

        def _later(self, b: Batch, queue: str, reason: str = "", **by: int) -> None: ...

        def process(self, b: Batch, txn: Txn, info: QueueInfo, msg: Message) -> Message: ...

        def finish(self, b: Batch, txn: Txn, info: QueueInfo, msgs: list[Message]) -> None: ...

        def dead(
            self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, reason: str, hops: int
        ) -> None: ...

        def requeue(self, b: Batch, txn: Txn, info: QueueInfo, m: Message) -> None: ...

        def settle(self, b: Batch) -> None: ...

    # -- consumers ----------------------------------------------------------

    def attach(self, b: Batch, s: Selector, c: Consumer) -> None:
        self._set(b, s, "consumer", c)
        self._work[s] = None

    def detach(self, b: Batch, c: Consumer) -> None:
        """Ends a consumer: its outstanding messages go back to their queue,
        in seq order, with their delivery count raised."""
        s = c.selector
        if s.consumer is c:
            self._set(b, s, "consumer", None)
        self._set(b, c, "closed", True)
        ids = sorted(c.outstanding, key=lambda i: c.outstanding[i].seq)
        self._return(b, c, ids, delay=False)

    def ack(self, b: Batch, c: Consumer, ids: list[int], up_to: int) -> Acked:
        """Acks every delivery it can (``ids`` and, with ``up_to``, every
        outstanding one up to it); the others are answered as rejected. A
        repeated ack is harmless."""
        outstanding = c.outstanding
        chosen: dict[int, None] = {}
        rejected: dict[int, MsgboardError] = {}
        for i in ids:
            if i in outstanding:
                chosen[i] = None
            elif i not in chosen:
                rejected[i] = _refused(c, i)
        if up_to:
            if up_to >= c.next_id:
                rejected[up_to] = InvalidArgument(f"up_to: delivery {up_to} was never delivered")
            else:
                chosen.update(dict.fromkeys(i for i in outstanding if i <= up_to))
        if not chosen:
            return Acked([], rejected)
        s = c.selector
        taken = [(i, outstanding.pop(i)) for i in chosen]
        b.undo(partial(outstanding.update, taken))
        self._later(b, s.source, acked=len(taken))
        if s.spec.op is not Op.COPY:
            # Every message a consumer holds came from its selector's source.
            found = self._lookup(b, s.source)
            if found is not None:
                self.finish(b, *found, [m for _, m in taken])
        self._work[s] = None
        return Acked(list(chosen), rejected)

    def nack(self, b: Batch, c: Consumer, ids: list[int], reject: bool) -> list[int]:
        chosen = self._chosen(c, ids, 0)
        if reject:
            for i in chosen:
                m = c.outstanding.pop(i)
                b.undo(partial(c.outstanding.__setitem__, i, m))
                found = self._lookup(b, m.queue)
                if found is not None and c.selector.spec.op is not Op.COPY:
                    self.dead(b, *found, m, "rejected", 0)
        else:
            self._return(b, c, chosen, delay=True)
        self._work[c.selector] = None
        return chosen

    @staticmethod
    def _chosen(c: Consumer, ids: list[int], up_to: int) -> list[int]:
        for i in ids:
            if i not in c.outstanding:
                raise _refused(c, i)
        if up_to >= c.next_id:
            raise InvalidArgument(f"up_to: delivery {up_to} was never delivered")
        chosen = dict.fromkeys(ids)
        if up_to:
            chosen.update(dict.fromkeys(i for i in c.outstanding if i <= up_to))
        return list(chosen)

    def _return(self, b: Batch, c: Consumer, ids: list[int], *, delay: bool) -> None:
        copy = c.selector.spec.op is Op.COPY
        for i in ids:
            m = c.outstanding.pop(i)
            b.undo(partial(c.outstanding.__setitem__, i, m))
            if copy:
                continue
            found = self._lookup(b, m.queue)
            if found is not None:
                self.give_back(b, *found, m, delay=delay)

    def give_back(self, b: Batch, txn: Txn, info: QueueInfo, m: Message, *, delay: bool) -> None:
        """A held message comes back, its delivery count raised: dead-lettered
        past max_deliveries, else held back a moment (``delay``) or routed
        again at once."""
        q = info.spec.name
        back = stamp(m, q, m.seq, m.posted_at, 0, m.delivery_count + 1, Section.UNPROCESSED)
        txn.restore(q, back)
        limit = info.spec.max_deliveries
        if limit and back.delivery_count >= limit:
            self.dead(b, txn, info, back, "max-deliveries", 0)
            return
        self._later(b, q, redelivered=1)
        if delay:
            hold = Backoff(q, back)
            self._hold(b, q, back.seq, hold)
            wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (back.delivery_count - 1))
            deadline = time.monotonic() + wait
            b.after(partial(self._writer.at, deadline, partial(self._release, hold=hold)))
            return
        self._unhold(b, q, back.seq)
        self.requeue(b, txn, info, back)

    def _release(self, b: Batch, *, hold: Backoff) -> None:
        if self.held(hold.queue).get(hold.message.seq) is not hold:
            return
        found = self._lookup(b, hold.queue)
        if found is None:
            return
        txn, info = found
        self._unhold(b, hold.queue, hold.message.seq)
        self.requeue(b, txn, info, hold.message)
        self.settle(b)

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
            self._set(b, self, "_next_lease", lid + 1)
            lease = Lease(lid, q, m)
            self._leases[lid] = lease
            b.undo(partial(self._leases.pop, lid, None))
            self._hold(b, q, m.seq, lease)
            b.after(partial(self._writer.at, deadline, partial(self._expire, lid=lid)))
            out.append(Delivery(lid, delivered(m)))
        self._later(b, q, delivered=len(out))
        return out

    def _expire(self, b: Batch, *, lid: int) -> None:
        lease = self._leases.pop(lid, None)
        if lease is None:
            return
        b.undo(lambda: self._leases.__setitem__(lid, lease))
        found = self._lookup(b, lease.queue)
        if found is not None:
            self.give_back(b, *found, lease.message, delay=False)
            self.settle(b)

    def ack_leases(self, b: Batch, queue: str, ids: list[int], nack: bool) -> None:
        for lid in ids:
            lease = self._leases.get(lid)
            if lease is None:
                if 0 < lid < self._next_lease:
                    raise NotFound(f"lease {lid}: already acked or ran out")
                raise InvalidArgument(f"lease {lid} was never given")
            if lease.queue != queue:
                raise InvalidArgument(f"lease {lid} is on queue {lease.queue!r}, not {queue!r}")
        found = self._lookup(b, queue)
        for lid in dict.fromkeys(ids):
            lease = self._leases.pop(lid)
            b.undo(partial(self._leases.__setitem__, lid, lease))
            if found is None:
                continue
            if nack:
                self.give_back(b, *found, lease.message, delay=False)
            else:
                self.process(b, *found, lease.message)
                self._later(b, queue, taken=1, acked=1)

    def ack_leases_quietly(self, b: Batch, queue: str, lid: int) -> None:
        """Gives back a leased message whose taker never got it."""
        lease = self._leases.get(lid)
        if lease is not None and lease.queue == queue:
            self.ack_leases(b, queue, [lid], nack=True)
