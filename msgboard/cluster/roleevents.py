"""A board's changes of role, announced on ``$sys``: ``RoleEvents``.

It listens to the board's ``Role`` (``Role.listen``) and announces, through
``Board.emit``: ``cluster.promoted`` (epoch) when the board comes to lead
in an epoch, and ``cluster.demoted`` (the epoch it led in, the primary it
now follows or "") when it stops leading. A board opened because it was
promoted (a standby's directory opened as the new primary's board) is
announced promoted as it starts, if it leads in a cluster's epoch then;
a primary of static roles (epoch 0) announces nothing. ``$sys`` is the
board's own, in memory: a client reads these events on the board that
made them, while it serves (a demoted board refuses clients, so its
``cluster.demoted`` is for its own subscribers, which it ends, and its
log).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from msgboard.cluster.role import Role
from msgboard.engine.events import CLUSTER_DEMOTED, CLUSTER_PROMOTED

log = logging.getLogger("msgboard.cluster")

#: ``Board.emit``: announces an event on ``$sys`` (any thread).
Emit = Callable[..., None]


class RoleEvents:
    """Announces ``role``'s changes through ``emit`` from now on."""

    def __init__(self, role: Role, emit: Emit) -> None:
        self._emit = emit
        self._stopped = False
        self._lock = threading.Lock()
        self._leading = role.is_primary
        self._epoch = role.epoch
        if self._leading and self._epoch:
            self._say(CLUSTER_PROMOTED, self._epoch)
        role.listen(self.changed)

    def stop(self) -> None:
        """Announces nothing more (the board closes; the role lives on)."""
        with self._lock:
            self._stopped = True

    def changed(self, role: Role) -> None:
        """``Role.listen``'s callback: announces what changed."""
        with self._lock:
            if self._stopped:
                return
            was, led = self._leading, self._epoch
            self._leading, self._epoch = role.is_primary, role.epoch
        if role.is_primary and (not was or role.epoch != led):
            self._say(CLUSTER_PROMOTED, role.epoch)
        elif was and not role.is_primary:
            self._say(CLUSTER_DEMOTED, led, role.primary or "")

    def _say(self, event: str, *fields: str | int) -> None:
        log.info("%s %s", event, " ".join(str(f) for f in fields))
        self._emit(event, *fields)
