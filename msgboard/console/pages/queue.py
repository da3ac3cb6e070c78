"""A queue's own page (``/queues/NAME``, where the overview's names link):
its figures and rates, its consumers with their lag (deliveries outstanding,
not yet acked, and the age of the oldest of them: ``ConsumerView.oldest``,
when the board handed it out), the selectors out of it and into it, its last messages, and
what one may do with it (browse, compose, its dead letters, delete).

Reading it costs the board one Stats of the queue (O(1): ``stats_async``
with a name), its selectors (every selector: ``list_selectors_async``, the
same listing the Network page reads), its consumers and one Browse of ten
messages; the rates are the sampler's, so no more than the overview's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from msgboard.console.auth import identity, reading
from msgboard.console.context import answer, board_of
from msgboard.console.forms import refused
from msgboard.console.graph import pattern_text
from msgboard.console.messages import age
from msgboard.console.pages.browse import row
from msgboard.console.sampler import SAMPLER
from msgboard.console.templating import render
from msgboard.errors import MsgboardError
from msgboard.message import now_us
from msgboard.results import ConsumerView, SelectorView, Start
from msgboard.security.permissions import SEE

NAV = None
#: The last messages shown.
LAST = 10
routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class Route:
    """A selector as a line of the page: its id, the queue at its other
    end ("" for a consumer's), its operation and pattern."""

    id: str
    other: str
    op: str
    pattern: str
    attached: bool
    outstanding: int
    delivered: int


@dataclass(frozen=True, slots=True)
class Lag:
    """A consumer as a line of the page, with its lag: ``outstanding``
    (``ConsumerView.outstanding``) and ``age``, how long its oldest unacked
    delivery has been out ("" with none out), in seconds in ``seconds``."""

    c: ConsumerView
    age: str
    seconds: float


def _lag(c: ConsumerView, now: int) -> Lag:
    if not c.oldest:
        return Lag(c, "", 0.0)
    seconds = max(0, now - c.oldest) / 1e6
    return Lag(c, age(seconds), seconds)


def _route(v: SelectorView, other: str) -> Route:
    op = v.spec.op.value + (f" ({v.spec.role.value})" if v.spec.role.value != "normal" else "")
    link = v.spec.destination_link or v.spec.source_link
    return Route(
        v.id,
        f"{link}:{other}" if link and other else other,
        op,
        pattern_text(v.spec.pattern),
        v.attached,
        v.outstanding,
        v.delivered,
    )


@routes.get("/queues/{name}")
async def page(request: web.Request) -> web.Response:
    name = reading(request, "name")
    who = identity(request)
    board = board_of(request)
    try:
        stats = await answer(board.stats_async(name))
        selectors = await answer(board.list_selectors_async())
        consumers = await answer(board.list_consumers_async(name))
        last = await answer(board.browse_async(name, Start.LATEST, reverse=True, limit=LAST))
    except MsgboardError as e:
        raise refused(e) from None
    [q] = stats.queues

    def seen(queue: str) -> bool:
        return any(who.may(verb, queue) for verb in SEE)

    rate_in, rate_out = request.app[SAMPLER].rates(name)
    out = [_route(v, v.spec.destination) for v in selectors if v.spec.source == name]
    into = [
        _route(v, v.spec.source)
        for v in selectors
        if v.spec.destination == name and not v.spec.destination_link
    ]
    ctx: dict[str, Any] = {
        "queue": name,
        "q": q,
        "rate_in": rate_in,
        "rate_out": rate_out,
        "consumers": [_lag(c, now_us()) for c in consumers],
        "out": out,
        # A queue feeding this one that the identity may not see is counted,
        # not named.
        "into": [r for r in into if seen(r.other)],
        "hidden_into": sum(1 for r in into if not seen(r.other)),
        "last": [row(name, m) for m in last.messages],
    }
    return render(request, "queue.html", ctx)
