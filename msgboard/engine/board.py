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
"""

from __future__ import annotations

import contextlib
import enum
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from msgboard import codec
from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network, Traffic
from msgboard.engine.reads import Reads, Work
from msgboard.engine.selectors import Acked, Consumer, Selector
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import PENDING, Batch, Writer
from msgboard.errors import (
    DataFileDamaged,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    QueueExists,
    QueueFull,
    QueueNotFound,
)
from msgboard.lmdbstore import DurableStore, MemoryStore, QueueInfo, Search, StoreInfo, Txn
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.message import Message, Section, now_us
from msgboard.spec import (
    Delivery,
    Disposition,
    Op,
    OverflowPolicy,
    Position,
    QueueSpec,
    Receipt,
    Role,
    SelectorSpec,
    differences,
)
from msgboard.v1 import board_pb2 as pb

#: The most messages one Browse page reads before it answers, matching or
#: not, so that a rare pattern cannot hold the writer for long.
BROWSE_SCAN_LIMIT = 100_000


class Start(enum.Enum):
    """Where a Browse page starts."""

    OLDEST = "oldest"
    LATEST = "latest"
    SEQ = "seq"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue's properties and counts at one moment."""

    spec: QueueSpec
    created_at: int
    unprocessed: int
    history: int
    next_seq: int
    waiting: int


@dataclass(frozen=True, slots=True)
class Page:
    """One Browse page; ``next_seq`` starts the next (0: no more)."""

    messages: list[Message]
    next_seq: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str
    transient: bool
    unprocessed: int
    history: int
    waiting: int
    posted: int
    taken: int
    overflowed: int
    ready: int
    outstanding: int
    consumers: int
    dropped: int
    dead_lettered: int
    selectors: int
    expired: int
    #: Damaged records met (and skipped) since the board started.
    damaged: int = 0


@dataclass(frozen=True, slots=True)
class SelectorView:
    """A selector and its figures at one moment."""

    id: str
    spec: SelectorSpec
    durable: bool
    attached: bool
    outstanding: int
    delivered: int
    dropped: int


@dataclass(frozen=True, slots=True)
class BoardStats:
    store: StoreInfo
    commits: int
    committed_ops: int
    queues: list[QueueStats]


class Board:
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
        try:
            self._writer.submit(self._load).result()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
                spec = codec.selector_spec_from_pb(pb.SelectorSpec.FromString(data))
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
        self.limits.check_name(name, "name")

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
        self.limits.check_name(queue)
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
                b.after(lambda: net.count(queue, taken=len(taken)))
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

    # -- selectors ------------------------------------------------------

    def create_selector_async(self, spec: SelectorSpec) -> Future[SelectorView]:
        spec = self._check_selector(spec)

        def run(b: Batch) -> SelectorView:
            txn, info = self._find_source(b, spec)
            txn_d = b.txn(True)
            durable = not info.spec.transient
            sid = f"sel-{txn_d.new_selector_id()}"
            s = Selector(sid, spec, durable=durable, session=False, quota=spec.quota())
            self._net.start(txn, s)
            if durable:
                txn_d.put_selector(sid, codec.selector_spec_to_pb(spec).SerializeToString())
            self._net.add(b, s)
            self._net.settle(b)
            return self._selector_view(s)

        return self._writer.submit(run)

    def create_selector(self, spec: SelectorSpec) -> SelectorView:
        """Creates a selector on an existing queue: QueueNotFound for a missing
        source or destination, FailedPrecondition for one that would close a
        cycle of queues. It is durable when its source queue is."""
        return self.create_selector_async(spec).result()

    def _check_selector(self, spec: SelectorSpec, where: str = "spec") -> SelectorSpec:
        self.limits.check_name(spec.source, f"{where}.source")
        if spec.destination:
            self.limits.check_name(spec.destination, f"{where}.destination")
            if spec.op in (Op.DELETE, Op.BOUNCE):
                raise InvalidArgument(
                    f"{where}.destination: a {spec.op.value} selector has no destination"
                )
        if spec.credit < 0:
            raise InvalidArgument(f"{where}.credit: must not be negative (got {spec.credit})")
        if spec.role is Role.OVERFLOW and not (
            spec.op is Op.DELETE or (spec.op is Op.MOVE and spec.destination)
        ):
            raise InvalidArgument(f"{where}.role: an overflow selector moves to a queue or deletes")
        if spec.start is Position.SEQ and spec.start_seq < 1:
            raise InvalidArgument(f"{where}.start_seq: must be 1 or more")
        return spec

    def _find_source(self, b: Batch, spec: SelectorSpec) -> tuple[Txn, QueueInfo]:
        found = self._lookup(b, spec.source)
        if found is None:
            raise QueueNotFound(f"{spec.source} (the selector's source)")
        dest = spec.destination
        if dest:
            if self._lookup(b, dest) is None:
                raise QueueNotFound(f"{dest} (the selector's destination)")
            if self._net.reaches(dest, spec.source):
                raise FailedPrecondition(
                    f"a selector from {spec.source!r} to {dest!r} would close a cycle: "
                    f"messages already flow from {dest!r} back to {spec.source!r}"
                )
        return found

    def get_selector_async(self, sid: str) -> Future[SelectorView]:
        return self._writer.submit(lambda b: self._selector_view(self._selector(sid)))

    def get_selector(self, sid: str) -> SelectorView:
        return self.get_selector_async(sid).result()

    def list_selectors_async(self, queue: str = "") -> Future[list[SelectorView]]:
        if queue:
            self.limits.check_name(queue)

        def run(b: Batch) -> list[SelectorView]:
            if queue:
                self._find(b, queue)
            sels = [s for s in self._net.selectors.values() if not queue or s.source == queue]
            sels.sort(key=lambda s: s.source)
            return [self._selector_view(s) for s in sels]

        return self._writer.submit(run)

    def list_selectors(self, queue: str = "") -> list[SelectorView]:
        """The selectors of one queue, or of every queue (by source queue,
        then in creation order)."""
        return self.list_selectors_async(queue).result()

    def delete_selector_async(self, sid: str) -> Future[None]:
        def run(b: Batch) -> None:
            s = self._selector(sid)
            c = self._net.remove(b, s)
            self._forget(b, s, c, NotFound(f"selector {sid} was deleted"))
            self._auto_delete(b, s.source)
            self._net.settle(b)

        return self._writer.submit(run)

    def delete_selector(self, sid: str) -> None:
        """Deletes a selector; what it had delivered and not seen acked goes
        back to the source queue; an auto_delete source queue left without
        selectors deletes itself."""
        self.delete_selector_async(sid).result()

    def _selector(self, sid: str) -> Selector:
        s = self._net.selectors.get(sid)
        if s is None:
            raise NotFound(f"no selector {sid!r}")
        return s

    @staticmethod
    def _selector_view(s: Selector) -> SelectorView:
        c = s.consumer
        return SelectorView(
            s.id,
            s.spec,
            s.durable,
            c is not None,
            0 if c is None else len(c.outstanding),
            s.delivered,
            s.dropped,
        )

    # -- subscriptions --------------------------------------------------

    def subscribe_async(
        self,
        queue: str = "",
        pattern: Pattern | None = None,
        *,
        deliver: Callable[[list[Delivery]], None],
        end: Callable[[BaseException | None], None],
        op: Op = Op.MOVE,
        credit: int = 0,
        unlimited_credit: bool = False,
        start: Position = Position.CURRENT,
        start_seq: int = 0,
        start_time: int = 0,
        selector_id: str = "",
    ) -> Future[tuple[Consumer, SelectorView]]:
        if credit < 0:
            raise InvalidArgument(f"credit: must not be negative (got {credit})")
        if selector_id:
            if queue or pattern is not None or op is not Op.MOVE or start is not Position.CURRENT:
                raise InvalidArgument(
                    "selector_id: attaching to a selector takes no queue, pattern, op or start"
                )
            spec = None
        else:
            if op not in (Op.MOVE, Op.COPY):
                raise InvalidArgument(f"op: a subscription moves or copies, not {op.value}")
            spec = self._check_selector(
                SelectorSpec(
                    queue,
                    pattern or EVERYTHING,
                    op,
                    credit=credit,
                    unlimited_credit=unlimited_credit,
                    start=start,
                    start_seq=start_seq,
                    start_time=start_time,
                ),
                "subscription",
            )

        def run(b: Batch) -> tuple[Consumer, SelectorView]:
            if spec is None:
                s = self._selector(selector_id)
                if not s.spec.terminal:
                    raise FailedPrecondition(
                        f"selector {selector_id} delivers to queue {s.spec.destination!r}, "
                        "not to a consumer"
                    )
                if s.consumer is not None:
                    raise FailedPrecondition(f"selector {selector_id} already has a consumer")
                window = s.spec.window()
                if credit or unlimited_credit:
                    window = math.inf if unlimited_credit else credit
            else:
                txn, _ = self._find_source(b, spec)
                s = Selector(f"sub-{next(self._sessions)}", spec, durable=False, session=True)
                self._net.start(txn, s)
                self._net.add(b, s)
                window = spec.window()
            lim = self.limits
            c = Consumer(s, window, deliver, end, lim.max_credit, lim.max_outstanding_bytes)
            self._net.attach(b, s, c)
            self._net.settle(b)
            return c, self._selector_view(s)

        return self._writer.submit(run)

    def subscribe(
        self,
        queue: str = "",
        pattern: Pattern | None = None,
        *,
        deliver: Callable[[list[Delivery]], None],
        end: Callable[[BaseException | None], None],
        op: Op = Op.MOVE,
        credit: int = 0,
        unlimited_credit: bool = False,
        start: Position = Position.CURRENT,
        start_seq: int = 0,
        start_time: int = 0,
        selector_id: str = "",
    ) -> tuple[Consumer, SelectorView]:
        """Attaches a consumer: a session selector on ``queue`` (MOVE or COPY),
        or the durable terminal selector ``selector_id``. ``deliver`` gets
        batches of deliveries and ``end`` the reason the board ended the
        subscription; both run on the writer thread and must only hand over."""
        return self.subscribe_async(
            queue,
            pattern,
            deliver=deliver,
            end=end,
            op=op,
            credit=credit,
            unlimited_credit=unlimited_credit,
            start=start,
            start_seq=start_seq,
            start_time=start_time,
            selector_id=selector_id,
        ).result()

    def ack_async(self, c: Consumer, ids: Sequence[int], up_to: int = 0) -> Future[Acked]:
        def run(b: Batch) -> Acked:
            self._live(c)
            acked = self._net.ack(b, c, list(ids), up_to)
            self._net.settle(b)
            return acked

        return self._writer.submit(run)

    def ack(self, c: Consumer, ids: Sequence[int], up_to: int = 0) -> Acked:
        """Acks deliveries (and every one up to ``up_to``), once durable: acks
        are per delivery, so it applies every id it can and returns those
        (``Acked.ids``) and, one by one, the ones it could not: never
        delivered, already acked or given back (``Acked.rejected``)."""
        return self.ack_async(c, ids, up_to).result()

    def nack_async(
        self, c: Consumer, ids: Sequence[int], reject: bool = False
    ) -> Future[list[int]]:
        def run(b: Batch) -> list[int]:
            self._live(c)
            done = self._net.nack(b, c, list(ids), reject)
            self._net.settle(b)
            return done

        return self._writer.submit(run)

    def nack(self, c: Consumer, ids: Sequence[int], reject: bool = False) -> list[int]:
        """Gives deliveries back for redelivery after a short backoff, or
        dead-letters them (``reject``)."""
        return self.nack_async(c, ids, reject).result()

    def add_credit_async(self, c: Consumer, n: int) -> Future[None]:
        if n < 0:
            raise InvalidArgument(f"credit: must not be negative (got {n})")

        def run(b: Batch) -> None:
            self._live(c)
            b.undo(partial(setattr, c, "window", c.window))
            c.window += n
            self._net.wake(c.selector)
            self._net.settle(b)

        return self._writer.submit(run)

    def add_credit(self, c: Consumer, n: int) -> None:
        self.add_credit_async(c, n).result()

    def unsubscribe_async(self, c: Consumer) -> Future[None]:
        def run(b: Batch) -> None:
            if c.closed:
                return
            s = c.selector
            self._net.detach(b, c)
            if s.session and self._net.selectors.get(s.id) is s:
                self._net.remove(b, s)
                self._auto_delete(b, s.source)
            self._net.settle(b)

        return self._writer.submit(run)

    def unsubscribe(self, c: Consumer) -> None:
        """Detaches a consumer: its outstanding messages go back to their
        queue at once (delivery count raised); a session selector goes."""
        self.unsubscribe_async(c).result()

    @staticmethod
    def _live(c: Consumer) -> None:
        if c.closed:
            raise FailedPrecondition("the subscription has ended")

    # -- browsing and figures -------------------------------------------

    def browse_async(
        self,
        queue: str,
        start: Start = Start.OLDEST,
        *,
        seq: int = 0,
        since: int = 0,
        reverse: bool = False,
        limit: int = 100,
        section: Section | None = None,
        pattern: Pattern | None = None,
    ) -> Future[Page]:
        self.limits.check_name(queue)
        limit = self.limits.check_count(limit, self.limits.max_page, "limit", 100)
        if seq < 0:
            raise InvalidArgument(f"seq: must not be negative (got {seq})")
        pat = pattern or EVERYTHING

        def page(txn: Txn) -> Page:
            if txn.queue(queue) is None:
                raise QueueNotFound(queue)
            first: int | None
            if start is Start.OLDEST:
                first = None if not reverse else 1
            elif start is Start.LATEST:
                first = None if reverse else txn.counts(queue).next_seq
            elif start is Start.SEQ:
                first = seq
            else:
                first = txn.seq_at(queue, since)
                if first is None:
                    first = txn.counts(queue).next_seq
            out: list[Message] = []
            for scanned, m in enumerate(txn.scan(queue, section, first, reverse)):
                if len(out) >= limit or scanned >= BROWSE_SCAN_LIMIT:
                    return Page(out, m.seq)
                if pat.matches(m):
                    out.append(m)
            return Page(out, 0)

        fut: Future[Page] = Future()

        def run(b: Batch) -> Any:
            txn, info = self._find(b, queue)
            if info.spec.transient:
                return page(txn)  # memory: cheap, and the writer's alone
            return self._reads.later(b, fut, lambda: page)

        return self._writer.submit(run, fut)

    def browse(
        self,
        queue: str,
        start: Start = Start.OLDEST,
        *,
        seq: int = 0,
        since: int = 0,
        reverse: bool = False,
        limit: int = 100,
        section: Section | None = None,
        pattern: Pattern | None = None,
    ) -> Page:
        """A page of the queue in seq order, both sections merged unless
        ``section`` says which, from ``start`` forward (or backward with
        ``reverse``). ``since`` is µs since the epoch, for Start.TIME."""
        return self.browse_async(
            queue,
            start,
            seq=seq,
            since=since,
            reverse=reverse,
            limit=limit,
            section=section,
            pattern=pattern,
        ).result()

    def stats_async(self, queue: str = "") -> Future[BoardStats]:
        if queue:
            self.limits.check_name(queue)

        fut: Future[BoardStats] = Future()

        def make() -> Work[BoardStats]:
            # Copies of the writer's figures, of the same moment as the view.
            net, w = self._net, self._writer
            waiting = self._waiters.counts()
            transient = self._transient(waiting)
            traffic = {k: Traffic(*_traffic(t)) for k, t in net.traffic.items()}
            figures = net.figures()
            store, commits, ops = self._durable.info(), w.commits, w.committed_ops
            damaged = self._durable.damaged_counts()

            def work(view: Txn) -> BoardStats:
                views = [self._view_of(view, info, waiting) for info in view.queues()]
                views = _merged(views, transient)
                rows = [
                    _stats(
                        v,
                        traffic.get(v.spec.name),
                        figures.get(v.spec.name),
                        damaged.get(v.spec.name, 0),
                    )
                    for v in views
                ]
                return BoardStats(store, commits, ops, rows)

            return work

        def run(b: Batch) -> Any:
            if not queue:
                return self._reads.later(b, fut, make)
            v = self._view(*self._find(b, queue))  # one queue: O(1) here
            net = self._net
            name = v.spec.name
            figures = (len(net.of(name)), net.consumers(name), net.outstanding(name))
            t = net.traffic.get(name)
            w = self._writer
            hurt = 0 if v.spec.transient else self._durable.damaged(name)
            row = _stats(v, None if t is None else Traffic(*_traffic(t)), figures, hurt)
            return BoardStats(self._durable.info(), w.commits, w.committed_ops, [row])

        return self._writer.submit(run, fut)

    def stats(self, queue: str = "") -> BoardStats:
        return self.stats_async(queue).result()

    def snapshot_async(self, path: str | os.PathLike[str]) -> Future[SnapshotInfo]:
        fut: Future[SnapshotInfo] = Future()
        target = os.fspath(path)

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(self._durable.snapshot(target))
            except BaseException as e:
                fut.set_exception(e)

        # Its own thread: the writer goes on committing while the copy runs.
        threading.Thread(target=run, name="msgboard-snapshot", daemon=True).start()
        return fut

    def snapshot(self, path: str | os.PathLike[str]) -> SnapshotInfo:
        """Writes a consistent compacted copy of the durable queues to the
        directory ``path`` (absolute; absent or empty) while the board keeps
        serving; every write answered before the call is in it. Raises
        InvalidArgument, FailedPrecondition (path taken), StoreFull."""
        return self.snapshot_async(path).result()

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
            return [self._view_of(txn, info, waiting) for info in txn.queues()]
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


def _traffic(t: Traffic) -> tuple[int, int, int, int, int, int]:
    return (t.posted, t.taken, t.overflowed, t.dead_lettered, t.dropped, t.expired)


def _stats(
    v: QueueView, t: Traffic | None, figures: tuple[int, int, int] | None, damaged: int
) -> QueueStats:
    """A Stats row from a queue's view, traffic, (selectors, consumers,
    outstanding) and damaged records met."""
    t = t or Traffic()
    selectors, consumers, out = figures or (0, 0, 0)
    return QueueStats(
        v.spec.name,
        v.spec.transient,
        v.unprocessed,
        v.history,
        v.waiting,
        t.posted,
        t.taken,
        t.overflowed,
        ready=v.unprocessed - out,
        outstanding=out,
        consumers=consumers,
        dropped=t.dropped,
        dead_lettered=t.dead_lettered,
        selectors=selectors,
        expired=t.expired,
        damaged=damaged,
    )


def _merged(a: list[QueueView], b: list[QueueView]) -> list[QueueView]:
    """Two lists of views in name order, merged (no sort of the lot)."""
    if not b:
        return a
    return list(heapq.merge(a, b, key=lambda v: v.spec.name))
