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

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from msgboard.console.auth import identity, require
from msgboard.console.context import answer, board_of
from msgboard.console.forms import (
    FIELD_TYPES,
    PatternForm,
    choices,
    headers_from_text,
    http_status,
    int_field,
    typed_tuple,
)
from msgboard.console.messages import body_view, default_view, shown
from msgboard.console.templating import render
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


@dataclass(frozen=True, slots=True)
class Sent:
    """What a compose form sent: its text fields, the tuple editor's rows
    (types and texts, in order), and the take/read pattern."""

    values: dict[str, str]
    kinds: list[str]
    texts: list[str]
    pattern: PatternForm

    @property
    def queue(self) -> str:
        return self.values.get("queue", "")

    def rows(self) -> list[tuple[str, str]]:
        """The editor's rows to show again (blank ones for a new form)."""
        return list(zip(self.kinds, self.texts, strict=False)) or [(UNUSED, "")] * ROWS

    def message(self) -> Message:
        """The message the form describes; InvalidArgument naming the field."""
        if len(self.kinds) != len(self.texts):
            raise InvalidArgument(f"tuple: {len(self.kinds)} types but {len(self.texts)} values")
        used = [(k, t) for k, t in zip(self.kinds, self.texts, strict=True) if k != UNUSED]
        v = self.values
        return Message(
            tuple=typed_tuple([k for k, _ in used], [t for _, t in used]),
            address=v.get("address", ""),
            priority=int_field(v, "priority"),
            headers=headers_from_text(v.get("headers", "")),
            reply_to=v.get("reply_to", "").strip(),
            key=v.get("key", ""),
            content_type=v.get("content_type", "").strip(),
            body=v.get("body", "").replace("\r\n", "\n").encode(),
        )


async def sent(request: web.Request) -> Sent:
    data = await request.post()
    values = {k: v for k, v in data.items() if isinstance(v, str)}
    kinds = [v for v in data.getall("type", []) if isinstance(v, str)]
    texts = [v for v in data.getall("value", []) if isinstance(v, str)]
    return Sent(values, kinds, texts, PatternForm.of(values, MATCH))


async def _queues(request: web.Request, board: Board) -> list[str]:
    who = identity(request)
    views = await answer(board.list_queues_async())
    verbs = (*SEE, WRITE)
    return [v.spec.name for v in views if any(who.may(x, v.spec.name) for x in verbs)]


async def _render(request: web.Request, form: Sent, status: int = 200, **kw: Any) -> web.Response:
    board = board_of(request)
    who = identity(request)
    queues = choices(await _queues(request, board), form.queue)
    ctx: dict[str, Any] = {
        "queues": queues,
        # The queues of the list the identity may post to: the message part
        # and Post show only for one of them (none: not at all).
        "writable": {q for q in queues if who.may(WRITE, q)},
        "values": {k: form.values.get(k, "") for k in _ENVELOPE},
        "rows": form.rows(),
        "types": FIELD_TYPES,
        "pattern": form.pattern,
        "error": "",
        "posted": "",
        "posted_href": "",
        "got": None,
        "got_body": None,
        "got_how": "",
        **kw,
    }
    return render(request, "compose.html", ctx, status=status)


@routes.get("/compose")
async def page(request: web.Request) -> web.Response:
    form = Sent({"queue": request.query.get("queue", "")}, [], [], PatternForm())
    return await _render(request, form)


@routes.get("/compose/field")
async def field(request: web.Request) -> web.Response:
    """One more row of the tuple editor (htmx appends it)."""
    return render(request, "compose_field.html", {"row": ("str", ""), "types": FIELD_TYPES})


@routes.post("/compose/post")
async def post(request: web.Request) -> web.Response:
    form = await sent(request)
    queue = form.queue
    require(request, WRITE, queue)
    board = board_of(request)
    try:
        [receipt] = await answer(board.post_receipts_async(queue, [form.message()]))
    except MsgboardError as e:
        return await _render(request, form, http_status(e), error=str(e))
    how = receipt.disposition.value
    said = f"Posted to {queue}: seq {receipt.seq} ({how})." if receipt.seq else f"Posted: {how}."
    link = f"/browse/{queue}/{receipt.seq}" if receipt.seq else ""
    return await _render(request, form, posted=said, posted_href=link)


async def _match(request: web.Request, take: bool) -> web.Response:
    form = await sent(request)
    queue = form.queue
    require(request, READ, queue)
    board = board_of(request)
    try:
        op = board.take_async if take else board.read_async
        found = await answer(op(queue, form.pattern.pattern(), 0.0, 1))
    except MsgboardError as e:
        return await _render(request, form, http_status(e), error=str(e))
    verb = "Took" if take else "Read"
    if not found:
        return await _render(request, form, got_how=f"{verb}: no waiting message matches.")
    m = found[0]
    gone = " (it is gone from the queue)." if take else "."
    return await _render(
        request,
        form,
        got=shown(m),
        got_body=body_view(m.body, default_view(m.content_type, m.body)),
        got_how=f"{verb} {queue} #{m.seq}{gone}",
    )


@routes.post("/compose/take")
async def take(request: web.Request) -> web.Response:
    return await _match(request, take=True)


@routes.post("/compose/read")
async def read(request: web.Request) -> web.Response:
    return await _match(request, take=False)
