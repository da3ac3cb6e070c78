"""The single writer: one thread that runs every operation, in group commits.

Callers submit operations (functions of a ``Batch``) and get a
``concurrent.futures.Future``. The writer thread takes everything waiting in
its inbox, runs it all inside one write transaction per store, commits once
(one fsync for the lot) and only then answers each future. While it commits,
new operations pile up in the inbox and form the next group: the busier the
board, the bigger the groups.

Because one thread runs everything, the engine's in-memory state needs no
locks, and LMDB's rule that a write transaction stays on its thread holds by
construction. An operation must check its input before it writes: one that
raises a MsgboardError after writing would leave its writes in the group.

The engine's central invariant: **a group that aborts leaves no trace, in
the stores or in memory, and nothing of it is seen before it is durable.**
The stores' transactions abort by themselves; every change an operation
makes to the engine's memory goes through its batch, in one of four ways:

- ``b.set(obj, attr, value)``: sets an attribute, set back if the group
  aborts (a selector's cursor or turn, a consumer's window, ...);
- ``b.undo(fn)``: any other change to memory, with ``fn`` putting it back
  (run in reverse order if the group aborts);
- ``b.after(fn)``: what must wait until the group is durable: answering a
  blocked call, handing deliveries to a consumer, arming a timer, announcing
  an event;
- ``b.count(queue, ...)``: adds to a queue's traffic counts
  (``traffic.py``), once the group is durable.

A group that fails is retried only after MapFull (the map grows), from
scratch: the undos have put memory back as it was.

A replicated board's group is durable only once its standbys have it too:
``Writer.gate`` (set by ``msgboard.cluster``) is then handed each
committed group's ``release``, and calls it (through ``call_soon``, on this
thread) once enough standbys acknowledged the group, or with the error its
callers get instead. The thread goes on to the next group meanwhile. Its
``after`` work and its answers wait for the release; its memory changes
are already made, and later groups, built on them, are released after it.

The durable store in fsync mode may leave each commit's meta page to the
next sync (``DurableStore``, ``DEFER_META_SYNC``: one barrier per commit). A committed group is then
held, as the gate holds it, until a sync covers it: the next group's
commit (its data sync), or ``Store.flush`` once the inbox is empty, or
when the held group's operations took longer than a flush (the next group
would likely keep it waiting longer than a flush saves), or once one more
group has gone by without a sync. So back-to-back cheap commits pay one
barrier each, a lone commit two, and nothing is answered before it is
durable. With a gate too, a group goes once both have released it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from msgboard import probe
from msgboard.engine.traffic import Traffic, count
from msgboard.engine.waiters import Waiters, answer
from msgboard.errors import MsgboardError, QueueNotFound, StoreDamaged, StoreError, Unavailable
from msgboard.lmdbstore import MapFull, QueueInfo, Store, Txn
from msgboard.message import now_us

log = logging.getLogger(__name__)


class Rerun(Exception):
    """A group whose transaction is gone runs again, without the op that
    met the damage."""


#: Returned by an operation whose future is now answered by someone else
#: (a waiter), or whose caller already gave up.
PENDING: Any = object()
#: The longest the writer sleeps in one wait, seconds. A deadline further off
#: (an expiry in the year 9999) is waited for in steps: ``queue.get`` refuses a
#: timeout past ``threading.TIMEOUT_MAX`` (about 292 years) with
#: OverflowError, and waking once an hour costs nothing.
MAX_WAIT = 3600.0

#: A queue as a batch finds it: the transaction of its store, and its info.
Found = tuple[Txn, QueueInfo]


class Batch:
    """The shared transactions of one group commit, and what its operations
    did to memory (undone if it aborts) or left for after it is durable."""

    def __init__(
        self, durable: Store, memory: Store, reserve: int, traffic: dict[str, Traffic]
    ) -> None:
        self._durable = durable
        self._memory = memory
        self._reserve = reserve
        self._traffic = traffic
        self._txns: dict[bool, Txn] = {}
        self._undo: list[Callable[[], object]] = []
        self._after: list[Callable[[], object]] = []
        #: The time of the batch, µs: one clock reading for every op in it.
        self.now = now_us()
        #: Messages stored on a queue by the batch's ops (posted, forwarded,
        #: dead-lettered): the size a group commit is observed with.
        self.stored = 0
        #: A held group released with an error (``Writer.gate``): its
        #: ``after`` work that answers a caller or hands out deliveries
        #: answers with this error instead.
        self.failed: MsgboardError | None = None

    def txn(self, durable: bool) -> Txn:
        """The batch's transaction on the durable or the memory store."""
        t = self._txns.get(durable)
        if t is None:
            t = self._durable.begin(self._reserve) if durable else self._memory.begin()
            self._txns[durable] = t
        return t

    def lookup(self, name: str) -> Found | None:
        """The queue called ``name``, transient or durable (a name is unique
        across both stores), as the batch sees it; None if there is none."""
        for durable in (False, True):
            txn = self.txn(durable)
            info = txn.queue(name)
            if info is not None:
                return txn, info
        return None

    def find(self, name: str) -> Found:
        """As ``lookup``, but QueueNotFound if there is none."""
        found = self.lookup(name)
        if found is None:
            raise QueueNotFound(name)
        return found

    def set(self, obj: object, attr: str, value: Any) -> None:
        """Sets ``obj.attr`` to ``value``; set back if the batch aborts."""
        old = getattr(obj, attr)
        setattr(obj, attr, value)
        self._undo.append(partial(setattr, obj, attr, old))

    def undo(self, fn: Callable[[], object]) -> None:
        """Runs ``fn`` if the batch aborts."""
        self._undo.append(fn)

    def after(self, fn: Callable[[], object]) -> None:
        """Runs ``fn`` once the batch is durable."""
        self._after.append(fn)

    def count(self, queue: str, reason: str = "", **by: int) -> None:
        """Adds ``by`` to the queue's traffic counts once the batch is
        durable (in order with its ``after`` calls); ``reason``: one more
        dead letter for that reason."""
        self._after.append(partial(count, self._traffic, queue, reason, by))

    def commit(self, after: bool = True) -> None:
        """Commits the transactions, then (``after``) runs the ``after``
        work; without, ``finish`` runs it later."""
        durable = self._txns.pop(True, None)
        if durable is not None:
            if probe.ON:
                probe.mark("txn")
            try:
                durable.commit()
            except BaseException:
                self.abort()
                raise
            if probe.ON:
                probe.mark("commit")
        memory = self._txns.pop(False, None)
        if memory is not None:
            memory.commit()
        if after:
            self.finish()

    def finish(self) -> None:
        """Runs the ``after`` work of a committed batch."""
        for fn in self._after:
            fn()

    def abort(self) -> None:
        for t in self._txns.values():
            t.abort()
        self._txns.clear()
        for fn in reversed(self._undo):
            fn()
        self._undo.clear()


Run = Callable[[Batch], Any]
#: A held group's release: None lets its answers and ``after`` work go; an
#: error answers its callers with it instead: its ``after`` work still runs
#: (timers, counts) but what answers a blocked call or hands out deliveries
#: looks at ``Batch.failed`` and fails instead.
Release = Callable[[MsgboardError | None], None]
#: The inbox item size of a ``call_soon`` wake-up (not an operation).
_WAKE = -1
Op = tuple[Run, Future[Any], int]


class _Join:
    """A group held by two (the gate and the store's sync): released once
    both have let it go, with the first error either gave."""

    __slots__ = ("failed", "left", "release")

    def __init__(self, release: Release) -> None:
        self.release = release
        self.left = 2
        self.failed: MsgboardError | None = None

    def part(self, failed: MsgboardError | None) -> None:
        if failed is not None and self.failed is None:
            self.failed = failed
        self.left -= 1
        if not self.left:
            self.release(self.failed)


class Timer:
    """An operation due at a monotonic time; ``cancel`` before then drops it."""

    __slots__ = ("cancelled", "deadline", "order", "run")

    _orders = itertools.count()

    def __init__(self, deadline: float, run: Run) -> None:
        self.deadline = deadline
        self.order = next(self._orders)
        self.run = run
        self.cancelled = False

    def __lt__(self, other: Timer) -> bool:
        return (self.deadline, self.order) < (other.deadline, other.order)

    def cancel(self) -> None:
        self.cancelled = True


class Writer:
    """The thread that owns the stores and the engine's memory."""

    def __init__(self, durable: Store, memory: Store, waiters: Waiters, max_batch: int = 4096):
        self._durable = durable
        self._memory = memory
        self._waiters = waiters
        self._max_batch = max_batch
        self._inbox: queue.SimpleQueue[tuple[Run, Future[Any], int] | None] = queue.SimpleQueue()
        self._closed = False
        self._timers: list[Timer] = []
        self._lock = threading.Lock()
        self.commits = 0
        self.committed_ops = 0
        #: Each queue's traffic since the board opened (``Batch.count``).
        self.traffic: dict[str, Traffic] = {}
        #: Called after each group commit with its seconds and size.
        self.observe: Callable[[float, int], object] | None = None
        #: A replicated board's: given each committed group's release.
        self.gate: Callable[[Release], object] | None = None
        self._soon: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        #: Committed groups that wait for a sync of the durable store to
        #: cover them, oldest first: their release, and their ops (failed
        #: if the thread dies).
        self._held: list[tuple[Release, list[Op]]] = []
        #: The last held group's operations ran faster than a flush takes
        #: (``_flush_seconds``, a moving average): the next group may cover
        #: it rather than a flush of its own.
        self._cheap = False
        self._flush_seconds = 0.0
        #: Why the thread died (None while it runs or once it stopped
        #: cleanly), and who is told: a board that cannot write must stop
        #: serving, never hang.
        self.failure: BaseException | None = None
        self.on_failure: Callable[[BaseException], object] | None = None
        self._thread = threading.Thread(target=self._run, name="msgboard-writer", daemon=True)
        self._thread.start()

    def submit(self, run: Run, fut: Future[Any] | None = None, size: int = 0) -> Future[Any]:
        """Queues ``run`` for the next group commit; its return value (or
        MsgboardError) answers the future once the group is durable."""
        fut = Future() if fut is None else fut
        with self._lock:
            if self._closed:
                if self.failure is not None:
                    raise Unavailable(f"the board stopped: its writer failed ({self.failure!r})")
                raise Unavailable("the board is closed")
            self._inbox.put((run, fut, size))
        return fut

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Runs ``fn`` on the writer thread before its next group (any
        thread may call it); dropped once the writer has stopped."""
        with self._lock:
            if self._closed:
                return
            self._soon.put(fn)
            self._inbox.put((_noop, Future(), _WAKE))

    def _run_soon(self) -> None:
        while True:
            try:
                fn = self._soon.get_nowait()
            except queue.Empty:
                return
            fn()

    def at(self, deadline: float, run: Run) -> Timer:
        """Runs ``run`` in the first group commit after the monotonic time
        ``deadline``. Writer thread only."""
        t = Timer(deadline, run)
        heapq.heappush(self._timers, t)
        return t

    def _next_deadline(self) -> float | None:
        timers = self._timers
        while timers and timers[0].cancelled:
            heapq.heappop(timers)
        first = self._waiters.next_deadline()
        if timers and (first is None or timers[0].deadline < first):
            return timers[0].deadline
        return first

    def _due(self, now: float) -> list[tuple[Run, Future[Any], int]]:
        timers = self._timers
        due: list[tuple[Run, Future[Any], int]] = []
        while timers and timers[0].deadline <= now:
            t = heapq.heappop(timers)
            if not t.cancelled:
                due.append((t.run, Future(), 0))
        return due

    @property
    def closed(self) -> bool:
        return self._closed

    def on_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Finishes what was submitted, answers every waiter with nothing and
        ends the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(None)
        self._thread.join()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:
            self._die(e)

    def _die(self, e: BaseException) -> None:
        """The thread is dying of ``e``: everything submitted, and everything
        submitted from now on, fails with Unavailable, and ``on_failure`` is
        told, so the board stops serving instead of hanging."""
        log.critical("the writer thread died; the board stops serving", exc_info=e)
        self.failure = e
        with self._lock:
            self._closed = True
        gone = Unavailable(f"the board stopped: its writer failed ({e!r})")
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None and not item[1].done():
                item[1].set_exception(gone)
        for _, ops in self._held:
            for _, fut, _ in ops:
                if not fut.done():
                    fut.set_exception(gone)
        self._held.clear()
        for w in self._waiters.all():
            self._waiters.remove(w)
            if not w.future.done():
                w.future.set_exception(gone)
        if self.on_failure is not None:
            self.on_failure(e)

    def _loop(self) -> None:
        stop = False
        while not stop:
            deadline = self._next_deadline()
            timeout = (
                None if deadline is None else min(MAX_WAIT, max(0.0, deadline - time.monotonic()))
            )
            ops = []
            if self._held and (self._inbox.empty() or not self._cheap):
                self._flush()  # nothing follows soon to cover them: one sync
            try:
                item = self._inbox.get(timeout=timeout)
                while True:
                    if item is None:
                        stop = True
                        break
                    if item[2] != _WAKE:
                        ops.append(item)
                        if len(ops) >= self._max_batch:
                            break
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            self._run_soon()
            now = time.monotonic()
            for w in self._waiters.expire(now):
                answer(w.future, [])
            ops += self._due(now)
            if ops:
                self._execute(ops)
        self._flush()
        self._run_soon()
        for w in self._waiters.all():
            self._waiters.remove(w)
            answer(w.future, [])

    def _flush(self) -> None:
        """Syncs the durable store, then lets every held group go."""
        if self._held:
            t = time.perf_counter()
            self._durable.flush()
            self._flush_seconds += (time.perf_counter() - t - self._flush_seconds) / 8
            if probe.ON:
                probe.mark("flush")
            self._release_held()

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for release, ops in held:
            _let_go(release, ops)

    def _execute(self, ops: list[tuple[Run, Future[Any], int]]) -> None:
        if probe.ON:
            probe.mark("group", len(ops))
        reserve = sum(size for _, _, size in ops)
        started = time.perf_counter()
        durable = self._durable
        syncs = durable.syncs
        waiting = len(self._held)
        while True:
            batch = Batch(self._durable, self._memory, reserve, self.traffic)
            results: list[tuple[Any, BaseException | None]] = []
            try:
                for i, (run, _, _) in enumerate(ops):
                    try:
                        results.append((run(batch), None))
                    except StoreDamaged as e:
                        # LMDB met damage: its transaction is gone. The
                        # op that met it fails; the rest run again.
                        batch.abort()
                        fut = ops.pop(i)[1]
                        if fut.running() or fut.set_running_or_notify_cancel():
                            fut.set_exception(e)
                        raise Rerun from e
                    except StoreError:
                        raise
                    except MsgboardError as e:
                        results.append((None, e))
                ran = time.perf_counter() - started
                batch.commit(after=False)
            except Rerun:
                if not ops:
                    return
                continue
            except MapFull:
                batch.abort()
                self._durable.grow()
                log.info("LMDB map grown to %d bytes", self._durable.info().map_size)
                continue
            except BaseException as e:
                batch.abort()
                if not isinstance(e, MsgboardError):
                    log.exception("operation failed; its group was rolled back")
                    e = StoreError(f"internal error: {e!r}")
                for _, fut, _ in ops:
                    if not fut.done():
                        fut.set_exception(e)
                return
            break
        self.commits += 1
        self.committed_ops += len(ops)
        if self.observe is not None:
            self.observe(time.perf_counter() - started, batch.stored)
        release: Release = partial(_release, batch, ops, results)
        if waiting and durable.syncs != syncs:
            self._release_held()  # this commit's data sync covered them
        if not self._held and not durable.unsynced:
            if self.gate is None:
                _let_go(release, ops)
            else:
                self.gate(release)
            return
        if self.gate is not None:
            join = _Join(release)
            self.gate(join.part)
            release = join.part
        self._held.append((release, ops))
        # The next group covers this one only if it is cheap: a group whose
        # operations ran longer than a flush takes would make the held ones
        # wait longer than the flush saves (loop: flush first).
        self._cheap = ran < self._flush_seconds
        if waiting and len(self._held) > waiting:
            # A group went by without a sync (it wrote nothing durable):
            # the held ones wait no longer.
            self._flush()


def _noop(b: Batch) -> None:
    """The run of a ``call_soon`` wake-up, never called."""


def _let_go(release: Release, ops: list[Op]) -> None:
    """Releases a durable group; a failure of its ``after`` work fails its
    callers not yet answered, as a failure before the commit would."""
    try:
        release(None)
    except Exception as e:
        log.exception("a committed group's after work failed")
        err = StoreError(f"internal error: {e!r}")
        for _, fut, _ in ops:
            if not fut.done() and (fut.running() or fut.set_running_or_notify_cancel()):
                fut.set_exception(err)


def _release(
    batch: Batch,
    ops: list[tuple[Run, Future[Any], int]],
    results: list[tuple[Any, BaseException | None]],
    failed: MsgboardError | None,
) -> None:
    """A held group's release (writer thread): its ``after`` work, then its
    answers, or ``failed`` for each caller that had a value coming (the
    ``after`` work that answers or delivers sees ``batch.failed``)."""
    batch.failed = failed
    batch.finish()
    if probe.ON:
        probe.mark("answered", len(ops))
    _answer(ops, results, failed)


def _answer(
    ops: list[tuple[Run, Future[Any], int]],
    results: list[tuple[Any, BaseException | None]],
    failed: MsgboardError | None,
) -> None:
    for (_, fut, _), (value, err) in zip(ops, results, strict=True):
        if fut.done() or value is PENDING:
            continue
        if err is None and failed is not None:
            err = failed
        if err is not None:
            if fut.running() or fut.set_running_or_notify_cancel():
                fut.set_exception(err)
        elif fut.running() or fut.set_running_or_notify_cancel():
            fut.set_result(value)
