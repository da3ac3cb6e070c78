"""What this board is in its cluster: ``Role``, the one object the server
asks before it serves a client.

Static for now: a board started with ``--standby-of HOST:PORT`` is a
standby of the primary there, any other is a primary. Leadership through
etcd (docs/plans/cluster/DESIGN.md) will change a board's role while it
runs: it sets ``primary`` (None: this board is the primary) and the server,
which asks ``refusal()`` on every client call, follows.
"""

from __future__ import annotations

from msgboard.errors import NotPrimary


class Role:
    """A board's role. ``primary``: the address of the primary this board
    follows, or None when it is the primary itself."""

    def __init__(self, primary: str | None = None) -> None:
        self.primary = primary

    @property
    def is_primary(self) -> bool:
        return self.primary is None

    def refusal(self) -> NotPrimary | None:
        """The error a client call gets here (None: serve it)."""
        return None if self.primary is None else NotPrimary(self.primary)

    def describe(self) -> str:
        return "primary" if self.primary is None else f"standby of {self.primary}"
