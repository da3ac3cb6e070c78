"""Browse: page through a queue's waiting messages and its history, filtered
by template, address pattern or filter expression, written as the CLI
takes them (``msgboard browse --tuple/--address/--filter``: one template a
line, each an alternative); open a message to see its envelope, typed
tuple, headers and body as text, JSON pretty-printed or hex.

``GET /browse`` chooses a queue; ``GET /browse/{queue}`` is a page of it
(``section``: both, ``unprocessed`` or ``history``; ``from``: a seq to
start at; ``order=newest`` pages backward from the newest); ``GET
/browse/{queue}/{seq}`` is one message (``view``: ``text``, ``json`` or
``hex``; by default the one that suits its content type and bytes). Every
page needs ``read`` on the queue (403 otherwise); a bad pattern is shown
beside the form (400), naming the part and position that is wrong.

``POST /browse/{queue}/purge`` purges the queue's waiting messages (and,
asked, its history): ``manage`` on the queue, whose holders alone see the
button (``Board.purge_queue``, posted on ``$sys`` naming the user).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from msgboard.associative import fields_to_json
from msgboard.console.auth import identity, last_queue, reading, require
from msgboard.console.context import answer, board_of
from msgboard.console.forms import (
    PatternForm,
    browse_href,
    choices,
    href,
    http_status,
    int_field,
    refused,
)
from msgboard.console.messages import (
    BODY_VIEWS,
    body_view,
    default_view,
    shown,
    when,
)
from msgboard.console.templating import render
from msgboard.engine import Board
from msgboard.engine.events import SYS
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.message import Message, Section
from msgboard.results import Start
from msgboard.security.permissions import MANAGE, READ, SEE

NAV = ("Browse", "/browse")
#: Messages a page shows by default, and at most.
PAGE = 50
MAX_PAGE = 500
#: The sections a page may be limited to (none: all of them).
SECTIONS = tuple(s.value for s in Section)
#: Characters of a body shown in a row.
PREVIEW = 80
routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class Row:
    """One message of a page, in a line."""

    seq: int
    section: str
    posted_at: str
    address: str
    tuple_json: str
    preview: str
    deliveries: int
    href: str


def row(queue: str, m: Message) -> Row:
    text = m.body[: PREVIEW * 4].decode("utf-8", errors="replace")
    preview = text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"
    return Row(
        m.seq,
        m.section.value,
        when(m.posted_at),
        m.address,
        json.dumps(fields_to_json(m.tuple), ensure_ascii=False),
        preview,
        m.delivery_count,
        f"/browse/{queue}/{m.seq}",
    )


async def readable(request: web.Request, board: Board) -> list[str]:
    """The queues the identity may see (and ``$sys``, which anyone may read)."""
    who = identity(request)
    views = await answer(board.list_queues_async())
    names = [v.spec.name for v in views if any(who.may(verb, v.spec.name) for verb in SEE)]
    return [*names, SYS] if who.may(READ, SYS) else names


@routes.get("/browse")
async def choose(request: web.Request) -> web.Response:
    """The form with no queue yet; submitted with a queue, its page (the
    form works with no script: the chosen queue goes in the query)."""
    chosen = request.query.get("queue", "")
    if chosen:
        rest = {k: v for k, v in request.query.items() if k != "queue"}
        raise web.HTTPSeeOther(href(f"/browse/{quote(chosen, safe='')}", **rest))
    last = last_queue(request)
    if last and identity(request).may(READ, last):  # the queue one came from
        raise web.HTTPSeeOther(href(f"/browse/{quote(last, safe='')}"))
    board = board_of(request)
    return render(request, "browse.html", _context(choices(await readable(request, board))))


def _context(queues: list[str], **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "queues": queues,
        "queue": "",
        "form": PatternForm(),
        "section": "",
        "order": "oldest",
        "limit": PAGE,
        "rows": [],
        "more": "",
        "error": "",
        "done": "",
    }
    return {**base, **kw}


@routes.get("/browse/{queue}")
async def page(request: web.Request) -> web.Response:
    queue = reading(request, "queue")
    board = board_of(request)
    q = request.query
    form = PatternForm.of(q)
    section_text = q.get("section", "")
    order = "newest" if q.get("order") == "newest" else "oldest"
    ctx = _context(
        choices(await readable(request, board), queue),
        queue=queue,
        form=form,
        section=section_text,
        order=order,
        done=q.get("done", ""),
    )
    try:
        limit = int_field(q, "limit", PAGE)
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidArgument(f"limit: from 1 to {MAX_PAGE} (got {limit})")
        ctx["limit"] = limit
        start_seq = int_field(q, "from", 0)
        if start_seq < 0:
            raise InvalidArgument(f"from: a seq, not negative (got {start_seq})")
        if section_text and section_text not in SECTIONS:
            raise InvalidArgument(f"section: {', '.join(SECTIONS)} or empty (got {section_text!r})")
        section = Section(section_text) if section_text else None
        pattern = form.pattern()
        reverse = order == "newest"
        start = Start.SEQ if start_seq else (Start.LATEST if reverse else Start.OLDEST)
        got = await answer(
            board.browse_async(
                queue,
                start,
                seq=start_seq,
                reverse=reverse,
                limit=limit,
                section=section,
                pattern=pattern,
            )
        )
    except MsgboardError as e:
        ctx["error"] = str(e)
        return render(request, "browse.html", ctx, status=http_status(e))
    ctx["rows"] = [row(queue, m) for m in got.messages]
    if got.next_seq:
        query = {**form.query(), "section": section_text, "limit": str(limit)}
        if reverse:
            query["order"] = "newest"
        ctx["more"] = href(f"/browse/{queue}", **query, **{"from": str(got.next_seq)})
    return render(request, "browse.html", ctx)


async def fetch(board: Board, queue: str, seq: int) -> Message:
    """The message ``seq`` of ``queue``, waiting or in history; 404 if it
    is not there (never posted, or gone from history)."""
    got = await answer(board.browse_async(queue, Start.SEQ, seq=seq, limit=1))
    if not got.messages or got.messages[0].seq != seq:
        raise web.HTTPNotFound(text=f"queue {queue!r} holds no message {seq}")
    return got.messages[0]


@routes.get("/browse/{queue}/{seq:[0-9]+}")
async def message(request: web.Request) -> web.Response:
    queue = request.match_info["queue"]
    require(request, READ, queue)
    board = board_of(request)
    seq = int(request.match_info["seq"])
    try:
        m = await fetch(board, queue, seq)
    except MsgboardError as e:
        raise refused(e) from None
    view = request.query.get("view", "") or default_view(m.content_type, m.body)
    if view not in BODY_VIEWS:
        raise web.HTTPBadRequest(text=f"view: one of {', '.join(BODY_VIEWS)} (got {view!r})")
    return render(
        request,
        "browse_message.html",
        {
            "m": shown(m),
            "view": view,
            "views": BODY_VIEWS,
            "body": body_view(m.body, view),
            "back": browse_href(queue),
        },
    )


@routes.post("/browse/{queue}/purge")
async def purge(request: web.Request) -> web.Response:
    """Removes every waiting message of the queue that no one holds (and,
    ticked, its history): ``manage`` on it. The board posts
    ``queue.purged`` on ``$sys`` naming the user."""
    queue = request.match_info["queue"]
    who = require(request, MANAGE, queue)
    board = board_of(request)
    data = await request.post()
    history = data.get("history") == "yes"
    try:
        done = await answer(board.purge_queue_async(queue, history, by=who.name))
    except MsgboardError as e:
        raise refused(e) from None
    said = f"Purged {done.purged} waiting message{'s' if done.purged != 1 else ''}"
    said += f" and {done.history} from history." if history else "."
    raise web.HTTPSeeOther(href(f"/browse/{quote(queue, safe='')}", done=said))
