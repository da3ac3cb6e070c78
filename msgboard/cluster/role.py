"""What this board is in its cluster: ``Role``, the one object the server
asks before it serves a client.

A board started with ``--standby-of HOST:PORT`` is a standby of the primary
there for its whole life, any other board with ``--replication-token`` a
primary (static roles). A board of a cluster (``serve --cluster``) changes
role while it runs: its node (``msgboard.server.node``) calls ``become``
when it is elected, fenced or learns of a new primary, and the server,
which asks ``refusal()`` on every client call, follows. ``term`` (a
cluster's ``Leadership.term``) makes a primary refuse every call with
NoLease from the moment it is not sure of its lease, reads included.

``listen(callback)`` is told every change (primary <-> standby, a new
epoch), after it is made, with the role itself: metrics and ``$sys``
events hang there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from msgboard.errors import MsgboardError, NoLease, NotPrimary

log = logging.getLogger(__name__)

#: What ``listen`` calls: ``callback(role)`` after each change.
RoleListener = Callable[["Role"], None]


class Role:
    """A board's role. ``primary``: the address of the primary this board
    follows (None when it is the primary itself, or while a standby knows of
    none: see ``leading``); ``epoch``: the term this board leads in or
    follows (0: no cluster, or not known yet)."""

    def __init__(
        self,
        primary: str | None = None,
        *,
        epoch: int = 0,
        leading: bool | None = None,
        term: Callable[[], Any] | None = None,
    ) -> None:
        self.primary = primary
        self.epoch = epoch
        #: Whether this board is the primary (static roles: no address).
        self.leading = primary is None if leading is None else leading
        self._term = term
        #: A primary handing over (switchover): the address of its successor,
        #: where new calls are sent while what it took in is replicated.
        self.handover: str | None = None
        #: Count the unary calls let in (a cluster's: a switchover waits for
        #: them), in ``calls``, and the streams open, in ``streams`` (they
        #: end once a switchover starts: ``msgboard.server.roles``).
        self.counting = False
        self.calls = 0
        self.streams = 0
        self._lock = threading.Lock()
        self._listeners: list[RoleListener] = []

    @property
    def is_primary(self) -> bool:
        return self.leading and self.primary is None

    def listen(self, callback: RoleListener) -> None:
        """Calls ``callback(role)`` after every change of role or epoch (on
        the thread that made it; it must not block)."""
        with self._lock:
            self._listeners.append(callback)

    def become(self, *, leading: bool, primary: str | None, epoch: int) -> None:
        """This board now leads (``leading``) or follows ``primary`` (None:
        no primary known), in ``epoch``; tells the listeners if it changed."""
        with self._lock:
            same = (leading, primary, epoch) == (self.leading, self.primary, self.epoch)
            self.leading, self.primary, self.epoch = leading, primary, epoch
            self.handover = None
            listeners = list(self._listeners) if not same else []
        for callback in listeners:
            try:
                callback(self)
            except Exception:
                log.exception("a role listener failed")

    def refusal(self) -> MsgboardError | None:
        """The error a client call gets here (None: serve it)."""
        if self.primary is not None:
            return NotPrimary(self.primary)
        if not self.leading:
            # NotPrimary naming no one: a client moves to another board.
            return NotPrimary()
        if self.handover is not None:
            return NotPrimary(self.handover)
        if self._term is not None and self._term() is None:
            return NoLease(self.epoch)
        return None

    def describe(self) -> str:
        if self.leading:
            return f"primary, epoch {self.epoch}" if self.epoch else "primary"
        return f"standby of {self.primary or 'no primary yet'}"
