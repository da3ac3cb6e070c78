"""The board's read-only views of its queues: Browse pages, Stats and
snapshots. A durable queue's page and the stats of every queue are read off
the writer thread (``reads.py``); a snapshot copies on a thread of its own.
``Browsing`` is a part of ``Board`` (board.py), which provides the stores,
the writer and the queue lookups it uses.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network, Traffic
from msgboard.engine.reads import Reads, Work
from msgboard.engine.views import BoardStats, Page, QueueView, Start, _merged, _stats, _traffic
from msgboard.engine.waiters import Waiters
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import InvalidArgument, QueueNotFound
from msgboard.lmdbstore import DurableStore, QueueInfo, Txn
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.message import Message, Section

#: The most messages one Browse page reads before it answers, matching or
#: not, so that a rare pattern cannot hold the writer for long.
BROWSE_SCAN_LIMIT = 100_000


class Browsing:
    """Board's browse, stats and snapshot methods."""

    # Provided by Board (board.py).
    limits: Limits
    _writer: Writer
    _net: Network
    _reads: Reads
    _waiters: Waiters
    _durable: DurableStore

    if TYPE_CHECKING:

        def _find(self, b: Batch, name: str) -> tuple[Txn, QueueInfo]: ...

        def _transient(self, waiting: dict[str, int]) -> list[QueueView]: ...

        @staticmethod
        def _view_of(txn: Txn, info: QueueInfo, waiting: dict[str, int]) -> QueueView: ...

        def _view(self, txn: Txn, info: QueueInfo) -> QueueView: ...

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

    def traffic_async(self) -> Future[dict[str, Traffic]]:
        """Copies of every queue's traffic counts since the board opened
        (metrics read them at each scrape)."""
        net = self._net
        return self._writer.submit(lambda b: {k: t.copy() for k, t in net.traffic.items()})

    def on_commit(self, fn: Callable[[float, int], object] | None) -> None:
        """Has ``fn(seconds, messages)`` called on the writer thread after
        each group commit: how long the group took (its operations, the
        commit and the fsync) and how many messages it stored on queues
        (posted, forwarded, dead-lettered; 0 for a group of acks alone).
        None: no calls."""
        self._writer.observe = fn

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
