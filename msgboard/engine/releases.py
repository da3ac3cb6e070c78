"""The release of scheduled messages: a message posted with a
``not_before`` still to come is stored at once in its queue's SCHEDULED
section (``Txn.schedule``), unseen; at its time it is moved to the waiting
messages, keeping its seq, and routed as if it had just arrived.

One timer on the writer thread is armed for the earliest time the stores
report (``Txn.next_due``, one cursor read, also after a restart: the
stores keep an index of the times on disk). A release reads only what is
due, at most ``BUDGET`` messages per operation per store, and arms itself
again at once for the rest: a mass of messages due in the same second is
released in bounded steps, a group commit each, between other work. A
message kept scheduled (its queue full, refusing, with nowhere to overflow)
is tried again every ``RETRY``, whenever anything else is due. A
release whose group fails (a damaged due page, a full disk) is tried again
after 1 s, then 2, 4 ... at most ``MOST_RETRY``, logged once until one
succeeds: never in a loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from msgboard.engine.writer import Batch, Timer, Writer
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import now_us

#: Most messages one release moves per store.
BUDGET = 1_000

#: Releases and routes a due message (``Network.release``): False if it
#: stays scheduled (its queue full, refusing, with nowhere to overflow).
Route = Callable[[Batch, Txn, QueueInfo, int, int], bool]
#: How long a message kept scheduled waits before it is tried again (µs).
RETRY = 1_000_000
#: The longest wait before a failed release is tried again (µs).
MOST_RETRY = 60_000_000

log = logging.getLogger(__name__)


class Releases:
    """The release timer of one board (writer thread)."""

    def __init__(self, writer: Writer, route: Route, settle: Callable[[Batch], None]) -> None:
        self._writer = writer
        self._route = route
        self._settle = settle
        #: The time (µs) the timer is armed for (0: none), and the timer.
        self._armed = 0
        self._timer: Timer | None = None
        #: Release groups failed in a row.
        self._failures = 0

    def start(self, b: Batch) -> None:
        """Arms the timer for the first scheduled message (a restart)."""
        for durable in (True, False):
            at = b.txn(durable).next_due()
            if at:
                self.add(at)

    def add(self, at: int) -> None:
        """A message is scheduled for ``at`` (µs)."""
        if not self._armed or at < self._armed:
            self._arm(at)

    def _arm(self, at: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = at
        deadline = time.monotonic() + max(0, at - now_us()) / 1e6
        self._timer = self._writer.at(deadline, self.run)

    def run(self, b: Batch) -> None:
        """Releases what is due, ``BUDGET`` per store, and arms for the rest."""
        if self._timer is not None:
            self._timer.cancel()  # a no-op for the timer running this
        self._timer, self._armed = None, 0
        b.undo(self._failed)
        b.after(self._succeeded)
        nxt = kept = 0
        retry = b.now + RETRY
        for durable in (True, False):
            txn = b.txn(durable)
            due, after = txn.due(b.now, BUDGET)
            held = 0
            for name, seq, at in due:
                info = txn.queue(name)
                if info is None:
                    txn.release(name, seq, at)
                elif not self._route(b, txn, info, seq, at):
                    held += 1
            if after and after <= b.now and held == len(due):
                # The budget ran out on messages all kept: reading them again
                # now would find the same ones, in a loop.
                after = retry
            if after and (not nxt or after < nxt):
                nxt = after
            kept += held
        self._settle(b)
        if kept and (not nxt or retry < nxt):
            # Still due: tried again in a second (not in a loop), however
            # long it is until anything else is due.
            nxt = retry
        if nxt:
            self._arm(nxt)

    def _failed(self) -> None:
        """A release's group failed: it is tried again after a backoff."""
        self._failures += 1
        wait = min(MOST_RETRY, RETRY << min(self._failures - 1, 16))
        if self._failures == 1:
            log.warning(
                "releasing scheduled messages failed; trying again in %g s, then less often",
                wait / 1e6,
            )
        self._arm(now_us() + wait)

    def _succeeded(self) -> None:
        if self._failures:
            log.warning("scheduled messages are released again")
        self._failures = 0
