"""What a primary tells about its standbys: ``Standbys``, and the
replication service's ``Status`` call (``StatusService``).

``Lag`` remembers when each recent log entry was committed (wrapped around
the store's ``Log.logged``, on the writer thread: one clock read and one append per
group commit), so that a standby's lag can be told in seconds as well as in
entries: how long ago the primary committed the oldest entry the standby has
not acknowledged.

``Standbys`` looks at the sync gate's connected standbys every ``EVERY``
seconds, for ``msgboard cluster status``, the metrics and the ``$sys``
events: ``standby.joined`` (standby, acked index) when a standby starts
following the log, or catches up again after it lagged; ``standby.lost``
(standby, acked index, reason) when its stream ends (``disconnected``) or
when it has held back a write longer than the sync timeout (``lagging``).
A standby that leaves and comes back between two looks is not announced.

A standby is named by what it told its primary (its Hello's ``board``:
its address of static roles, its board name in a cluster): that is what the
status, the metrics' ``standby`` label and the events show. The gate keeps
it under its stable id (``board_id``: the ``board-id`` file of a standby of
static roles), which the status shows beside it and the looks follow, so
that a standby back on another port between two looks is not announced.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msgboard.cluster.role import Role
from msgboard.cluster.service import ReplicationService, check_token
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.sync import SyncGate
from msgboard.details import abort
from msgboard.engine import Board
from msgboard.engine.events import STANDBY_JOINED, STANDBY_LOST
from msgboard.errors import Unauthenticated
from msgboard.lmdbstore import Log
from msgboard.v1 import replication_pb2 as rpb

#: Commit times kept; a standby further behind has at least the oldest's age.
KEPT = 8192
#: Seconds between two looks at the standbys.
EVERY = 0.5

#: ``Board.emit``: announces an event on ``$sys`` (any thread).
Emit = Callable[..., None]


class Lag:
    """The commit times of the latest ``KEPT`` log indexes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._times: deque[tuple[int, float]] = deque(maxlen=KEPT)

    def after(self, logged: Callable[[int, bytes], object]) -> Callable[[int, bytes], None]:
        """A ``Log.logged`` that calls ``logged``, then notes the time."""

        def both(index: int, entry: bytes) -> None:
            logged(index, entry)
            self._times.append((index, self._clock()))

        return both

    def seconds(self, acked: int, last: int) -> float:
        """How long ago the oldest entry after ``acked`` was committed; 0
        when ``acked`` reaches ``last``."""
        if acked >= last:
            return 0.0
        times = list(self._times)
        if not times:
            return 0.0
        # The first entry after ``acked`` (or the oldest remembered).
        at = times[min(bisect.bisect_left(times, (acked + 1,)), len(times) - 1)][1]
        return max(0.0, self._clock() - at)


@dataclass(frozen=True)
class Standby:
    """A connected standby, as the primary sees it: ``board``, its name
    (address) as it said; ``board_id``, its stable id."""

    board: str
    acked: int
    lag_entries: int
    lag_seconds: float
    board_id: str = ""


@dataclass(frozen=True)
class Report:
    """The primary's log position and its connected standbys."""

    last: int
    epoch: int
    standbys: tuple[Standby, ...]

    def to_pb(self) -> rpb.StatusResponse:
        return rpb.StatusResponse(
            last=self.last,
            epoch=self.epoch,
            standbys=[
                rpb.StandbyStatus(
                    board=s.board,
                    acked=s.acked,
                    lag_entries=s.lag_entries,
                    lag_seconds=s.lag_seconds,
                    board_id=s.board_id,
                )
                for s in self.standbys
            ],
        )


class Standbys:
    """The standbys of a primary whose ``gate`` counts their acks on
    ``log``; announces them through ``emit`` (``Board.emit``) from a thread
    of its own, from ``start()`` to ``stop()``."""

    def __init__(
        self, log: Log, gate: SyncGate, lag: Lag, role: Role, emit: Emit | None = None
    ) -> None:
        self._log = log
        self._gate = gate
        self._lag = lag
        self._role = role
        self._emit = emit
        #: Each announced standby (by id): True while it keeps up, False once lagging.
        self._seen: dict[str, bool] = {}
        #: Each connected standby at the last look, by id.
        self._last: dict[str, Standby] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msgboard-standbys", daemon=True)

    def report(self) -> Report:
        last = self._log.last
        standbys = sorted(
            (
                Standby(label, acked, max(0, last - acked), self._lag.seconds(acked, last), key)
                for key, (label, acked) in self._gate.named().items()
            ),
            key=lambda s: (s.board, s.board_id),
        )
        return Report(last, self._role.epoch, tuple(standbys))

    def start(self) -> Standbys:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(EVERY):
            self.look()

    def look(self) -> None:
        """Announces what changed since the last look."""
        now = {s.board_id: s for s in self.report().standbys}
        for key in sorted(set(self._seen) - set(now)):
            if self._seen.pop(key):
                was = self._last.get(key)
                board, acked = (was.board, was.acked) if was else (key, 0)
                self._say(STANDBY_LOST, board, acked, "disconnected")
        for key, s in sorted(now.items(), key=lambda kv: (kv[1].board, kv[0])):
            keeping_up = s.lag_seconds <= self._gate.timeout
            before = self._seen.get(key)
            self._seen[key] = keeping_up
            if keeping_up and not before:
                self._say(STANDBY_JOINED, s.board, s.acked)
            elif before and not keeping_up:
                self._say(STANDBY_LOST, s.board, s.acked, "lagging")
        self._last = now

    def _say(self, event: str, *fields: str | int) -> None:
        if self._emit is not None:
            self._emit(event, *fields)


class StatusService(ReplicationService):
    """The primary's Replication service, with ``Status`` answered from
    ``standbys``."""

    def __init__(
        self,
        token: str,
        role: Role,
        board: Board,
        shipper: Shipper,
        gate: SyncGate,
        *,
        standbys: Standbys,
    ) -> None:
        super().__init__(token, role, board, shipper, gate)
        self._secret = token
        self._standing = standbys

    async def Status(self, request: rpb.StatusRequest, context: Any) -> rpb.StatusResponse:
        if not check_token(context, self._secret):
            why = "the replication service needs the cluster's token"
            await abort(context, Unauthenticated(why))
        refusal = self.role.refusal()
        if refusal is not None:
            await abort(context, refusal)
        return self._standing.report().to_pb()
