"""A primary's replication, assembled: ``Replication``.

Built before the board opens (the board's store writes the log it
configures), attached once the board is open: the shipper hears each
logged commit, the sync gate holds each group's answers until
``--sync-standbys`` standbys have it, and the replication service is
ready for the server to install.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from msgboard.cluster.role import Role
from msgboard.cluster.service import ReplicationService
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.sync import SyncGate
from msgboard.engine import Board
from msgboard.lmdbstore import Log

log = logging.getLogger(__name__)

#: Makes the gate: ``SyncGate`` (static roles) or a cluster's ``InSync``,
#: called as ``SyncGate`` is (the log, the writer's call_soon, keywords).
GateFactory = Callable[..., SyncGate]


class Replication:
    """The replication of a primary board. ``token``: the cluster's;
    ``needed``: standbys that must have a write before it is answered;
    ``timeout``: seconds a write waits for them; ``allow_async``: answer
    anyway after that (else Unavailable); ``keep``/``limit``: the log's
    retention (``oplog.Log``); ``forget``: seconds the log is kept for a
    standby that went away (``SyncGate``); ``role``: the board's (a
    cluster's node changes it); ``gate``: what holds the answers (a
    cluster's counts only its in-sync set)."""

    def __init__(
        self,
        token: str,
        *,
        needed: int = 1,
        timeout: float = 5.0,
        allow_async: bool = False,
        keep: int = 10_000,
        limit: int = 1_000_000,
        forget: float = 3600.0,
        role: Role | None = None,
        gate: GateFactory = SyncGate,
    ) -> None:
        self.token = token
        self.log = Log(keep=keep, limit=limit)
        self.role = role or Role()
        self._make_gate = gate
        self.needed = needed
        self.timeout = timeout
        self.allow_async = allow_async
        self.forget = forget
        self.gate: SyncGate | None = None
        self.service: ReplicationService | None = None

    def attach(self, board: Board) -> ReplicationService:
        """Starts replicating ``board`` (opened with ``log``); returns the
        service to install."""
        shipper = Shipper(board)
        self.log.logged = shipper.logged
        self.gate = self._make_gate(
            self.log,
            board.call_soon,
            needed=self.needed,
            timeout=self.timeout,
            allow_async=self.allow_async,
            forget=self.forget,
        )
        board.hold_answers(self.gate.hold)
        if self.allow_async:
            log.warning(
                "replication: --allow-async: writes are answered without their standbys "
                "when none is in sync within %g s; a failover may then lose them",
                self.timeout,
            )
        self.service = ReplicationService(self.token, self.role, board, shipper, self.gate)
        return self.service

    def close(self) -> None:
        """Answers what still waits for the standbys with Unavailable."""
        if self.gate is not None:
            self.gate.close()

    def describe(self) -> str:
        mode = "async allowed" if self.allow_async else "strict"
        return f"primary: {self.needed} sync standby(s), {mode}"
