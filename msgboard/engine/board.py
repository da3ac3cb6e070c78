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
unique across both.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine.limits import Limits
from msgboard.engine.waiters import Waiter, Waiters, answer, claim
from msgboard.engine.writer import PENDING, Batch, Writer
from msgboard.errors import InvalidArgument, QueueExists, QueueFull, QueueNotFound
from msgboard.lmdbstore import DurableStore, MemoryStore, QueueInfo, StoreInfo, Txn
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.message import Message, Section
from msgboard.spec import OverflowPolicy, QueueSpec

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


@dataclass(slots=True)
class Traffic:
    """Per-queue counts since the board opened."""

    posted: int = 0
    taken: int = 0
    overflowed: int = 0


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
        self._traffic: dict[str, Traffic] = {}
        self._writer = Writer(self._durable, self._memory, self._waiters)

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finishes submitted work, answers blocked calls with nothing, and
        closes the stores."""
        self._writer.stop()
        self._durable.close()
        self._memory.close()

    # -- queues ---------------------------------------------------------

    def create_queue_async(self, spec: QueueSpec) -> Future[QueueView]:
        spec = self.limits.check_spec(spec)

        def run(b: Batch) -> QueueView:
            found = self._lookup(b, spec.name)
            if found is not None:
                txn, info = found
                if info.spec != spec:
                    raise QueueExists(
                        f"queue {spec.name!r} exists with other properties: {info.spec}"
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
        return self._writer.submit(self._views)

    def list_queues(self) -> list[QueueView]:
        return self.list_queues_async().result()

    def delete_queue_async(self, name: str) -> Future[None]:
        self.limits.check_name(name, "name")

        def run(b: Batch) -> None:
            txn, _ = self._find(b, name)
            txn.delete_queue(name)

            def gone() -> None:
                self._traffic.pop(name, None)
                for w in self._waiters.drop_queue(name):
                    if claim(w.future):
                        w.future.set_exception(QueueNotFound(name))

            b.after(gone)

        return self._writer.submit(run)

    def delete_queue(self, name: str) -> None:
        """Deletes a queue and its messages; blocked calls on it get
        QueueNotFound."""
        self.delete_queue_async(name).result()

    # -- posting --------------------------------------------------------

    def post_async(self, queue: str, messages: Sequence[Message]) -> Future[list[int]]:
        self.limits.check_name(queue)
        if not messages:
            raise InvalidArgument("messages: at least one message is needed")
        if len(messages) > self.limits.max_batch:
            raise InvalidArgument(f"messages: at most {self.limits.max_batch} in one post")
        msgs = [self.limits.check_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        size = sum(len(m.body) + len(m.address) + 64 * (1 + len(m.tuple)) for m in msgs)
        return self._writer.submit(lambda b: self._post(b, queue, msgs), size=size)

    def post(self, queue: str, messages: Sequence[Message]) -> list[int]:
        """Stores messages in order, in one transaction, and returns their
        seqs once durable (0 for a message the drop-new policy dropped)."""
        return self.post_async(queue, messages).result()

    def _post(self, b: Batch, queue: str, msgs: list[Message]) -> list[int]:
        txn, info = self._find(b, queue)
        spec = info.spec
        keep = n = len(msgs)
        if spec.max_unprocessed:
            room = max(0, spec.max_unprocessed - txn.counts(queue).unprocessed)
            if room < n:
                b.after(lambda: self._count(queue, overflowed=n - room))
                if spec.overflow is OverflowPolicy.REJECT:
                    raise QueueFull(
                        f"queue {queue!r} is full: max_unprocessed is "
                        f"{spec.max_unprocessed}; {n} message(s) refused"
                    )
                keep = room
        seqs = []
        waiting = self._waiters.any(queue)
        for m in msgs[:keep]:
            stored = txn.append(queue, m, b.now)
            seqs.append(stored.seq)
            if waiting:
                self._offer(b, txn, spec, stored)
        seqs += [0] * (n - keep)
        b.after(lambda: self._count(queue, posted=keep))
        return seqs

    def _offer(self, b: Batch, txn: Txn, spec: QueueSpec, msg: Message) -> None:
        """Hands a new message to the waiters it matches: every matching Read
        gets it, then the oldest matching Take takes it."""
        if msg.expired(b.now):
            return
        waiters = self._waiters.of(spec.name)
        taker = None
        for w in waiters:
            if w.claimed or not w.pattern.matches(msg):
                continue
            if not claim(w.future):  # its caller gave up
                self._waiters.remove(w)
            elif not w.take:
                self._hand(b, w, msg)
            elif taker is None:
                taker = w
        if taker is not None:
            self._hand(b, taker, txn.process(spec.name, msg.seq, b.now, spec.max_history))

    def _hand(self, b: Batch, w: Waiter, msg: Message) -> None:
        """Gives ``msg`` to a waiter once the batch is durable."""
        w.claimed = True
        b.undo(lambda: setattr(w, "claimed", False))
        b.after(lambda: self._wake(w, msg))

    def _wake(self, w: Waiter, msg: Message) -> None:
        self._waiters.remove(w)
        answer(w.future, [msg])
        if w.take:
            self._count(w.queue, taken=1)

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
        self, queue: str, pattern: Pattern | None, timeout: float, max: int, *, take: bool
    ) -> Future[list[Message]]:
        self.limits.check_name(queue)
        max = self.limits.check_count(max, self.limits.max_take, "max", 1)
        timeout = self.limits.check_timeout(timeout)
        pat = pattern or EVERYTHING
        deadline = time.monotonic() + timeout
        fut: Future[list[Message]] = Future()

        def run(b: Batch) -> object:
            if fut.cancelled():
                return PENDING
            txn, info = self._find(b, queue)
            found = []
            for m in self._waiting(txn, queue, pat):
                if not m.expired(b.now):
                    found.append(m)
                    if len(found) >= max:
                        break
            if found:
                if not claim(fut):
                    return PENDING
                if not take:
                    return found
                spec = info.spec
                taken = [txn.process(queue, m.seq, b.now, spec.max_history) for m in found]
                b.after(lambda: self._count(queue, taken=len(taken)))
                return taken
            if timeout <= 0:
                return []
            w = Waiter(queue, pat, take, deadline, fut)
            self._waiters.add(w)
            b.undo(lambda: self._waiters.remove(w))
            return PENDING

        return self._writer.submit(run, fut)

    def release(self) -> Future[None]:
        """Answers every blocked Take and Read with nothing now, as if their
        timeouts had passed (the server calls it before shutting down)."""

        def run(b: Batch) -> None:
            for w in self._waiters.all():
                if not w.claimed:
                    self._waiters.remove(w)
                    answer(w.future, [])

        return self._writer.submit(run)

    def abandon(self, queue: str, fut: Future[list[Message]]) -> None:
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
            taken = [m for m in fut.result() if m.section is Section.HISTORY]
            found = self._lookup(b, queue)
            if taken and found is not None:
                txn, _ = found
                for m in taken:
                    txn.restore(queue, m)

        self._writer.submit(run)

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

        def run(b: Batch) -> Page:
            txn, _ = self._find(b, queue)
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

        return self._writer.submit(run)

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

        def run(b: Batch) -> BoardStats:
            views = [self._view(*self._find(b, queue))] if queue else self._views(b)
            rows = []
            for v in views:
                t = self._traffic.get(v.spec.name, Traffic())
                rows.append(
                    QueueStats(
                        v.spec.name,
                        v.spec.transient,
                        v.unprocessed,
                        v.history,
                        v.waiting,
                        t.posted,
                        t.taken,
                        t.overflowed,
                    )
                )
            w = self._writer
            return BoardStats(self._durable.info(), w.commits, w.committed_ops, rows)

        return self._writer.submit(run)

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

    def _waiting(
        self, txn: Txn, queue: str, pattern: Pattern, start: int | None = None
    ) -> Iterator[Message]:
        """The queue's unprocessed messages that match ``pattern``, oldest
        first, from seq ``start`` on. Every search of the waiting messages
        goes through here: this is where the match indexes plug in."""
        for m in txn.scan(queue, Section.UNPROCESSED, start):
            if pattern.matches(m):
                yield m

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

    def _views(self, b: Batch) -> list[QueueView]:
        """Every queue of both stores, by name."""
        views = []
        for durable in (True, False):
            txn = b.txn(durable)
            views += [self._view(txn, info) for info in txn.queues()]
        return sorted(views, key=lambda v: v.spec.name)

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

    def _count(self, queue: str, *, posted: int = 0, taken: int = 0, overflowed: int = 0) -> None:
        t = self._traffic.get(queue)
        if t is None:
            t = self._traffic[queue] = Traffic()
        t.posted += posted
        t.taken += taken
        t.overflowed += overflowed
