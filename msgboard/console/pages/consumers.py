"""Consumers and leases: who is connected to which queue, with their
credit, outstanding and delivered counts; the messages taken with a lease
and not yet acked; kick a consumer, release a leased message.

``GET /consumers`` shows both tables (refreshed in place by htmx every few
seconds); ``POST /consumers/{id}/kick`` ends a consumer as if it had
disconnected (its outstanding messages go back to the queue, its stream
ends ``Kicked``: ``Board.kick_consumer``), posting a ``console.action``
on ``$sys`` that names the user; ``POST /leases/release`` gives a leased
message back now (``Board.release_messages``, whose ``messages.released``
event names the user).

Who may: the one permission table decides, as on gRPC. The console shows
the consumers and leases of the queues the identity may ``manage`` (an
admin manages every queue); releasing a lease is ReleaseMessages's verb,
``manage`` on its queue; kicking is KickConsumer's, ``admin`` on the whole
board, so only an admin sees the kick button. A forged request without
the verb is 403.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aiohttp import web

from msgboard.console.auth import identity, require
from msgboard.console.context import answer, board_of
from msgboard.console.forms import href, int_field, refused
from msgboard.console.messages import when
from msgboard.console.templating import render
from msgboard.engine.events import CONSOLE_ACTION
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.results import ConsumerView, LeaseView
from msgboard.security.permissions import ADMIN, MANAGE

NAV = ("Consumers", "/consumers")
routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    c: ConsumerView
    credit: str
    since: str


@dataclass(frozen=True, slots=True)
class LeaseRow:
    lease: LeaseView
    since: str
    until: str
    href: str


def consumer_row(c: ConsumerView) -> ConsumerRow:
    credit = "unlimited" if math.isinf(c.credit) else str(int(c.credit))
    return ConsumerRow(c, credit, when(c.since))


def lease_row(x: LeaseView) -> LeaseRow:
    return LeaseRow(x, when(x.since), when(x.until), f"/browse/{x.queue}/{x.seq}")


@routes.get("/consumers")
async def page(request: web.Request) -> web.Response:
    who = identity(request)
    board = board_of(request)
    consumers = await answer(board.list_consumers_async())
    leases = await answer(board.list_leases_async())
    return render(
        request,
        "consumers.html",
        {
            "consumers": [consumer_row(c) for c in consumers if who.may(MANAGE, c.queue)],
            "leases": [lease_row(x) for x in leases if who.may(MANAGE, x.queue)],
            "done": request.query.get("done", ""),
            "may_kick": who.may(ADMIN),
        },
    )


@routes.post("/consumers/{cid}/kick")
async def kick(request: web.Request) -> web.Response:
    cid = request.match_info["cid"]
    board = board_of(request)
    found = [c for c in await answer(board.list_consumers_async()) if c.id == cid]
    if not found:
        raise web.HTTPNotFound(text=f"no consumer {cid!r} (it may have gone already)")
    who = require(request, ADMIN)
    try:
        gone = await answer(board.kick_consumer_async(cid))
    except MsgboardError as e:
        raise refused(e) from None
    board.emit(CONSOLE_ACTION, who.name, f"kick consumer {cid}", gone.queue)
    said = f"Kicked {cid} of {gone.queue}: {gone.outstanding} outstanding went back."
    raise web.HTTPSeeOther(href("/consumers", done=said))


@routes.post("/leases/release")
async def release(request: web.Request) -> web.Response:
    data = await request.post()
    queue = data.get("queue", "")
    if not isinstance(queue, str) or not queue:
        raise web.HTTPBadRequest(text="queue: which queue the leased message is on")
    who = require(request, MANAGE, queue)
    board = board_of(request)
    try:
        fields = {k: v for k, v in data.items() if isinstance(v, str)}
        seq = int_field(fields, "seq")
        if seq <= 0:
            raise InvalidArgument(f"seq: a seq, more than 0 (got {seq})")
        await answer(board.release_messages_async(queue, [seq], by=who.name))
    except MsgboardError as e:
        raise refused(e) from None
    raise web.HTTPSeeOther(href("/consumers", done=f"Released {queue} #{seq}: waiting again."))
