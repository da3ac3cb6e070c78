"""The sweep of idempotency keys whose window has ended.

A message's key is held while the message is on its queue and for the
queue's ``dedup_window`` after it has left; the stores keep each ended key
under its end (``Txn.sweep_keys``) and compare ends on every lookup, so a
key past its window is never held, swept or not. The sweep only gives the
room back: one timer on the writer thread, armed for the next end the
stores report (at most ``IDLE`` seconds on, as a window may start any
time), drops at most ``SWEEP_BUDGET`` keys per store per operation, the
rest in the next.
"""

from __future__ import annotations

import time

from msgboard.engine.writer import Batch, Timer, Writer
from msgboard.message import now_us

#: Most keys one sweep drops per store.
SWEEP_BUDGET = 1_000
#: Longest time between sweeps, seconds.
IDLE = 10.0


class KeySweep:
    """The key sweep of one board (writer thread)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._timer: Timer | None = None

    def sweep(self, b: Batch) -> None:
        """Drops ended keys from both stores, then arms the next sweep."""
        nxt = 0
        for durable in (True, False):
            _, after = b.txn(durable).sweep_keys(b.now, SWEEP_BUDGET)
            if after and (not nxt or after < nxt):
                nxt = after
        wait = IDLE if not nxt else min(IDLE, max(0, nxt - now_us()) / 1e6)
        if self._timer is not None:
            self._timer.cancel()  # a no-op for the timer running this
        self._timer = self._writer.at(time.monotonic() + wait, self.sweep)
