"""PrimaryWatch: who leads the cluster now, for standbys and for the
NotPrimary answers that send clients to the primary.

A thread reads the leader key and then watches it from the next revision;
a watch that sees nothing for ``every`` seconds, or that breaks (its member
died), is followed by a fresh read, so a lost event or a dead member costs
at most one ``every`` of staleness, never a watcher stuck on a closed
stream. What it knows is a hint for routing clients and standbys, never a
licence to write: only ``Leadership.term()`` is that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from msgboard.cluster.etcd import TRANSIENT, Etcd
from msgboard.cluster.keys import Keys, Primary

log = logging.getLogger("msgboard.cluster")


class PrimaryWatch:
    """The primary of ``cluster`` as last seen in etcd (None: no primary)."""

    def __init__(self, etcd: str | Sequence[str], cluster: str, *, every: float = 1.0) -> None:
        self.urls = etcd
        self.keys = Keys(cluster)
        self.every = every
        self._primary: Primary | None = None
        #: False until the first read, and after a read failed.
        self._known = False
        #: When (``time.monotonic()``) the last read that answered was sent
        #: (0: none yet): what it says held at some moment after this.
        self.seen_at = 0.0
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="primary-watch", daemon=True)

    def current(self) -> Primary | None:
        return self._primary

    def known(self) -> bool:
        """Whether the last read of etcd succeeded (else current() is stale)."""
        return self._known

    def wait(self, until: Callable[[Primary | None], bool], timeout: float) -> Primary | None:
        """Waits up to ``timeout`` for a primary that ``until`` accepts (it is
        asked None when there is none); the primary then, TimeoutError if none
        was accepted."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (self._known and until(self._primary)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no accepted primary within {timeout} s: {self._primary}")
                self._changed.wait(min(left, self.every))
            return self._primary

    def start(self) -> PrimaryWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every + 5)

    def _run(self) -> None:
        etcd = Etcd(self.urls, timeout=min(1.0, self.every))
        try:
            while not self._stopping.is_set():
                try:
                    asked = time.monotonic()
                    entry, revision = etcd.get(self.keys.leader)
                    self._see(Primary.of(entry) if entry else None, asked)
                    etcd.watch(self.keys.leader, revision + 1, self.every)
                except Exception as e:
                    if isinstance(e, TRANSIENT):
                        log.info("primary watch: etcd: %s", e)
                    else:
                        log.exception("primary watch: unexpected error")
                    with self._changed:
                        self._known = False
                    self._stopping.wait(self.every / 2)
        finally:
            etcd.close()

    def _see(self, primary: Primary | None, asked: float) -> None:
        with self._changed:
            if primary != self._primary:
                log.info("primary watch: the primary is now %s", primary)
            self._primary = primary
            self._known = True
            self.seen_at = asked
            self._changed.notify_all()
