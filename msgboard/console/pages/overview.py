"""Overview: every queue the identity may see, with its counts (waiting,
outstanding, history, scheduled, dead-lettered), its rates in and out and
its consumers, and the last hour of depth and rates as small charts.

The table is the sampler's latest reading (refreshed by htmx every
``every`` seconds: ``/overview/rows``; a page opened reads the board
afresh); the charts are drawn by
``static/console.js`` with uPlot from ``/overview/series.json``, fetched
whole once, then only the readings after the last one it has.

Each row can *peek* at its queue's newest message (``read``; shown as text
by ``messages.py`` and ``message.html``) and, for a user with ``manage`` on
the queue, delete the queue (the button is not shown to anyone else; a
forged request is 403). A deletion is posted on ``$sys`` as a
``console.action`` naming the user.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from msgboard.console.auth import identity, remember, require
from msgboard.console.context import CONSOLE, answer, board_of, primary_console
from msgboard.console.messages import body_view, default_view, shown
from msgboard.console.sampler import SAMPLER
from msgboard.console.templating import render
from msgboard.engine.events import CONSOLE_ACTION
from msgboard.errors import MsgboardError
from msgboard.message import Section
from msgboard.results import BoardStats, QueueStats, Start
from msgboard.security.permissions import MANAGE, READ, SEE

NAV = ("Overview", "/")
#: Rows shown at most (the first by name); the rest are counted.
MAX_ROWS = 1000
routes = web.RouteTableDef()


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    q: QueueStats
    rate_in: float
    rate_out: float


async def _stats(request: web.Request, fresh: bool) -> BoardStats:
    """The sampler's latest reading; ``fresh``: one read now (a page opened,
    a queue deleted: what the person just did shows at once), not filed."""
    sampler = request.app[SAMPLER]
    if fresh or sampler.latest is None:
        return await answer(board_of(request).stats_async())
    return sampler.latest


#: The columns the table sorts by: query value -> (label, the row's key).
SORTS: dict[str, tuple[str, Callable[[Row], Any]]] = {
    "name": ("queue", lambda r: r.q.name),
    "ready": ("waiting", lambda r: r.q.ready),
    "outstanding": ("outstanding", lambda r: r.q.outstanding),
    "history": ("history", lambda r: r.q.history),
    "scheduled": ("scheduled", lambda r: r.q.scheduled),
    "dead": ("dead-lettered", lambda r: r.q.dead_lettered),
    "in": ("in /s", lambda r: r.rate_in),
    "out": ("out /s", lambda r: r.rate_out),
    "consumers": ("consumers", lambda r: r.q.consumers),
}


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """How the table is filtered and sorted (the page's query, which its
    refreshes send again): ``q`` a part of the name or a glob (``orders.*``),
    ``sort`` a column of ``SORTS``, ``desc`` the largest first."""

    q: str = ""
    sort: str = "name"
    desc: bool = False

    @classmethod
    def of(cls, query: Mapping[str, str]) -> View:
        sort = query.get("sort", "name")
        return cls(
            query.get("q", "").strip(), sort if sort in SORTS else "name", query.get("desc") == "1"
        )

    def keeps(self, name: str) -> bool:
        if not self.q:
            return True
        if any(c in self.q for c in "*?["):
            return fnmatch.fnmatchcase(name, self.q)
        return self.q.lower() in name.lower()

    def query(self, **change: Any) -> str:
        """The query string of this view with ``change`` (for a link)."""
        v = dataclasses.replace(self, **change)
        return urlencode({"q": v.q, "sort": v.sort, "desc": "1" if v.desc else ""})


async def rows(
    request: web.Request, fresh: bool = False, view: View | None = None
) -> tuple[list[Row], bool]:
    """The first ``MAX_ROWS`` rows the identity may see in ``view``, and
    whether there are more. In name order with no filter the rest are not
    checked (a board of 100,000 queues costs a poll no more than one of
    1,000); filtered or sorted, every queue is (a filter and a sort of the
    sampler's latest reading: no read of the board)."""
    view = view or View()
    who = identity(request)
    stats = await _stats(request, fresh)
    sampler = request.app[SAMPLER]
    seen = (q for q in stats.queues if view.keeps(q.name) and any(who.may(v, q.name) for v in SEE))
    if view.sort == "name" and not view.desc:
        first = list(itertools.islice(seen, MAX_ROWS + 1))
        out = [Row(q, *sampler.rates(q.name)) for q in first[:MAX_ROWS]]
        return out, len(first) > MAX_ROWS
    every = [Row(q, *sampler.rates(q.name)) for q in seen]
    every.sort(key=SORTS[view.sort][1], reverse=view.desc)
    return every[:MAX_ROWS], len(every) > MAX_ROWS


@routes.get("/")
async def page(request: web.Request) -> web.Response:
    if request.app[CONSOLE].board is None:  # a standby of a cluster
        return render(request, "standby.html", {"primary": primary_console(request)})
    view = View.of(request.query)
    shown, more = await rows(request, fresh=True, view=view)
    ctx = {"rows": shown, "more": more, "view": view, "sorts": SORTS}
    return render(request, "overview.html", ctx)


@routes.get("/overview/rows")
async def table(request: web.Request) -> web.Response:
    shown, more = await rows(request, view=View.of(request.query))
    return render(request, "overview_rows.html", {"rows": shown, "more": more})


@routes.get("/overview/series.json")
async def series(request: web.Request) -> web.Response:
    """The charts' readings after ``since`` (seconds since the epoch)."""
    try:
        since = float(request.query.get("since", "0"))
    except ValueError:
        raise web.HTTPBadRequest(text="since: seconds since the epoch, e.g. 1764312000.5") from None
    if not math.isfinite(since):
        raise web.HTTPBadRequest(text="since: seconds since the epoch, e.g. 1764312000.5")
    who = identity(request)
    sampler = request.app[SAMPLER]
    names = [n for n in sampler.queues if any(who.may(v, n) for v in SEE)]
    return web.json_response(sampler.series(sorted(names), since))


@routes.get("/overview/peek")
async def peek(request: web.Request) -> web.Response:
    """The oldest waiting message of a queue (``read`` on it), shown as
    text: the one a Take would have next."""
    name = request.query.get("queue", "")
    require(request, READ, name)
    remember(request, name)
    board = board_of(request)
    try:
        page = await answer(
            board.browse_async(name, Start.OLDEST, limit=1, section=Section.UNPROCESSED)
        )
    except MsgboardError as e:
        raise web.HTTPNotFound(text=str(e)) from None
    if not page.messages:
        return render(request, "peek.html", {"queue": name, "m": None})
    m = page.messages[0]
    body = body_view(m.body, default_view(m.content_type, m.body))
    return render(request, "peek.html", {"queue": name, "m": shown(m), "body": body})


@routes.post("/queues/{name}/delete")
async def delete(request: web.Request) -> web.Response:
    """Deletes a queue (``manage`` on it), then answers the table's rows."""
    name = request.match_info["name"]
    who = require(request, MANAGE, name)
    board = board_of(request)
    try:
        await answer(board.delete_queue_async(name))
    except MsgboardError as e:
        raise web.HTTPBadRequest(text=str(e)) from None
    board.emit(CONSOLE_ACTION, who.name, "delete queue", name)
    if (await request.post()).get("then") == "overview":  # the queue's page's form
        raise web.HTTPSeeOther("/")
    shown_rows, more = await rows(request, fresh=True)
    return render(request, "overview_rows.html", {"rows": shown_rows, "more": more})
