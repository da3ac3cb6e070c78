"""Compose: post a message with a tuple editor that keeps types, and take
or read one by template.

The tuple editor is one row per field, each a type chosen from a list
(``str``, ``int``, ``float``, ``bool``, ``null``, ``bytes``) and its value
as text (``forms.typed_tuple``): ``1`` as int and ``1`` as float are posted
as the two different values they are on the board, null is a type of its
own (no value), bytes are written in hex. A row whose type is left at
"(unused)" is not a field, so the page works with no script: it opens
with ``ROWS`` unused rows, and the "add a field" button (htmx:
``GET /compose/field``) adds more.

``POST /compose/post`` posts (``write`` on the queue) and says the seq and
what became of the message (stored, a duplicate of its key, ...);
``POST /compose/take`` and ``POST /compose/read`` take or read the oldest
waiting message matching the pattern form (the CLI's notation), ``read``
on the queue, and show it with its types. The form comes back with what
was typed, and an error names the field (``tuple[1]: '1.5' is not an
int``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web
from msgboard.console.auth import identity, require
from msgboard.console.context import answer, board_of
from msgboard.console.templating import render
from multidict import MultiDictProxy

from msgboard.console.forms import (
    FIELD_TYPES,
    PatternForm,
    headers_from_text,
    http_status,
    int_field,
    typed_tuple,
)
from msgboard.console.messages import body_view, default_view, shown
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.message import Message
from msgboard.security.permissions import READ, SEE, WRITE

NAV = ("Compose", "/compose")
#: Blank rows the editor opens with.
ROWS = 3
#: The type of a row that is not a field.
UNUSED = ""
#: What the take/read pattern's fields' names start with (the message has
#: an ``address`` of its own).
MATCH = "match_"
routes = web.RouteTableDef()

_ENVELOPE = ("queue", "address", "priority", "reply_to", "key", "content_type", "headers", "body")


async def _queues(request: web.Request, board: Board) -> list[str]:
    who = identity(request)
    views = await answer(board.list_queues_async())
    verbs = (*SEE, WRITE)
    return [v.spec.name for v in views if any(who.may(x, v.spec.name) for x in verbs)]


def _rows(kinds: list[str], texts: list[str]) -> list[tuple[str, str]]:
    """The editor's rows to show again (the blank ones, for a new form)."""
    rows = list(zip(kinds, texts, strict=False))
    return rows or [(UNUSED, "")] * ROWS


async def _render(
    request: web.Request,
    values: Mapping[str, str],
    rows: list[tuple[str, str]],
    pattern: PatternForm,
    status: int = 200,
    **kw: Any,
) -> web.Response:
    board = board_of(request)
    ctx: dict[str, Any] = {
        "queues": await _queues(request, board),
        "values": {k: values.get(k, "") for k in _ENVELOPE},
        "rows": rows,
        "types": FIELD_TYPES,
        "pattern": pattern,
        "error": "",
        "posted": "",
        "got": None,
        "got_body": None,
        "got_how": "",
        **kw,
    }
    return render(request, "compose.html", ctx, status=status)


@routes.get("/compose")
async def page(request: web.Request) -> web.Response:
    values = {"queue": request.query.get("queue", "")}
    return await _render(request, values, _rows([], []), PatternForm())


@routes.get("/compose/field")
async def field(request: web.Request) -> web.Response:
    """One more row of the tuple editor (htmx appends it)."""
    return render(request, "compose_field.html", {"row": ("str", ""), "types": FIELD_TYPES})


def _editor(data: MultiDictProxy[Any]) -> tuple[list[str], list[str]]:
    kinds = [v for v in data.getall("type", []) if isinstance(v, str)]
    texts = [v for v in data.getall("value", []) if isinstance(v, str)]
    return kinds, texts


def message_of(values: Mapping[str, str], kinds: list[str], texts: list[str]) -> Message:
    """The message the form describes; InvalidArgument naming the field."""
    used = [(k, t) for k, t in zip(kinds, texts, strict=False) if k != UNUSED]
    fields = typed_tuple([k for k, _ in used], [t for _, t in used])
    return Message(
        tuple=fields,
        address=values.get("address", ""),
        priority=int_field(values, "priority"),
        headers=headers_from_text(values.get("headers", "")),
        reply_to=values.get("reply_to", "").strip(),
        key=values.get("key", ""),
        content_type=values.get("content_type", "").strip(),
        body=values.get("body", "").replace("\r\n", "\n").encode(),
    )


@routes.post("/compose/post")
async def post(request: web.Request) -> web.Response:
    data = await request.post()
    values = {k: v for k, v in data.items() if isinstance(v, str)}
    kinds, texts = _editor(data)
    rows = _rows(kinds, texts)
    queue = values.get("queue", "")
    require(request, WRITE, queue)
    board = board_of(request)
    try:
        if len(kinds) != len(texts):
            raise InvalidArgument(f"tuple: {len(kinds)} types but {len(texts)} values")
        m = message_of(values, kinds, texts)
        [receipt] = await answer(board.post_receipts_async(queue, [m]))
    except MsgboardError as e:
        return await _render(
            request, values, rows, PatternForm(), status=http_status(e), error=str(e)
        )
    how = receipt.disposition.value
    said = f"Posted to {queue}: seq {receipt.seq} ({how})." if receipt.seq else f"Posted: {how}."
    return await _render(
        request,
        values,
        rows,
        PatternForm(),
        posted=said,
        posted_href=f"/browse/{queue}/{receipt.seq}" if receipt.seq else "",
    )


async def _match(request: web.Request, take: bool) -> web.Response:
    data = await request.post()
    values = {k: v for k, v in data.items() if isinstance(v, str)}
    kinds, texts = _editor(data)
    rows = _rows(kinds, texts)
    queue = values.get("queue", "")
    require(request, READ, queue)
    board = board_of(request)
    pattern = PatternForm.of(values, MATCH)
    try:
        p = pattern.pattern()
        op = board.take_async if take else board.read_async
        found = await answer(op(queue, p, 0.0, 1))
    except MsgboardError as e:
        return await _render(request, values, rows, pattern, status=http_status(e), error=str(e))
    verb = "Took" if take else "Read"
    if not found:
        return await _render(
            request, values, rows, pattern, got_how=f"{verb}: no waiting message matches."
        )
    m = found[0]
    view = default_view(m.content_type, m.body)
    return await _render(
        request,
        values,
        rows,
        pattern,
        got=shown(m),
        got_body=body_view(m.body, view),
        got_how=f"{verb} {queue} #{m.seq}" + (" (it is gone from the queue)." if take else "."),
    )


@routes.post("/compose/take")
async def take(request: web.Request) -> web.Response:
    return await _match(request, take=True)


@routes.post("/compose/read")
async def read(request: web.Request) -> web.Response:
    return await _match(request, take=False)
