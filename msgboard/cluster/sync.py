"""The primary's answers wait for its standbys: ``SyncGate``.

The writer hands the gate each committed group's release (``Writer.gate``,
``engine/writer.py``); the group's index is the log's last index then (a
group that wrote nothing waits for the groups before it). The gate calls the
release, on the writer thread and in index order, once ``needed`` standbys
have acknowledged that index (applied and fsynced it). A standby that is
connected counts with the index it acknowledged last; one that is not
counts for nothing.

Strict by default: a group that waited ``timeout`` seconds without enough
acknowledgements is released with Unavailable, saying how many standbys
were needed and where each stood (its callers learn their write may not be
replicated; it is committed on the primary and goes to the standbys when
they return). With ``allow_async`` the group is released as if acknowledged,
logged, and with fewer than ``needed`` standbys connected the gate waits
for none (Patroni's synchronous_mode without strict).

Releases run strictly in index order: a group that needs no wait is
released at once only when no earlier group's release is still on its way
to the writer thread (else it queues behind it), and releases are handed
to the writer thread under the gate's lock, in the order they left the
held list.

The log's pin: the gate also knows where every standby stood, connected or
not (and a seeding standby's copy's index), and pins the log at the lowest
(``Log.pin``), so that a standby that comes back catches up from the log.
A standby away for ``forget`` seconds is forgotten (logged): the log is
then trimmed as ``--log-keep`` says, and the standby, if it returns, is
seeded again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from msgboard.engine import Release
from msgboard.errors import MsgboardError, Unavailable
from msgboard.lmdbstore import Log

log = logging.getLogger(__name__)


class SyncGate:
    """Holds each group's release until ``needed`` standbys acknowledged
    its index. ``call_soon`` runs a function on the writer thread
    (``Board.call_soon``). ``forget``: seconds after which a standby that
    went away (or a seed that never followed) stops pinning the log."""

    def __init__(
        self,
        oplog: Log,
        call_soon: Callable[[Callable[[], object]], None],
        *,
        needed: int = 1,
        timeout: float = 5.0,
        allow_async: bool = False,
        forget: float = 3600.0,
    ) -> None:
        self._log = oplog
        self._call_soon = call_soon
        self.needed = needed
        self.timeout = timeout
        self.allow_async = allow_async
        self.forget = forget
        self._cond = threading.Condition()
        #: Held releases, oldest first: (index, deadline, release).
        self._held: deque[tuple[int, float, Release]] = deque()
        #: Connected standbys' acknowledged index, by id.
        self._acked: dict[str, int] = {}
        #: Every standby's last acknowledged index, connected or not (the
        #: log keeps what the slowest still needs), and a seeding standby's
        #: copy's index; by id.
        self._known: dict[str, int] = {}
        #: When each standby in ``_known`` and not connected went away (or
        #: started seeding), monotonic: forgotten ``forget`` seconds later.
        self._away: dict[str, float] = {}
        #: How messages name each standby (its address, as it said).
        self._labels: dict[str, str] = {}
        #: Releases handed to ``call_soon`` and not yet run (writer thread).
        self._queued = 0
        self._closed = False
        self._async_said = False
        self._thread = threading.Thread(target=self._watch, name="msgboard-sync", daemon=True)
        self._thread.start()

    # -- the writer's side --------------------------------------------------

    def hold(self, release: Release) -> None:
        """The writer's ``gate``: ``release`` goes once the group is on
        enough standbys, after every group before it. Writer thread."""
        index = self._log.last
        with self._cond:
            closed = self._closed  # then every release fails: no order to keep
            if not closed and (self._held or not (self._enough(index) or self._async_now())):
                self._held.append((index, time.monotonic() + self.timeout, release))
                self._cond.notify()
                return
            if not closed and self._queued:  # releases of earlier groups still to run
                self._schedule([release], None)
                return
        release(Unavailable("the board is stopping") if closed else None)

    def _enough(self, index: int) -> bool:
        if self.needed <= 0:
            return True
        acked = sorted(self._acked.values(), reverse=True)
        return len(acked) >= self.needed and acked[self.needed - 1] >= index

    def _async_now(self) -> bool:
        """With allow_async and too few standbys connected: wait for none."""
        if not self.allow_async or len(self._acked) >= self.needed:
            self._async_said = False
            return False
        if not self._async_said:
            log.warning(
                "replication: %d of %d standbys connected; answering without them (--allow-async)",
                len(self._acked),
                self.needed,
            )
            self._async_said = True
        return True

    # -- the standbys' side -------------------------------------------------

    def connected(self, name: str, index: int, label: str = "", directory: str = "") -> None:
        """A standby connected, holding every entry up to ``index``;
        ``label``: how messages name it (its address; default ``name``);
        ``directory``: its data directory's id (the in-sync set's)."""
        with self._cond:
            self._labels[name] = label or name
        self.ack(name, index)

    def ack(self, name: str, index: int) -> None:
        """A standby applied and fsynced every entry up to ``index``."""
        with self._cond:
            self._acked[name] = index
            self._known[name] = index
            self._away.pop(name, None)
            self._pin()
            self._schedule(self._ready(), None)

    def gone(self, name: str) -> None:
        """A standby's stream ended."""
        with self._cond:
            if self._acked.pop(name, None) is not None:
                self._away[name] = time.monotonic()
                self._cond.notify()
            self._schedule(self._ready() if self.allow_async else [], None)

    def seeding(self, name: str, index: int) -> None:
        """A standby is being seeded with a copy holding ``index``: the log
        keeps it and what follows until the standby follows (or is
        forgotten, ``forget`` seconds from now)."""
        with self._cond:
            if name not in self._acked:
                self._known[name] = index
                self._away[name] = time.monotonic()
                self._pin()
                self._cond.notify()

    def _pin(self) -> None:
        """Forgets the standbys away too long; pins the log at the lowest
        index the others hold."""
        now = time.monotonic()
        for name, since in list(self._away.items()):
            if now - since >= self.forget:
                del self._away[name]
                was = self._known.pop(name, None)
                label = self._labels.pop(name, name)
                log.warning(
                    "replication: standby %s gone for %g s: the log no longer keeps "
                    "entries for it (it was at %s; it will be seeded again)",
                    label,
                    self.forget,
                    was,
                )
        self._log.pin = min(self._known.values()) if self._known else None

    def _ready(self) -> list[Release]:
        out = []
        while self._held and (self._enough(self._held[0][0]) or self._async_now()):
            out.append(self._held.popleft()[2])
        return out

    def _schedule(self, ready: list[Release], err: MsgboardError | None) -> None:
        """Hands ``ready`` to the writer thread (under ``_cond``, so that
        releases run in the order they were taken off ``_held``)."""
        if not ready:
            return
        self._queued += 1

        def run() -> None:
            try:
                for r in ready:
                    r(err)
            finally:
                with self._cond:
                    self._queued -= 1

        self._call_soon(run)

    # -- what waited too long -----------------------------------------------

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._held and not self._away:
                    self._cond.wait()
                if self._closed:
                    return
                now = time.monotonic()
                wake = [since + self.forget for since in self._away.values()]
                if self._away and min(wake) <= now:
                    self._pin()
                    continue
                if not self._held:
                    self._cond.wait(min(wake) - now)
                    continue
                index, deadline, _ = self._held[0]
                left = deadline - now
                if left > 0:
                    self._cond.wait(min([left, *(w - now for w in wake)]))
                    continue
                late = []
                while self._held and self._held[0][1] <= now:
                    late.append(self._held.popleft()[2])
                why = self._why(index)
                if self.allow_async:
                    log.warning("replication: %s; answered anyway (--allow-async)", why)
                    self._schedule(late, None)
                else:
                    self._schedule(late, Unavailable(why))

    def _why(self, index: int) -> str:
        stood = ", ".join(
            sorted(f"{self._labels.get(n, n)} at {i}" for n, i in self._acked.items())
        )
        stood = stood or "none connected"
        return (
            f"no standby in sync: the write (log index {index}) needs {self.needed} "
            f"standby(s) to acknowledge it within {self.timeout:g} s ({stood}); "
            "it is committed on the primary but may not be replicated"
        )

    def waiting(self) -> int:
        """Groups held for their standbys now."""
        with self._cond:
            return len(self._held)

    def status(self) -> dict[str, int]:
        """Each connected standby's acknowledged index, by id."""
        with self._cond:
            return dict(self._acked)

    def named(self) -> dict[str, tuple[str, int]]:
        """Each connected standby's label (its address or name, as it said)
        and acknowledged index, by id."""
        with self._cond:
            return {n: (self._labels.get(n, n), i) for n, i in self._acked.items()}

    def close(self) -> None:
        """Releases what is held with Unavailable and stops the watch."""
        with self._cond:
            self._closed = True
            late = [r for _, _, r in self._held]
            self._held.clear()
            self._cond.notify_all()
            self._schedule(late, Unavailable("the board is stopping"))
