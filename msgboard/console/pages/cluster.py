"""Cluster and Links: which board is primary, each standby's lag, and each
link's state and lag.

A board that does not replicate says so. A replicating board shows its role
and epoch; a standby links to its primary's console (``primary_console``);
a primary lists its standbys with the entries and seconds each
is behind (``msgboard.cluster.status.Standbys``'s report, the same figures
as ``msgboard_replication_lag_*``); standbys and links are shown to users
with ``admin`` (the cluster's Status needs the cluster's token). The page
refreshes itself with htmx.

Links (issue 27) are listed from ``Console.links`` when the board has them:
the hook is that callable (``context.LinkRow`` rows); until a board's links
fill it, the section says "no links".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from msgboard.console.auth import identity
from msgboard.console.context import CONSOLE, Console, LinkRow, primary_console
from msgboard.console.templating import render
from msgboard.security.permissions import ADMIN, BOARD

NAV = ("Cluster", "/cluster")
routes = web.RouteTableDef()


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    replicating: bool
    primary: bool
    #: The primary this board follows ("" on the primary, or unknown).
    follows: str
    epoch: int
    #: (name, acked, lag entries, lag seconds) of each standby (a primary's).
    standbys: list[tuple[str, int, int, float]]
    last: int
    links: list[LinkRow] | None


def view(console: Console) -> View:
    role = console.role
    standbys: list[tuple[str, int, int, float]] = []
    last = 0
    if role is not None and role.is_primary and console.standbys is not None:
        report: Any = console.standbys.report()
        last = report.last
        standbys = [(s.board, s.acked, s.lag_entries, s.lag_seconds) for s in report.standbys]
    links = list(console.links()) if console.links is not None else None
    return View(
        replicating=role is not None,
        primary=role is None or role.is_primary,
        follows=(role.primary or "") if role is not None else "",
        epoch=role.epoch if role is not None else 0,
        standbys=standbys,
        last=last,
        links=links,
    )


def _context(request: web.Request) -> dict[str, Any]:
    # The role is anyone's to see; standbys and links (addresses, lag) are
    # the board's, as the cluster's Status is: admin only.
    return {
        "v": view(request.app[CONSOLE]),
        "whole": identity(request).may(ADMIN, BOARD),
        "primary": primary_console(request),
    }


@routes.get("/cluster")
async def page(request: web.Request) -> web.Response:
    return render(request, "cluster.html", _context(request))


@routes.get("/cluster/body")
async def body(request: web.Request) -> web.Response:
    return render(request, "cluster_body.html", _context(request))
