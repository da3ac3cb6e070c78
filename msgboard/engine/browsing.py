"""The board's read-only views of its queues: Browse pages, Stats and
snapshots. A durable queue's page and the stats of every queue are read off
the writer thread (``reads.py``); a snapshot copies on a thread of its own.
``Browsing`` is a part of the ``Board`` (board.py), which serves its calls
(``browse``, ``stats``, ``snapshot``, ...).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import closing
from dataclasses import replace
from typing import Any

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine import views
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network
from msgboard.engine.reads import Reads, Work
from msgboard.engine.selectors import Backoff
from msgboard.engine.traffic import Traffic
from msgboard.engine.waiters import Waiters
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import InvalidArgument, QueueNotFound
from msgboard.lmdbstore import DurableStore, MemoryStore, Txn
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.message import Message, Section
from msgboard.results import BoardStats, Page, Start

#: The most messages one Browse page reads before it answers, matching or
#: not, so that a rare pattern cannot hold the writer for long.
BROWSE_SCAN_LIMIT = 100_000


class Browsing:
    """The board's browse, stats and snapshot calls."""

    def __init__(
        self,
        limits: Limits,
        writer: Writer,
        net: Network,
        reads: Reads,
        waiters: Waiters,
        durable: DurableStore,
        memory: MemoryStore,
    ) -> None:
        self._limits = limits
        self._writer = writer
        self._net = net
        self._reads = reads
        self._waiters = waiters
        self._durable = durable
        self._memory = memory

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
        """A page of the queue in seq order, both sections merged unless
        ``section`` says which, from ``start`` forward (or backward with
        ``reverse``). ``since`` is µs since the epoch, for Start.TIME."""
        self._limits.check_name(queue)
        limit = self._limits.check_count(limit, self._limits.max_page, "limit", 100)
        if seq < 0:
            raise InvalidArgument(f"seq: must not be negative (got {seq})")
        pat = pattern or EVERYTHING
        #: seq -> when it is routed again, for the messages backing off
        #: (copied on the writer thread, when the page is asked for).
        backing: dict[int, int] = {}

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
            # Closed on the thread reading the page (the writer's for a
            # transient queue, a reader's for a view), when the page is full.
            with closing(txn.scan(queue, section, first, reverse)) as rows:
                for scanned, m in enumerate(rows):
                    if len(out) >= limit or scanned >= BROWSE_SCAN_LIMIT:
                        return Page(out, m.seq)
                    if pat.matches(m):
                        until = backing.get(m.seq)
                        out.append(m if until is None else replace(m, redeliver_at=until))
            return Page(out, 0)

        fut: Future[Page] = Future()

        def run(b: Batch) -> Any:
            txn, info = b.find(queue)
            for seq, hold in self._net.holds.held(queue).items():
                if isinstance(hold, Backoff):
                    backing[seq] = hold.until
            if info.spec.transient:
                return page(txn)  # memory: cheap, and the writer's alone
            return self._reads.later(b, fut, lambda: page)

        return self._writer.submit(run, fut)

    def stats_async(self, queue: str = "") -> Future[BoardStats]:
        """Every queue's counts and traffic (or one queue's, ``queue``), with
        the store's figures. ``$sys`` shows only when asked for."""
        if queue:
            self._limits.check_name(queue)

        fut: Future[BoardStats] = Future()

        def make() -> Work[BoardStats]:
            # Copies of the writer's figures, of the same moment as the view.
            w = self._writer
            waiting = self._waiters.counts()
            transient = views.transient(self._memory, waiting)
            traffic = {k: views.shown(t) for k, t in w.traffic.items()}
            figures = self._net.figures()
            store, commits, ops = self._durable.info(), w.commits, w.committed_ops
            damaged = self._durable.damaged_counts()

            def work(view: Txn) -> BoardStats:
                rows = [
                    views.stats(
                        v,
                        traffic.get(v.spec.name),
                        figures.get(v.spec.name),
                        damaged.get(v.spec.name, 0),
                    )
                    for v in views.merged(views.views(view, waiting), transient)
                ]
                return BoardStats(store, commits, ops, rows)

            return work

        def run(b: Batch) -> Any:
            if not queue:
                return self._reads.later(b, fut, make)
            txn, info = b.find(queue)  # one queue: O(1) here
            name = info.spec.name
            v = views.view(txn, info, self._waiters.count(name))
            table, holds = self._net.table, self._net.holds
            figures = (len(table.of(name)), table.consumers(name), holds.outstanding(name))
            w = self._writer
            t = w.traffic.get(name)
            hurt = 0 if v.spec.transient else self._durable.damaged(name)
            row = views.stats(v, None if t is None else views.shown(t), figures, hurt)
            return BoardStats(self._durable.info(), w.commits, w.committed_ops, [row])

        return self._writer.submit(run, fut)

    def traffic_async(self) -> Future[dict[str, Traffic]]:
        """Copies of every queue's traffic counts since the board opened
        (metrics read them at each scrape)."""
        traffic = self._writer.traffic
        return self._writer.submit(lambda b: {k: t.copy() for k, t in traffic.items()})

    def on_commit(self, fn: Callable[[float, int], object] | None) -> None:
        """Has ``fn(seconds, messages)`` called on the writer thread after
        each group commit: how long the group took (its operations, the
        commit and the fsync) and how many messages it stored on queues
        (posted, forwarded, dead-lettered; 0 for a group of acks alone).
        None: no calls."""
        self._writer.observe = fn

    def snapshot_async(self, path: str | os.PathLike[str]) -> Future[SnapshotInfo]:
        """Writes a consistent compacted copy of the durable queues to the
        directory ``path`` (absolute; absent or empty) while the board keeps
        serving; every write answered before the call is in it. Raises
        InvalidArgument, FailedPrecondition (path taken), StoreFull."""
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
