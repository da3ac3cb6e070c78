"""The board: the embeddable engine, usable in-process with no gRPC.

::

    with Board("./data") as board:
        board.create_queue(QueueSpec("jobs"))
        board.post("jobs", [Message(tuple=("job", 1))])
        [msg] = board.take("jobs", Pattern(templates=(template("job", int),)))

Every method checks its arguments on the caller's thread, then hands an
operation to the single writer thread (``writer.py``), which runs it inside
the next group commit. ``xxx_async`` returns a ``concurrent.futures.Future``
answered once the operation is durable; ``xxx`` waits for it. Never call the
waiting form from inside an operation.

Durable queues live in LMDB, transient ones in memory; a queue's name is
unique across both. Selectors, subscriptions and leases are routed by the
network (``network.py``); the board checks arguments and wires the calls.

``Board`` is written in parts, one per concern: queues, posting, taking and
leases here; selectors and subscriptions in ``subscriptions.py``; Browse,
Stats and snapshots in ``browsing.py``; the types it answers with in
``views.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from msgboard import codec
from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine import events as ev
from msgboard.engine.browsing import BROWSE_SCAN_LIMIT, Browsing
from msgboard.engine.consumers import Consumers, ConsumerView
from msgboard.engine.events import Events, SystemQueue, reserved
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network
from msgboard.engine.reads import Reads, Work
from msgboard.engine.selectors import Consumer, Selector
from msgboard.engine.subscriptions import Subscriptions
from msgboard.engine.views import (
    BoardStats,
    Page,
    QueueStats,
    QueueView,
    SelectorView,
    Start,
    _merged,
)
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import PENDING, Batch, Writer
from msgboard.errors import DataFileDamaged, InvalidArgument, QueueExists, QueueFull, QueueNotFound
from msgboard.lmdbstore import DurableStore, MemoryStore, QueueInfo, Search, Txn
from msgboard.message import Message, Section, now_us
from msgboard.spec import (
    Delivery,
    Disposition,
    Op,
    OverflowPolicy,
    QueueSpec,
    Receipt,
    differences,
)
from msgboard.v1 import board_pb2 as pb

__all__ = [
    "BROWSE_SCAN_LIMIT",
    "Board",
    "BoardStats",
    "ConsumerView",
    "Page",
    "QueueStats",
    "QueueView",
    "SelectorView",
    "Start",
]


class Board(Subscriptions, Browsing, Consumers, SystemQueue):
    """One board over one data directory."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        limits: Limits | None = None,
        map_size: int = 256 * 1024 * 1024,
    ) -> None:
        self.limits = limits or Limits()
        self.path = os.fspath(path)
        self._durable = DurableStore(self.path, sync=sync, map_size=map_size)
        self._memory = MemoryStore()
        self._waiters = Waiters()
        self._writer = Writer(self._durable, self._memory, self._waiters)
        self._net = Network(self._writer, self._waiters, self._lookup, self._waiting)
        self._reads = Reads(self._durable)
        self._sessions = itertools.count(1)
        # The hook the engine announces its events through, posted on $sys.
        self.events = self._net.events = Events(self._writer, self._post_events)
        try:
            self._writer.submit(self._load).result()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def failure(self) -> BaseException | None:
        """Why the board stopped writing, if its writer thread died."""
        return self._writer.failure

    def on_failure(self, fn: Callable[[BaseException], object]) -> None:
        """Has ``fn`` called (on the writer thread) if the writer dies: from
        then on every call fails with Unavailable, and whoever serves the
        board must stop serving it."""
        self._writer.on_failure = fn

    def close(self) -> None:
        """Finishes submitted work, answers blocked calls with nothing, ends
        the subscriptions and closes the stores."""
        if not self._writer.closed:
            with contextlib.suppress(Exception):  # closing anyway
                self._writer.submit(self._end_all).result()
        self._writer.stop()
        self._reads.close()
        self._durable.close()
        self._memory.close()

    def _load(self, b: Batch) -> None:
        """Brings back the durable selectors (a read per selector, none per
        message); MOVEs pull what waits for them."""
        txn = b.txn(True)
        for sid, data in txn.selectors():
            try:
                spec = codec.selector_spec_from_pb(pb.SelectorSpec.FromString(data), stored=True)
            except Exception as e:  # DecodeError, InvalidArgument: damaged on disk
                raise DataFileDamaged(
                    f"{self.path}: selector {sid}: its stored spec does not parse ({e}); "
                    f"msgboard check {self.path} tells more"
                ) from None
            dest = spec.destination
            if txn.queue(spec.source) is None or (dest and self._lookup(b, dest) is None):
                # Its destination was a transient queue, gone with the restart:
                # the selector goes too, as when a queue is deleted.
                txn.delete_selector(sid)
                continue
            s = Selector(sid, spec, durable=True, session=False, quota=spec.quota())
            if spec.op is Op.COPY:
                s.cursor = txn.counts(spec.source).next_seq
            else:
                s.behind = True
            self._net.add(b, s)
        self._net.settle(b)
        self._net.expiry.catch_up(b, [info.spec.name for info in txn.queues()])
        self._open_sys(b)

    def _end_all(self, b: Batch) -> None:
        for s in list(self._net.selectors.values()):
            c = s.consumer
            if c is not None:
                self._net.detach(b, c)
                b.after(partial(c.end, None))

    # -- queues ---------------------------------------------------------

    def create_queue_async(self, spec: QueueSpec) -> Future[QueueView]:
        spec = self.limits.check_spec(spec)

        def run(b: Batch) -> QueueView:
            found = self._lookup(b, spec.name)
            if found is not None:
                txn, info = found
                if info.spec != spec:
                    raise QueueExists(
                        f'queue "{spec.name}" exists with {differences(info.spec, spec)}'
                    )
                return self._view(txn, info)
            txn = b.txn(not spec.transient)
            txn.create_queue(spec, b.now)
            kind = "transient" if spec.transient else "durable"
            self.events.emit(b, ev.QUEUE_CREATED, spec.name, kind)
            return self._view(txn, QueueInfo(spec, b.now))

        return self._writer.submit(run)

    def create_queue(self, spec: QueueSpec) -> QueueView:
        """Creates a queue; the same spec again returns it (idempotent), another
        spec under the same name is QueueExists."""
        return self.create_queue_async(spec).result()

    def get_queue_async(self, name: str) -> Future[QueueView]:
        self.limits.check_name(name, "name")
        return self._writer.submit(lambda b: self._view(*self._find(b, name)))

    def get_queue(self, name: str) -> QueueView:
        return self.get_queue_async(name).result()

    def list_queues_async(self) -> Future[list[QueueView]]:
        fut: Future[list[QueueView]] = Future()

        def make() -> Work[list[QueueView]]:
            waiting = self._waiters.counts()
            transient = self._transient(waiting)

            def work(view: Txn) -> list[QueueView]:
                views = [self._view_of(view, info, waiting) for info in view.queues()]
                return _merged(views, transient)

            return work

        return self._writer.submit(lambda b: self._reads.later(b, fut, make), fut)

    def list_queues(self) -> list[QueueView]:
        return self.list_queues_async().result()

    def delete_queue_async(self, name: str) -> Future[None]:
        self.limits.check_name(name, "name", write=True)

        def run(b: Batch) -> None:
            self._find(b, name)
            self._delete_queue(b, name)
            self._net.settle(b)

        return self._writer.submit(run)

    def delete_queue(self, name: str) -> None:
        """Deletes a queue, its messages and the selectors reading it or
        writing to it; blocked calls and subscriptions on it get
        QueueNotFound."""
        self.delete_queue_async(name).result()

    def _delete_queue(self, b: Batch, name: str) -> None:
        txn, _ = self._find(b, name)
        txn.delete_queue(name)
        gone = self._net.queue_gone(b, name)
        for s, c in gone:
            self._forget(b, s, c, QueueNotFound(name))
            self._gone(b, s, c, "queue deleted")
        self.events.emit(b, ev.QUEUE_DELETED, name)

        def after() -> None:
            self._net.traffic.pop(name, None)
            for w in self._waiters.drop_queue(name):
                if claim(w.future):
                    w.future.set_exception(QueueNotFound(name))

        b.after(after)
        for source in dict.fromkeys(s.source for s, _ in gone if s.source != name):
            self._auto_delete(b, source)

    def _forget(self, b: Batch, s: Selector, c: Consumer | None, why: BaseException | None) -> None:
        """A removed selector leaves the store; its consumer is told."""
        if s.durable:
            b.txn(True).delete_selector(s.id)
        if c is not None:
            b.after(lambda: c.end(why))

    def _auto_delete(self, b: Batch, queue: str) -> None:
        found = self._lookup(b, queue)
        if found is not None and found[1].spec.auto_delete and not self._net.of(queue):
            self._delete_queue(b, queue)

    # -- posting --------------------------------------------------------

    def post_async(self, queue: str, messages: Sequence[Message]) -> Future[list[int]]:
        msgs, size = self._check_post(queue, messages)
        return self._writer.submit(
            lambda b: [r.seq for r in self._post(b, queue, msgs, size)], size=size
        )

    def post(self, queue: str, messages: Sequence[Message]) -> list[int]:
        """Stores messages in order, in one transaction, routes them, and
        returns their seqs once durable. A message that finds the queue full
        and is not refused (drop-new, dead-letter, an overflow selector) is
        not stored on this queue: its seq is 0 (``post_receipts`` says what
        became of it)."""
        return self.post_async(queue, messages).result()

    def post_receipts_async(self, queue: str, messages: Sequence[Message]) -> Future[list[Receipt]]:
        msgs, size = self._check_post(queue, messages)
        return self._writer.submit(lambda b: self._post(b, queue, msgs, size), size=size)

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Like post, but answers each message's seq with what became of it:
        stored, overflowed (to an overflow selector's queue), dead-lettered or
        dropped."""
        return self.post_receipts_async(queue, messages).result()

    def _check_post(self, queue: str, messages: Sequence[Message]) -> tuple[list[Message], int]:
        self.limits.check_name(queue, write=True)
        if not messages:
            raise InvalidArgument("messages: at least one message is needed")
        if len(messages) > self.limits.max_batch:
            raise InvalidArgument(f"messages: at most {self.limits.max_batch} in one post")
        msgs = [self.limits.check_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        size = sum(len(m.body) + len(m.address) + 64 * (1 + len(m.tuple)) for m in msgs)
        return msgs, size

    def _post(self, b: Batch, queue: str, msgs: list[Message], size: int) -> list[Receipt]:
        txn, info = self._find(b, queue)
        txn.admit(size)  # a full disk refuses posts first, keeping room for the rest
        spec = info.spec
        net = self._net
        limit = spec.max_unprocessed
        n = len(msgs)
        if limit and spec.overflow is OverflowPolicy.REJECT and not net.has_overflow(queue):
            # All or nothing, counted as if none of it were routed away.
            room = max(0, limit - txn.counts(queue).unprocessed)
            if room < n:
                b.after(lambda: net.count(queue, overflowed=n))
                raise QueueFull(
                    f"queue {queue!r} is full: max_unprocessed is {limit}; "
                    f"{n - room} of {n} message(s) do not fit"
                )
        out = []
        arrive = net.arrive
        posted = 0
        for m in msgs:
            if limit and txn.counts(queue).unprocessed >= limit:
                out.append(Receipt(0, net.overflow(b, info, m)))
                continue
            stored = txn.append(queue, m, b.now)
            out.append(Receipt(stored.seq, Disposition.STORED))
            posted += 1
            arrive(b, txn, info, stored)
        b.stored += posted
        b.after(lambda: net.count(queue, posted=posted))
        net.settle(b)
        return out

    # -- taking and reading ---------------------------------------------

    def take_async(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> Future[list[Message]]:
        return self._match_async(queue, pattern, timeout, max, take=True)

    def take(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> list[Message]:
        """Removes and returns up to ``max`` of the oldest waiting messages that
        match; waits up to ``timeout`` seconds for a first one (0: try once).
        Nothing in time is an empty list."""
        return self.take_async(queue, pattern, timeout, max).result()

    def take_leased_async(
        self,
        queue: str,
        pattern: Pattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
        *,
        lease: float,
    ) -> Future[list[Delivery]]:
        lease = self.limits.check_timeout(lease, "lease")
        if lease <= 0:
            raise InvalidArgument("lease: must be more than 0 seconds")
        return self._match_async(queue, pattern, timeout, max, take=True, lease=lease)

    def take_leased(
        self,
        queue: str,
        pattern: Pattern | None = None,
        timeout: float = 0.0,
        max: int = 1,
        *,
        lease: float,
    ) -> list[Delivery]:
        """Like take, but the messages stay in the queue, invisible to every
        one else, until acked (``ack_leases``); when the lease runs out they
        come back with their delivery count raised."""
        return self.take_leased_async(queue, pattern, timeout, max, lease=lease).result()

    def ack_leases_async(self, queue: str, ids: Sequence[int], nack: bool = False) -> Future[None]:
        self.limits.check_name(queue)
        if not ids:
            raise InvalidArgument("lease_ids: at least one lease is needed")

        def run(b: Batch) -> None:
            self._find(b, queue)
            self._net.ack_leases(b, queue, list(ids), nack)
            self._net.settle(b)

        return self._writer.submit(run)

    def ack_leases(self, queue: str, ids: Sequence[int], nack: bool = False) -> None:
        """Processes leased messages for good (or, with ``nack``, gives them
        back now). NotFound for a lease already acked or run out; nothing is
        changed unless every lease is good."""
        self.ack_leases_async(queue, ids, nack).result()

    def read_async(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> Future[list[Message]]:
        return self._match_async(queue, pattern, timeout, max, take=False)

    def read(
        self, queue: str, pattern: Pattern | None = None, timeout: float = 0.0, max: int = 1
    ) -> list[Message]:
        """Like take, but leaves the messages where they are."""
        return self.read_async(queue, pattern, timeout, max).result()

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
        self.limits.check_name(queue)
        max = self.limits.check_count(max, self.limits.max_take, "max", 1)
        timeout = self.limits.check_timeout(timeout)
        pat = pattern or EVERYTHING
        deadline = time.monotonic() + timeout
        fut: Future[Any] = Future()
        net = self._net

        def run(b: Batch, start: int | None = None) -> object:
            if fut.done():  # cancelled, or abandoned while a search resumed
                return PENDING
            txn, info = self._find(b, queue)
            held = net.held(queue)
            found: list[Message] = []
            expired: list[Message] = []
            search = self._waiting(txn, queue, pat, start)
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
                net.dead(b, txn, info, m, "expired", 0)
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
                    return net.lease(b, txn, info, found, lease)
                taken = [net.process(b, txn, info, m) for m in found]
                b.after(lambda: net.count(queue, taken=len(taken), delivered=len(taken)))
                net.settle(b)
                return taken
            net.settle(b)
            if timeout <= 0:
                return []
            w = Waiter(queue, pat, take, deadline, fut, lease=lease)
            self._waiters.add(w)
            b.undo(lambda: self._waiters.remove(w))
            return PENDING

        def peek(b: Batch) -> object:
            """A Read that does not wait: off the writer, on a durable queue."""
            _, info = self._find(b, queue)
            if info.spec.transient:
                return run(b)

            def make() -> Work[list[Message]]:
                held = set(net.held(queue))  # delivered, leased: not for Read
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
            search = self._waiting(view, queue, pat, start)
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
            found = self._lookup(b, queue)
            if found is None:
                return
            txn, _ = found
            for item in fut.result():
                if isinstance(item, Delivery):
                    self._net.ack_leases_quietly(b, queue, item.id)
                elif item.section is Section.HISTORY:
                    txn.restore(queue, item)
            self._net.settle(b)

        self._writer.submit(run)

    # -- helpers (writer thread) ----------------------------------------

    def _waiting(self, txn: Txn, queue: str, pattern: Pattern, start: int | None = None) -> Search:
        """The queue's unprocessed messages that match ``pattern``, oldest
        first, from seq ``start`` on, through the store's index
        (``Txn.find``). Every search of the waiting messages goes through
        here. It examines at most FIND_BUDGET candidates; then its
        ``next_seq`` says where a later operation resumes."""
        return txn.find(queue, pattern, start)

    def _lookup(self, b: Batch, name: str) -> tuple[Txn, QueueInfo] | None:
        for durable in (False, True):
            txn = b.txn(durable)
            info = txn.queue(name)
            if info is not None:
                return txn, info
        return None

    def _find(self, b: Batch, name: str) -> tuple[Txn, QueueInfo]:
        found = self._lookup(b, name)
        if found is None:
            raise QueueNotFound(name)
        return found

    def _transient(self, waiting: dict[str, int]) -> list[QueueView]:
        """The transient queues' views, as committed (writer thread)."""
        txn = self._memory.begin()
        try:
            # $sys is the board's: listings of the user's queues leave it out.
            infos = [info for info in txn.queues() if not reserved(info.spec.name)]
            return [self._view_of(txn, info, waiting) for info in infos]
        finally:
            txn.abort()

    @staticmethod
    def _view_of(txn: Txn, info: QueueInfo, waiting: dict[str, int]) -> QueueView:
        c = txn.counts(info.spec.name)
        n = waiting.get(info.spec.name, 0)
        return QueueView(info.spec, info.created_at, c.unprocessed, c.history, c.next_seq, n)

    def _view(self, txn: Txn, info: QueueInfo) -> QueueView:
        c = txn.counts(info.spec.name)
        return QueueView(
            info.spec,
            info.created_at,
            c.unprocessed,
            c.history,
            c.next_seq,
            self._waiters.count(info.spec.name),
        )
