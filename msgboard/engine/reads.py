"""Calls that only read, answered off the writer thread.

Every operation runs on the single writer thread (``writer.py``), so a call
that only reads but reads much (ListQueues or Stats over 100,000 queues, a
Browse page, a Read) used to hold every commit behind it: a Post waited
seconds behind a listing. Here such a call does its work on a reader thread
instead, against a *view*, while the writer goes on committing.

A view is taken on the writer thread, in a ``Batch.after`` of the call's
operation: after its group has committed and before the next group begins.
It is an LMDB read transaction together with the queue table and counters
of that same commit (``DurableStore.reader``), plus copies of the little
engine memory the call needs (waiter counts, traffic counts, the holds of
one queue), made by the call's ``make``. All of it describes one moment, so
answers are consistent (``ready`` is never ``unprocessed`` of one commit
less ``outstanding`` of another), and the reader thread never touches the
engine's memory, which stays lock-free, the writer's alone. Taking a view
costs a copy of the queue table (a few ms for 100,000 queues) and of those
counts; decoding, walking and building answers happen on the reader.
LMDB readers never block its writer.

The map grows (``set_mapsize``) only while the process has no transaction
open: a view counts as a snapshot copy does, so growing ahead is skipped
while one is open and growing after MapFull waits for it; views stay short
(a Browse page reads at most BROWSE_SCAN_LIMIT messages, a Read stops at its
``max``).

What stays on the writer thread: calls that cost O(1) there (GetQueue,
GetSelector, Stats of one queue), the selectors' figures (they live in the
writer's memory; a listing copies them, no store read), and reads of a
transient queue's messages (the memory store is changed in place by the
writer; its reads decode nothing). A Read that waits (timeout > 0) is a
blocked call, and blocked calls belong to the writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from msgboard.engine.writer import PENDING, Batch
from msgboard.errors import MsgboardError, StoreError, Unavailable
from msgboard.lmdbstore import DurableStore, Txn

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What a call does on the reader thread, with the view's transaction.
Work = Callable[[Txn], T]


class Reads:
    """The reader threads of one board."""

    def __init__(self, durable: DurableStore, threads: int = 2) -> None:
        self._durable = durable
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="msgboard-reader")

    def later(self, b: Batch, fut: Future[T], make: Callable[[], Work[T]]) -> Any:
        """From inside an operation: once its group has committed, calls
        ``make`` on the writer thread (to copy what it needs of memory) and
        answers ``fut`` with what the work it returns gives on a reader
        thread. Returns PENDING, for the operation to return."""

        def hand() -> None:
            # A Batch.after must not raise: a failure answers the call.
            if b.failed is not None:  # a held group that failed: no answer
                _fail(fut, b.failed)
                return
            try:
                work = make()
                # A later group may be committed, its meta page not yet
                # synced (durable.py): sync it before the view can see it.
                self._durable.flush()
                view = self._durable.reader()
            except BaseException as e:
                _fail(fut, e)
                return
            try:
                self._pool.submit(self._run, fut, work, view)
            except RuntimeError:  # the board is closing
                view.abort()
                _fail(fut, Unavailable("the board is closed"))

        b.after(hand)
        return PENDING

    @staticmethod
    def _run(fut: Future[T], work: Work[T], view: Txn) -> None:
        try:
            value = work(view)
        except BaseException as e:
            _fail(fut, e)
        else:
            if fut.running() or fut.set_running_or_notify_cancel():
                fut.set_result(value)
        finally:
            view.abort()

    def close(self) -> None:
        """Finishes the reads under way; later ones fail."""
        self._pool.shutdown(wait=True)


def _fail(fut: Future[Any], e: BaseException) -> None:
    if not isinstance(e, MsgboardError):
        log.error("a read failed", exc_info=e)
        e = StoreError(f"internal error while reading: {e!r}")
    if not fut.done() and (fut.running() or fut.set_running_or_notify_cancel()):
        fut.set_exception(e)
