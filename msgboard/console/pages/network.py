"""The routing network drawn: queues as nodes, selectors as edges labelled
with their operation, pattern and credit, consumers at the ends, and each
queue's dead-letter route dashed; every box and label a link (a queue to
its Browse page, a selector to a Browse of its source with its pattern
filled in, a consumer to its row on the Consumers page, a dead-letter
route to the Dead letters page).

The drawing is an SVG written by the template from ``graph.layout``'s
coordinates, on the server: no script draws it, nothing is fetched from
elsewhere, and every name in it is text autoescaped like the rest of the
page. It shows the queues the identity may see (``read`` or ``manage``)
and the selectors between them; a consumer's user and address only on
queues they manage (elsewhere just its id and figures: the gRPC table keeps
ListConsumers for admins). ``MAX_QUEUES`` bounds the drawing; past
it the page says how many were left out and links to the overview. The
layout and the SVG are made on a worker thread, not on the event loop the
board's gRPC calls share.
"""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from msgboard.console.auth import identity
from msgboard.console.context import answer, board_of
from msgboard.console.graph import layout
from msgboard.console.templating import render
from msgboard.security.permissions import MANAGE, SEE

NAV = ("Network", "/network")
#: Queues drawn at most (the first by name).
MAX_QUEUES = 300
routes = web.RouteTableDef()


@routes.get("/network")
async def page(request: web.Request) -> web.Response:
    who = identity(request)
    board = board_of(request)
    stats = await answer(board.stats_async())
    views = await answer(board.list_queues_async())
    selectors = await answer(board.list_selectors_async())
    consumers = await answer(board.list_consumers_async())
    seen = [q for q in stats.queues if any(who.may(v, q.name) for v in SEE)]
    drawn, left_out = seen[:MAX_QUEUES], max(0, len(seen) - MAX_QUEUES)
    shown_consumers = [
        c if who.may(MANAGE, c.queue) else dataclasses.replace(c, peer="", identity="")
        for c in consumers
    ]
    dead = {v.spec.name: v.spec.dead_letter for v in views if v.spec.dead_letter}

    def draw() -> web.Response:
        graph = layout(drawn, selectors, shown_consumers, dead)
        return render(request, "network.html", {"g": graph, "left_out": left_out})

    # Off the event loop, which serves the board's gRPC calls too: 300
    # queues with a consumer each take 10 to 20 ms to lay out and about
    # 35 ms to write (bench/network_page.py, docs/console.md).
    return await asyncio.to_thread(draw)
