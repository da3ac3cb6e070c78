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
import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from msgboard.console.auth import require
from msgboard.console.context import CONSOLE, answer, board_of
from msgboard.console.templating import render
from msgboard.engine import events as ev
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


#: Each event's fields after its name (``msgboard.engine.events``' table),
#: so that the page names them.
FIELDS: dict[str, tuple[str, ...]] = {
    ev.QUEUE_CREATED: ("queue", "kind"),
    ev.QUEUE_DELETED: ("queue",),
    ev.SELECTOR_CREATED: ("selector", "source", "destination"),
    ev.SELECTOR_DELETED: ("selector", "source"),
    ev.CONSUMER_ATTACHED: ("consumer", "queue", "selector", "peer", "user"),
    ev.CONSUMER_DETACHED: ("consumer", "queue", "selector", "reason"),
    ev.DEAD_LETTERED: ("queue", "seq", "reason"),
    ev.QUEUE_PURGED: ("queue", "purged", "history purged", "user"),
    ev.MESSAGES_MOVED: ("source", "destination", "messages", "user"),
    ev.MESSAGES_DELETED: ("queue", "messages", "user"),
    ev.MESSAGES_RELEASED: ("queue", "messages", "user"),
    ev.BOARD_STARTED: (),
    ev.BOARD_STOPPING: (),
    ev.USER_DENIED: ("user", "refused"),
    ev.CLUSTER_PROMOTED: ("epoch",),
    ev.CLUSTER_DEMOTED: ("epoch", "primary"),
    ev.STANDBY_JOINED: ("standby", "acked"),
    ev.STANDBY_LOST: ("standby", "acked", "reason"),
    ev.LINK_CREATED: ("link", "remote"),
    ev.LINK_DELETED: ("link",),
    ev.LINK_CONNECTED: ("link", "remote"),
    ev.LINK_DISCONNECTED: ("link", "reason"),
    ev.LINK_BEHIND: ("link", "waiting", "seconds behind"),
    ev.CONSOLE_ACTION: ("user", "action", "queue"),
}
#: The fields that name a queue (what the queue filter looks at).
QUEUE_FIELDS = frozenset({"queue", "source", "destination"})
#: Events read at most to find the first page of a filtered view.
SCAN = 2000


def event(m: Message) -> dict[str, Any]:
    """One ``$sys`` message as the page shows it: its fields named (a
    field the table does not know is ``fieldN``) and the queues it is
    about."""
    name = m.tuple[0] if m.tuple and isinstance(m.tuple[0], str) else m.address
    names = FIELDS.get(name, ())
    values = m.tuple[1:]
    named = [
        (names[i] if i < len(names) else f"field{i + 1}", field(v)) for i, v in enumerate(values)
    ]
    return {
        "seq": m.seq,
        "at": m.posted_at // 1000,  # ms, for the page's Date
        "name": name,
        "fields": [f"{k}={v}" for k, v in named],
        "named": named,
        "queues": sorted({v for k, v in named if k in QUEUE_FIELDS and v}),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Filter:
    """The page's filter: ``kind``, an event name or its first word
    (``queue`` for every ``queue.*``); ``queue``, a queue an event names."""

    kind: str = ""
    queue: str = ""

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Filter:
        return cls(query.get("kind", "").strip(), query.get("queue", "").strip())

    def keeps(self, e: dict[str, Any]) -> bool:
        name = str(e["name"])
        if self.kind and name != self.kind and not name.startswith(self.kind + "."):
            return False
        return not self.queue or self.queue in e["queues"]


@routes.get("/events")
async def page(request: web.Request) -> web.Response:
    """The newest events first (``FIRST`` of them; filtered: those among
    the newest ``SCAN``), then each new one at the top as it comes."""
    require(request, READ, SYS)
    board = board_of(request)
    f = Filter.of(request.query)
    limit = SCAN if f.kind or f.queue else FIRST
    newest = await answer(board.browse_async(SYS, Start.LATEST, reverse=True, limit=limit))
    last = newest.messages[0].seq if newest.messages else 0
    shown = [e for e in map(event, newest.messages) if f.keeps(e)][:FIRST]
    kinds = sorted({k.split(".", 1)[0] for k in FIELDS} | set(FIELDS))
    ctx = {"events": shown, "last": last, "filter": f, "kinds": kinds}
    return render(request, "events.html", ctx)


@routes.get("/events/stream")
async def stream(request: web.Request) -> web.StreamResponse:
    require(request, READ, SYS)
    console = request.app[CONSOLE]
    board = board_of(request)
    try:
        last = int(request.headers.get("Last-Event-ID") or request.query.get("after", "0"))
    except ValueError:
        raise web.HTTPBadRequest(text="after: the last seq seen, an integer") from None
    f = Filter.of(request.query)
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
                e = event(m)
                if not f.keeps(e):
                    continue
                data = json.dumps(e)
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
