"""Take and Read by pattern: the tuple space's ``in`` and ``rd``.

A Take removes the oldest waiting messages that match (or, with a lease,
holds them until acked); a Read returns them and leaves them. Either waits
up to its timeout for a first match: a blocked call is a ``Waiter``
(``waiters.py``), answered by the post that matches it (``Network``'s
offer). A search of the waiting messages goes through the store's index
(``Txn.find``) and is bounded: when its budget runs out it resumes in the
next group, so that a long search never holds the writer for long. A Read
that does not wait on a durable queue is answered off the writer thread
(``reads.py``). ``Taking`` is a part of the ``Board`` (board.py), which
serves its calls (``take``, ``take_leased``, ``ack_leases``, ``read``,
``release``, ``abandon``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network
from msgboard.engine.reads import Reads, Work
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import PENDING, Batch, Writer
from msgboard.errors import InvalidArgument, QueueNotFound
from msgboard.lmdbstore import Txn
from msgboard.message import TAKEN, Message, Section, now_us
from msgboard.results import Acked
from msgboard.spec import Delivery


class Taking:
    """The board's Take and Read calls, and its blocked ones."""

    def __init__(
        self, limits: Limits, writer: Writer, net: Network, waiters: Waiters, reads: Reads
    ) -> None:
        self._limits = limits
        self._writer = writer
        self._net = net
        self._waiters = waiters
        self._reads = reads

    def take_async(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> Future[list[Message]]:
        """Removes and returns up to ``max`` of the oldest waiting messages that
        match; waits up to ``timeout`` seconds for a first one (0: try once).
        Nothing in time is an empty list."""
        return self._match_async(queue, pattern, timeout, max, take=True)

    def take_leased_async(
        self,
        queue: str,
        pattern: Pattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
        *,
        lease: float,
    ) -> Future[list[Delivery]]:
        """Like take, but the messages stay in the queue, invisible to every
        one else, until acked (``ack_leases``); when the lease runs out they
        come back with their delivery count raised."""
        lease = self._limits.check_timeout(lease, "lease")
        if lease <= 0:
            raise InvalidArgument("lease: must be more than 0 seconds")
        return self._match_async(queue, pattern, timeout, max, take=True, lease=lease)

    def ack_leases_async(self, queue: str, ids: Sequence[int], nack: bool = False) -> Future[Acked]:
        """Processes leased messages for good (or, with ``nack``, gives them
        back after the queue's redelivery step, else ``NACK_BACKOFF``'s),
        once durable. Acks are per lease: the answer holds the
        leases applied (``Acked.ids``) and, one by one, the ones that could
        not be: never given or on another queue (InvalidArgument), already
        acked, given back or run out (NotFound) (``Acked.rejected``). The
        call fails only for a bad request: no ids, a bad or missing queue."""
        self._limits.check_name(queue)
        if not ids:
            raise InvalidArgument("lease_ids: at least one lease is needed")

        def run(b: Batch) -> Acked:
            b.find(queue)
            acked = self._net.holders.ack_leases(b, queue, list(ids), nack)
            self._net.pulls.settle(b)
            return acked

        return self._writer.submit(run)

    def read_async(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> Future[list[Message]]:
        """Like take, but leaves the messages where they are."""
        return self._match_async(queue, pattern, timeout, max, take=False)

    def _match_async(
        self,
        queue: str,
        pattern: Pattern | None,
        timeout: float,
        max: int,
        *,
        take: bool,
        lease: float = 0.0,
    ) -> Future[Any]:
        self._limits.check_name(queue)
        max = self._limits.check_count(max, self._limits.max_take, "max", 1)
        timeout = self._limits.check_timeout(timeout)
        pat = pattern or EVERYTHING
        deadline = time.monotonic() + timeout
        fut: Future[Any] = Future()
        net = self._net

        def run(b: Batch, start: int | None = None) -> object:
            if fut.done():  # cancelled, or abandoned while a search resumed
                return PENDING
            txn, info = b.find(queue)
            held = net.holds.held(queue)
            found: list[Message] = []
            expired: list[Message] = []
            with txn.find(queue, pat, start) as search:  # closed here, when left
                for m in search:
                    if m.seq in held:
                        continue
                    if m.expired(b.now):
                        expired.append(m)
                        continue
                    found.append(m)
                    if len(found) >= max:
                        break
            for m in expired:  # rule 8: never delivered
                net.overflow.dead(b, txn, info, m, "expired", 0)
            if not found and search.next_seq:
                # The search's budget ran out: resume in the next group, so
                # a long search never holds the writer for long.
                resume = search.next_seq
                self._writer.submit(lambda b: run(b, resume), fut)
                return PENDING
            if found:
                if not claim(fut):
                    return PENDING
                if not take:
                    return found
                if lease:
                    return net.holders.lease(b, txn, info, found, lease)
                taken = [net.process(b, txn, info, m, TAKEN) for m in found]
                b.count(queue, taken=len(taken), delivered=len(taken))
                net.pulls.settle(b)
                return taken
            net.pulls.settle(b)
            if timeout <= 0:
                return []
            w = Waiter(queue, pat, take, deadline, fut, lease=lease)
            self._waiters.add(w)
            b.undo(lambda: self._waiters.remove(w))
            return PENDING

        def peek(b: Batch) -> object:
            """A Read that does not wait: off the writer, on a durable queue."""
            _, info = b.find(queue)
            if info.spec.transient:
                return run(b)

            def make() -> Work[list[Message]]:
                held = set(net.holds.held(queue))  # delivered, leased: not for Read
                return partial(self._peek, queue, pat, max, held)

            return self._reads.later(b, fut, make)

        if not take and timeout <= 0:
            return self._writer.submit(peek, fut)
        return self._writer.submit(run, fut)

    def _peek(self, queue: str, pat: Pattern, max: int, held: set[int], view: Txn) -> list[Message]:
        """Up to ``max`` waiting messages matching ``pat`` in ``view``, none
        held or expired (the expiry sweep deals with those)."""
        if view.queue(queue) is None:
            raise QueueNotFound(queue)
        found: list[Message] = []
        now = now_us()
        start: int | None = None
        while True:
            with view.find(queue, pat, start) as search:  # on this reader thread
                for m in search:
                    if m.seq in held or m.expired(now):
                        continue
                    found.append(m)
                    if len(found) >= max:
                        return found
            if not search.next_seq:
                return found
            start = search.next_seq  # its budget ran out: go on from there

    def release(self) -> Future[None]:
        """Answers every blocked Take and Read with nothing now, as if their
        timeouts had passed (the server calls it before shutting down)."""

        def run(b: Batch) -> None:
            for w in self._waiters.all():
                if not w.claimed:
                    self._waiters.remove(w)
                    answer(w.future, [])

        return self._writer.submit(run)

    def abandon(self, queue: str, fut: Future[Any]) -> None:
        """Tells the board that the caller of a take gave up on ``fut`` (its
        client went away): a blocked take stops waiting, and messages it was
        already given go back to the queue, so nothing is lost."""

        def run(b: Batch) -> None:
            for w in self._waiters.of(queue):
                if w.future is fut:
                    self._waiters.remove(w)
            if not fut.done():
                answer(fut, [])
                return
            if fut.cancelled() or fut.exception() is not None:
                return
            found = b.lookup(queue)
            if found is None:
                return
            txn, _ = found
            for item in fut.result():
                if isinstance(item, Delivery):
                    self._net.holders.ack_leases_quietly(b, queue, item.id)
                elif item.section is Section.HISTORY:
                    txn.restore(queue, item)
            self._net.pulls.settle(b)

        self._writer.submit(run)
