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
    (``Board.call_soon``)."""

    def __init__(
        self,
        oplog: Log,
        call_soon: Callable[[Callable[[], object]], None],
        *,
        needed: int = 1,
        timeout: float = 5.0,
        allow_async: bool = False,
    ) -> None:
        self._log = oplog
        self._call_soon = call_soon
        self.needed = needed
        self.timeout = timeout
        self.allow_async = allow_async
        self._cond = threading.Condition()
        #: Held releases, oldest first: (index, deadline, release).
        self._held: deque[tuple[int, float, Release]] = deque()
        #: Connected standbys' acknowledged index, by name.
        self._acked: dict[str, int] = {}
        #: Every standby's last acknowledged index, connected or not (the
        #: log keeps what the slowest still needs).
        self._known: dict[str, int] = {}
        self._closed = False
        self._async_said = False
        self._thread = threading.Thread(target=self._watch, name="msgboard-sync", daemon=True)
        self._thread.start()

    # -- the writer's side --------------------------------------------------

    def hold(self, release: Release) -> None:
        """The writer's ``gate``: ``release`` goes once the group is on
        enough standbys. Writer thread."""
        index = self._log.last
        with self._cond:
            if self._closed:
                ready: MsgboardError | bool | None = Unavailable("the board is stopping")
            elif not self._held and (self._enough(index) or self._async_now()):
                ready = None
            else:
                self._held.append((index, time.monotonic() + self.timeout, release))
                self._cond.notify()
                ready = False
        if ready is not False:
            release(ready if isinstance(ready, MsgboardError) else None)

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

    def connected(self, name: str, index: int) -> None:
        """A standby connected, holding every entry up to ``index``."""
        self.ack(name, index)

    def ack(self, name: str, index: int) -> None:
        """A standby applied and fsynced every entry up to ``index``."""
        with self._cond:
            self._acked[name] = index
            self._known[name] = index
            self._log.pin = min(self._known.values())
            ready = self._ready()
        self._release(ready, None)

    def gone(self, name: str) -> None:
        """A standby's stream ended."""
        with self._cond:
            self._acked.pop(name, None)
            ready = self._ready() if self.allow_async else []
        self._release(ready, None)

    def _ready(self) -> list[Release]:
        out = []
        while self._held and (self._enough(self._held[0][0]) or self._async_now()):
            out.append(self._held.popleft()[2])
        return out

    def _release(self, ready: list[Release], err: MsgboardError | None) -> None:
        if ready:
            self._call_soon(lambda: [r(err) for r in ready])

    # -- what waited too long -----------------------------------------------

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._held:
                    self._cond.wait()
                if self._closed:
                    return
                index, deadline, _ = self._held[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                now = time.monotonic()
                late = []
                while self._held and self._held[0][1] <= now:
                    late.append(self._held.popleft()[2])
                why = self._why(index)
            if self.allow_async:
                log.warning("replication: %s; answered anyway (--allow-async)", why)
                self._release(late, None)
            else:
                self._release(late, Unavailable(why))

    def _why(self, index: int) -> str:
        stood = ", ".join(f"{n} at {i}" for n, i in sorted(self._acked.items())) or "none connected"
        return (
            f"no standby in sync: the write (log index {index}) needs {self.needed} "
            f"standby(s) to acknowledge it within {self.timeout:g} s ({stood}); "
            "it is committed on the primary but may not be replicated"
        )

    def status(self) -> dict[str, int]:
        """Each connected standby's acknowledged index."""
        with self._cond:
            return dict(self._acked)

    def close(self) -> None:
        """Releases what is held with Unavailable and stops the watch."""
        with self._cond:
            self._closed = True
            late = [r for _, _, r in self._held]
            self._held.clear()
            self._cond.notify_all()
        self._release(late, Unavailable("the board is stopping"))
