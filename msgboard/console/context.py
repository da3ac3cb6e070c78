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
    #: A board of a cluster's: the console of the primary it follows, as
    #: the primary published it ("" when it did not: ``primary_console``).
    primary_console: Callable[[], str] | None = None
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


@dataclasses.dataclass(frozen=True, slots=True)
class PrimaryLink:
    """Where a standby's console sends a person: the primary's address (its
    clients'), and its console's URL; ``published``: the primary said it
    (its leader key), else it is guessed (``primary_console``)."""

    address: str
    url: str
    published: bool


def primary_console(request: web.Request) -> PrimaryLink | None:
    """The primary's console, for a standby's pages; None on a primary, a
    board that does not replicate, or a standby that knows of no primary.
    The URL is the one the primary published; when it published none (it
    serves no console, or it is a board from before the console published
    it), it is guessed: the primary's host (of its clients' address) with
    this console's own scheme and port, as when every board of the cluster
    is served alike (``--metrics-listen`` on the same port)."""
    console = request.app[CONSOLE]
    role = console.role
    if role is None or role.is_primary or not role.primary:
        return None
    url = console.primary_console() if console.primary_console is not None else ""
    if url:
        return PrimaryLink(role.primary, url, True)
    host = role.primary.rpartition(":")[0]
    port = request.url.port
    return PrimaryLink(role.primary, f"{request.scheme}://{host}:{port}/", False)


def board_of(request: web.Request) -> Board:
    """The board the console serves; 503 while there is none (a standby)."""
    board = request.app[CONSOLE].board
    if board is None:
        link = primary_console(request)
        where = f": {link.url}" if link is not None else ""
        raise web.HTTPServiceUnavailable(
            text=f"this board is a standby: it has no board open; open the primary's console{where}"
        )
    return board


async def answer(fut: Future[T]) -> T:
    """An engine call's answer, awaited without holding the event loop."""
    return await asyncio.wrap_future(fut)
