"""What every page of the console reads.

``Console`` is the one object the server hands the console: the board (None
while a board of a cluster is a standby with no board open), the users
(read again at each request, so that a SIGHUP reload is seen), the sampler,
and, on a replicating board, its role and standbys. Pages reach it as
``request.app[CONSOLE]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from aiohttp import web

from msgboard.engine import Board
from msgboard.security.auth import Users

T = TypeVar("T")


class Role(Protocol):
    """A replicating board's role (``msgboard.cluster.Role``, read only)."""

    primary: str | None
    epoch: int

    @property
    def is_primary(self) -> bool: ...


class Standbys(Protocol):
    """A primary's view of its standbys (``msgboard.cluster.status.Standbys``):
    ``report()`` has ``last``, ``epoch`` and ``standbys``, each with
    ``board``, ``acked``, ``lag_entries`` and ``lag_seconds``."""

    def report(self) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class LinkRow:
    """One link to another board, as the Cluster and Links page shows it.
    Issue 27 (links) fills ``Console.links``; until then the page says
    "no links"."""

    name: str
    remote: str
    state: str
    lag_entries: int = 0
    lag_seconds: float = 0.0


@dataclasses.dataclass
class Console:
    """What the console serves from; the server builds it and keeps
    ``board``, ``role`` and ``standbys`` current (a cluster's board opens
    and closes its board as it is promoted and demoted)."""

    board: Board | None
    #: The users file as loaded now; None: the open board (no sign-in).
    users: Callable[[], Users | None] = lambda: None
    #: Served over TLS (session cookies are then ``Secure``).
    tls: bool = False
    role: Role | None = None
    standbys: Standbys | None = None
    #: The board's links (issue 27): a callable listing them, None while
    #: the board has none to list.
    links: Callable[[], Sequence[LinkRow]] | None = None
    #: Seconds between the sampler's readings (and the pages' refreshes).
    every: float = 5.0
    #: Set as the listener closes: open event streams end.
    closing: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def use(self, board: Board | None, standbys: Standbys | None = None) -> None:
        """A board of a cluster opened ``board`` (promoted) or closed its own."""
        self.board = board
        self.standbys = standbys


CONSOLE = web.AppKey("console", Console)

#: The navigation bar: (label, path) of each page that has one.
NAV = web.AppKey("nav", list[tuple[str, str]])


def board_of(request: web.Request) -> Board:
    """The board the console serves; 503 while there is none (a standby)."""
    board = request.app[CONSOLE].board
    if board is None:
        raise web.HTTPServiceUnavailable(
            text="this board is a standby: it has no board open; open the primary's console"
        )
    return board


async def answer(fut: Future[T]) -> T:
    """An engine call's answer, awaited without holding the event loop."""
    return await asyncio.wrap_future(fut)
