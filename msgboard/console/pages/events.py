"""Events: the live ``$sys`` stream (the board's own events: queues,
selectors and consumers coming and going, dead letters, refused calls).

The page shows the newest events at once and appends the rest as they come,
over Server-Sent Events (``/events/stream``, read by ``static/console.js``
with the browser's ``EventSource``, which reconnects by itself and says
where it was with ``Last-Event-ID``). Each stream reads ``$sys`` every
``POLL`` seconds from the last seq it sent (a Browse of a memory queue:
cheap), so an open Events page costs the board one small read a second.
Anyone signed in may read ``$sys`` (the permission table's rule). At most
``MAX_STREAMS`` streams are open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

from aiohttp import web

from msgboard.console.auth import require
from msgboard.console.context import CONSOLE, answer, board_of
from msgboard.console.templating import render
from msgboard.engine.events import SYS
from msgboard.message import Message
from msgboard.results import Start
from msgboard.security.permissions import READ

NAV = ("Events", "/events")
#: Events shown when the page opens.
FIRST = 50
#: Seconds between two reads of ``$sys`` by one stream.
POLL = 1.0
#: Seconds between two keep-alive comments on a quiet stream.
KEEPALIVE = 15.0
MAX_STREAMS = 32
routes = web.RouteTableDef()
#: Streams open in this process (one board a process).
_open = {"streams": 0}


def field(v: object) -> str:
    """A tuple field as text (the page shows it as text, never markup)."""
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, str):
        return v
    return json.dumps(v)


def event(m: Message) -> dict[str, Any]:
    """One ``$sys`` message as the page shows it."""
    name = m.tuple[0] if m.tuple and isinstance(m.tuple[0], str) else m.address
    return {
        "seq": m.seq,
        "at": m.posted_at // 1000,  # ms, for the page's Date
        "name": name,
        "fields": [field(v) for v in m.tuple[1:]],
    }


@routes.get("/events")
async def page(request: web.Request) -> web.Response:
    require(request, READ, SYS)
    board = board_of(request)
    newest = await answer(board.browse_async(SYS, Start.LATEST, reverse=True, limit=FIRST))
    shown = [event(m) for m in reversed(newest.messages)]
    last = shown[-1]["seq"] if shown else 0
    return render(request, "events.html", {"events": shown, "last": last})


@routes.get("/events/stream")
async def stream(request: web.Request) -> web.StreamResponse:
    require(request, READ, SYS)
    console = request.app[CONSOLE]
    board = board_of(request)
    try:
        last = int(request.headers.get("Last-Event-ID") or request.query.get("after", "0"))
    except ValueError:
        raise web.HTTPBadRequest(text="after: the last seq seen, an integer") from None
    if _open["streams"] >= MAX_STREAMS:
        raise web.HTTPServiceUnavailable(text=f"too many event streams open ({MAX_STREAMS})")
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    _open["streams"] += 1
    try:
        await response.prepare(request)
        quiet = 0.0
        while not console.closing.is_set() and console.board is board:
            page = await answer(board.browse_async(SYS, Start.SEQ, seq=last + 1, limit=100))
            for m in page.messages:
                last = m.seq
                data = json.dumps(event(m))
                await response.write(f"id: {m.seq}\nevent: sys\ndata: {data}\n\n".encode())
            quiet = 0.0 if page.messages else quiet + POLL
            if quiet >= KEEPALIVE:
                await response.write(b": still here\n\n")
                quiet = 0.0
            if page.next_seq:
                continue  # more already waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(console.closing.wait(), POLL)
    except ConnectionResetError:
        pass  # the page was closed
    finally:
        _open["streams"] -= 1
    return response
