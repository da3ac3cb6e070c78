"""Definitions: create a queue or a selector, and export or import the
board's definitions (queues, durable selectors, links) as one JSON file
(``msgboard.definitions``, the same file ``msgboard definitions export``
writes and ``import`` reads).

Creating asks what CreateQueue and CreateSelector ask over gRPC, read from
the one permission table (``permissions.RPCS``) for the request the form
makes: ``manage`` on the queue (and ``write`` on its dead-letter queue), or
``manage`` and ``read`` on a selector's source and ``write`` on its
destination. Exporting and importing are the whole board's (links hold
credentials): ``admin``. An import runs on a worker thread (one engine call
per definition), not in the event loop; each creation is posted on ``$sys``
as the board posts it (``queue.created``, ``selector.created``).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote_plus

from aiohttp import web

from msgboard import definitions as defs
from msgboard.codec.specs import selector_spec_to_pb, spec_to_pb
from msgboard.console.auth import identity, require
from msgboard.console.context import answer, board_of
from msgboard.console.forms import PatternForm, http_status, int_field
from msgboard.console.templating import render
from msgboard.engine import Board
from msgboard.engine.events import CONSOLE_ACTION
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.security.permissions import ADMIN, RPCS, SelectorRef
from msgboard.spec import LinkSpec, Op, QueueSpec, SelectorSpec
from msgboard.v1 import board_pb2 as pb

NAV = ("Definitions", "/definitions")
#: The largest definitions file an import takes.
MAX_FILE = 4 * 1024 * 1024
OPS = ("move", "copy", "delete")
routes = web.RouteTableDef()


class BoardTarget:
    """The console's board as ``definitions.apply`` sees it (sync calls:
    run on a worker thread)."""

    def __init__(self, board: Board) -> None:
        self.board = board

    def queue_names(self) -> set[str]:
        return {v.spec.name for v in self.board.list_queues()}

    def selector_specs(self) -> list[SelectorSpec]:
        return [v.spec for v in self.board.list_selectors() if v.durable]

    def link_names(self) -> set[str]:
        return {x.name for x in self.board.list_links()}

    def create_queue(self, spec: QueueSpec) -> None:
        self.board.create_queue(spec)

    def create_selector(self, spec: SelectorSpec) -> None:
        self.board.create_selector(spec)

    def create_link(self, spec: LinkSpec) -> None:
        self.board.create_link(spec)


def _context(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "q": {},
        "s": {},
        "pattern": PatternForm(),
        "ops": OPS,
        "error": "",
        "done": "",
    }
    return {**base, **kw}


@routes.get("/definitions")
async def page(request: web.Request) -> web.Response:
    board_of(request)
    return render(request, "definitions.html", _context(done=request.query.get("done", "")))


def _needs(request: web.Request, rpc: str, message: Any) -> None:
    """403 unless the identity may make this request over gRPC (the one
    table's needs for it)."""
    for need in RPCS[rpc].needs(message):
        queue = need.queue
        if isinstance(queue, SelectorRef):
            continue
        if not any(identity(request).may(v, queue) for v in need.verbs):
            require(request, need.verbs[0], queue)


def _form(data: Any) -> dict[str, str]:
    return {k: v for k, v in data.items() if isinstance(v, str)}


@routes.post("/definitions/queue")
async def create_queue(request: web.Request) -> web.Response:
    board = board_of(request)
    f = _form(await request.post())
    try:
        name = f.get("name", "").strip()
        if not name:
            raise InvalidArgument("name: the queue's name")
        spec = QueueSpec(
            name,
            transient=f.get("transient") == "yes",
            max_unprocessed=int_field(f, "max_unprocessed", 0),
            max_history=int_field(f, "max_history", 0),
            dead_letter=f.get("dead_letter", "").strip(),
            max_deliveries=int_field(f, "max_deliveries", 0),
        )
        _needs(request, "CreateQueue", pb.CreateQueueRequest(spec=spec_to_pb(spec)))
        await answer(board.create_queue_async(spec))
    except MsgboardError as e:
        ctx = _context(q=f, error=str(e))
        return render(request, "definitions.html", ctx, status=http_status(e))
    board.emit(CONSOLE_ACTION, identity(request).name, "create queue", name)
    raise web.HTTPSeeOther(f"/definitions?done=Created+queue+{quote_plus(name)}.")


@routes.post("/definitions/selector")
async def create_selector(request: web.Request) -> web.Response:
    board = board_of(request)
    f = _form(await request.post())
    form = PatternForm.of(f)
    try:
        source = f.get("source", "").strip()
        if not source:
            raise InvalidArgument("source: the queue it takes from")
        op = f.get("op", "move")
        if op not in OPS:
            raise InvalidArgument(f"op: one of {', '.join(OPS)} (got {op!r})")
        spec = SelectorSpec(
            source,
            form.pattern(),
            Op(op),
            f.get("destination", "").strip(),
            credit=int_field(f, "credit", 0),
        )
        _needs(request, "CreateSelector", pb.CreateSelectorRequest(spec=selector_spec_to_pb(spec)))
        made = await answer(board.create_selector_async(spec))
    except MsgboardError as e:
        ctx = _context(s=f, pattern=form, error=str(e))
        return render(request, "definitions.html", ctx, status=http_status(e))
    board.emit(CONSOLE_ACTION, identity(request).name, f"create selector {made.id}", source)
    raise web.HTTPSeeOther(
        f"/definitions?done=Created+selector+{quote_plus(made.id)}+on+{quote_plus(source)}."
    )


@routes.get("/definitions.json")
async def export(request: web.Request) -> web.Response:
    """The board's definitions as a file to save (``admin``)."""
    require(request, ADMIN)
    board = board_of(request)

    def build() -> str:
        queues = [v.spec for v in board.list_queues()]
        selectors = [v.spec for v in board.list_selectors() if v.durable]
        links = list(board.list_links())
        return defs.dumps(defs.definitions(queues, selectors, links))

    text = await asyncio.to_thread(build)
    return web.Response(
        text=text,
        content_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="msgboard-definitions.json"'},
    )


@routes.post("/definitions/import")
async def import_(request: web.Request) -> web.Response:
    """Creates what the uploaded file defines and the board lacks (``admin``)."""
    who = require(request, ADMIN)
    board = board_of(request)
    data = await request.post()
    upload = data.get("file")
    try:
        if not isinstance(upload, web.FileField):
            raise InvalidArgument("file: choose a definitions file to import")
        raw = upload.file.read(MAX_FILE + 1)
        if len(raw) > MAX_FILE:
            raise InvalidArgument(f"file: larger than {MAX_FILE} bytes")
        loaded = defs.loads(raw)
        applied = await asyncio.to_thread(defs.apply, loaded, BoardTarget(board))
    except MsgboardError as e:
        return render(request, "definitions.html", _context(error=str(e)), status=http_status(e))
    board.emit(CONSOLE_ACTION, who.name, "import definitions", "")
    raise web.HTTPSeeOther(f"/definitions?done=Imported:+{quote_plus(applied.text())}.")
