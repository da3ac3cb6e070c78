"""The last hour of every queue's depth and rates, kept in the board's memory.

A task in the board's event loop reads the board's Stats every ``every``
seconds (5 by default: one Stats view, built on a reader thread, as a
Prometheus scrape reads) and keeps, per queue, ``SPAN`` seconds of: the
messages waiting (ready), outstanding (delivered or leased, not acked),
and the rates in (posted) and out per second between two readings. Out
counts every way a message leaves its queue (the engine's ``left`` count:
taken, acked by a consumer or a lease, moved on, dead-lettered, expired,
dropped, deleted, purged), read with the board's traffic counts
(``Board.traffic_async``, the copy a metrics scrape reads).
The overview's table shows the latest reading, so a person watching the
console costs the board nothing more than the sampler already does.

Memory is bounded whatever the board holds: ``POINTS`` readings (an hour
at 5 s: 720) in fixed arrays of floats, for at most ``MAX_CHARTED`` queues
(the first by name; others show in the table without a chart), about 23
KiB a queue, 6 MiB in all at most. A queue that goes away drops its arrays.
On a board so big that one reading takes more than 2% of the time between
two (tens of thousands of queues), it reads less often (``pause``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from array import array
from collections.abc import Iterable, Mapping

from aiohttp import web

from msgboard.console.context import Console
from msgboard.results import BoardStats, QueueStats

log = logging.getLogger("msgboard.console")

#: Seconds of history kept.
SPAN = 3600.0
#: Queues with a chart, at most.
MAX_CHARTED = 256
#: A reading may take at most 1/BUDGET of the time between two readings.
BUDGET = 50
#: The series each charted queue keeps.
SERIES = ("ready", "outstanding", "in", "out")
NAN = math.nan


class Series:
    """One queue's readings, in a ring of ``n`` points (NaN: no reading)."""

    __slots__ = ("columns", "left", "posted")

    def __init__(self, n: int) -> None:
        self.columns = {k: array("d", [NAN]) * n for k in SERIES}
        #: The counters at the last reading (rates are their differences).
        self.posted = -1
        self.left = -1


class Sampler:
    """Reads the board's figures every ``console.every`` seconds."""

    def __init__(self, console: Console, span: float = SPAN, limit: int = MAX_CHARTED) -> None:
        self.console = console
        self.points = max(2, int(span / console.every))
        self.limit = limit
        #: When each point was read (seconds since the epoch), a ring.
        self.times = array("d", [NAN]) * self.points
        #: Where the next reading goes; readings taken so far.
        self.next = 0
        self.taken = 0
        self.queues: dict[str, Series] = {}
        #: The latest Stats read (None: none yet, or no board open).
        self.latest: BoardStats | None = None
        self.latest_at = 0.0
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a board closing, a full disk: try again later
                log.debug("console sampler: %r", e)
            spent = time.perf_counter() - started
            await asyncio.sleep(self.pause(spent))

    def pause(self, spent: float) -> float:
        """Seconds until the next reading, after one that took ``spent``:
        ``every``, or longer on a board so big that a reading takes more
        than 2% of the time (a Stats of 100,000 queues)."""
        return max(self.console.every, spent * BUDGET)

    async def sample(self) -> None:
        """One reading of the board's figures (none while no board is open)."""
        board = self.console.board
        if board is None:
            self.latest = None
            return
        # Both asked at once: the reading waits for the slower, not the sum.
        asked = board.stats_async(), board.traffic_async()
        stats = await asyncio.wrap_future(asked[0])
        traffic = await asyncio.wrap_future(asked[1])
        self.add(stats, time.time(), {q: t.left for q, t in traffic.items()})

    def add(self, stats: BoardStats, now: float, left: Mapping[str, int]) -> None:
        """Files one Stats reading taken at ``now``, with how many messages
        have left each queue since the board opened (``left``)."""
        i = self.next
        dt = now - self._last if self._last else 0.0
        self.times[i] = now
        seen = set()
        for q in stats.queues:
            seen.add(q.name)
            s = self.queues.get(q.name)
            if s is None:
                if len(self.queues) >= self.limit:
                    continue
                s = self.queues[q.name] = Series(self.points)
            self._file(s, q, left.get(q.name, 0), i, dt)
        for gone in [n for n in self.queues if n not in seen]:
            del self.queues[gone]
        self.next = (i + 1) % self.points
        self.taken += 1
        self._last = now
        self.latest, self.latest_at = stats, now

    @staticmethod
    def _file(s: Series, q: QueueStats, left: int, i: int, dt: float) -> None:
        c = s.columns
        c["ready"][i] = q.ready
        c["outstanding"][i] = q.outstanding
        if s.posted >= 0 and dt > 0:
            c["in"][i] = max(0, q.posted - s.posted) / dt
            c["out"][i] = max(0, left - s.left) / dt
        else:
            c["in"][i] = c["out"][i] = NAN
        s.posted, s.left = q.posted, left

    def rates(self, name: str) -> tuple[float, float]:
        """A queue's latest rates in and out, per second (0 before two
        readings, or for a queue without a chart)."""
        s = self.queues.get(name)
        if s is None or self.taken == 0:
            return 0.0, 0.0
        i = (self.next - 1) % self.points
        r_in, r_out = s.columns["in"][i], s.columns["out"][i]
        return (0.0 if math.isnan(r_in) else r_in, 0.0 if math.isnan(r_out) else r_out)

    def series(self, names: Iterable[str], since: float = 0.0) -> dict[str, object]:
        """The readings after ``since`` (seconds since the epoch; 0: all
        kept), oldest first, for the queues ``names`` that have a chart:
        ``{"t": [...], "queues": {name: {"ready": [...], ...}}}``, NaN as
        None (JSON null: uPlot draws a gap)."""
        order = [(self.next + k) % self.points for k in range(self.points)]
        idx = [j for j in order if not math.isnan(self.times[j]) and self.times[j] > since]
        out: dict[str, object] = {"t": [self.times[j] for j in idx], "every": self.console.every}
        queues: dict[str, dict[str, list[float | None]]] = {}
        for name in names:
            s = self.queues.get(name)
            if s is None:
                continue
            queues[name] = {
                k: [None if math.isnan(col[j]) else round(col[j], 3) for j in idx]
                for k, col in s.columns.items()
            }
        out["queues"] = queues
        return out


SAMPLER = web.AppKey("sampler", Sampler)
