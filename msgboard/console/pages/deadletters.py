"""Dead letters: the messages a board set aside, with the reason and origin
of each; resubmit them to their origin queue, move them to another queue,
or delete them: one, the ones ticked, or all that match a filter.

``GET /deadletters`` lists the dead-letter queues (every queue some queue
names as its ``dead_letter``) with what waits on each and who sends there;
``GET /deadletters/{queue}`` is a page of one's waiting messages, filtered
by the pattern form (the CLI's notation, ``forms.PatternForm``), each with
its reason, origin queue and seq (the ``x-dead-letter-*`` headers the board
writes); ``POST /deadletters/{queue}`` does one action (``action``:
``resubmit``, ``move`` or ``delete``; ``scope``: ``selected``, the seqs
ticked, or ``matching``, every waiting message the pattern matches) and
comes back to the page saying what it did.

An action on the ticked ones is one engine call, so one operation of the
board (atomic: all of it or, on any error, nothing); one on all matching
is a bulk action (``console.bulk``): batches of ``BATCH``, each one engine
call, going on after the page came back, which shows how far it is
(``GET /deadletters/{queue}/bulk/{id}``, asked by htmx every second) and
then what it did. The board posts each call on ``$sys`` naming the user
(``messages.moved``, ``messages.deleted``):
``Board.move_messages`` (with no destination: each message to the queue
its ``x-dead-letter-queue`` names) and ``Board.delete_messages``. Seeing a
dead-letter queue needs ``read`` on it; acting needs ``manage`` on it and
on every queue a message goes to (a resubmit checks each origin before
anything moves); the buttons are shown only to who may use them, and a
forged request is 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from msgboard.associative import Pattern
from msgboard.console.auth import identity, require
from msgboard.console.bulk import BATCH, BULKS, Bulk
from msgboard.console.context import answer, board_of
from msgboard.console.forms import PatternForm, choices, href, http_status
from msgboard.console.messages import dead_letter_of, when
from msgboard.console.pages.browse import row
from msgboard.console.templating import render
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.message import Message, Section
from msgboard.results import Start
from msgboard.security.permissions import MANAGE, READ, SEE

NAV = ("Dead letters", "/deadletters")
#: Messages a page shows.
PAGE = 100
ACTIONS = ("resubmit", "move", "delete")
SCOPES = ("selected", "matching")
#: Messages a Browse page reads when a bulk action counts what matches.
COUNT_PAGE = 1000
routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class Letter:
    """A dead letter in a row: its place, why and whence, and what it holds."""

    seq: int
    reason: str
    origin: str
    origin_seq: int
    origin_href: str
    at: str
    address: str
    tuple_json: str
    preview: str
    href: str


def letter(queue: str, m: Message) -> Letter:
    dl = dead_letter_of(m)
    r = row(queue, m)
    origin, origin_seq = (dl.queue, dl.seq) if dl is not None else ("", 0)
    link = f"/browse/{quote(origin, safe='')}/{origin_seq}" if origin and origin_seq else ""
    return Letter(
        m.seq,
        dl.reason if dl is not None else "",
        origin,
        origin_seq,
        link,
        when(m.posted_at),
        m.address,
        r.tuple_json,
        r.preview,
        r.href,
    )


@dataclass(frozen=True, slots=True)
class Dlq:
    """A dead-letter queue: its name, what waits on it, who sends there."""

    name: str
    waiting: int
    senders: list[str]
    #: Senders the identity may not see (counted, not named).
    hidden: int = 0


async def dead_letter_queues(request: web.Request, board: Board) -> list[Dlq]:
    """The dead-letter queues the identity may see, by name."""
    who = identity(request)
    views = await answer(board.list_queues_async())
    waiting = {v.spec.name: v.unprocessed for v in views}
    senders: dict[str, list[str]] = {}
    for v in views:
        if v.spec.dead_letter:
            senders.setdefault(v.spec.dead_letter, []).append(v.spec.name)
    # The senders shown are those the identity may see too: a queue outside
    # one's grant is not named ("and N more" counts them).
    out = []
    for name, s in sorted(senders.items()):
        if any(who.may(verb, name) for verb in SEE):
            seen = sorted(q for q in s if any(who.may(verb, q) for verb in SEE))
            out.append(Dlq(name, waiting.get(name, 0), seen, len(s) - len(seen)))
    return out


@routes.get("/deadletters")
async def overview(request: web.Request) -> web.Response:
    board = board_of(request)
    return render(request, "deadletters.html", _context(await dead_letter_queues(request, board)))


def _context(dlqs: list[Dlq], **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "dlqs": dlqs,
        "queue": "",
        "form": PatternForm(),
        "letters": [],
        "more": False,
        "error": "",
        "done": "",
        "destinations": [],
        "checked": set(),
        "actions": ACTIONS,
        "bulk": None,
    }
    return {**base, **kw}


async def _page(request: web.Request, queue: str, form: PatternForm, **kw: Any) -> dict[str, Any]:
    """The page's context: the dead letters matching ``form`` (or the error)."""
    board = board_of(request)
    who = identity(request)
    views = await answer(board.list_queues_async())
    destinations = [
        v.spec.name for v in views if v.spec.name != queue and who.may(MANAGE, v.spec.name)
    ]
    ctx = _context(
        await dead_letter_queues(request, board),
        queue=queue,
        form=form,
        destinations=choices(destinations),
        **kw,
    )
    # An action's error (``kw``) is shown above the list as it is now: the
    # list is read all the same.
    try:
        got = await answer(
            board.browse_async(
                queue,
                Start.OLDEST,
                limit=PAGE,
                section=Section.UNPROCESSED,
                pattern=form.pattern(),
            )
        )
    except MsgboardError as e:
        ctx["error"] = "; ".join(x for x in (ctx["error"], str(e)) if x)
        ctx["status"] = http_status(e)
        return ctx
    ctx["letters"] = [letter(queue, m) for m in got.messages]
    ctx["more"] = bool(got.next_seq)
    return ctx


@routes.get("/deadletters/{queue}")
async def page(request: web.Request) -> web.Response:
    queue = request.match_info["queue"]
    require(request, READ, queue)
    done, error, going = request.query.get("done", ""), "", None
    if request.query.get("bulk"):
        # Read once: the page shows the action going on or what it did,
        # as it was at this moment (it may end while the list is read).
        bulk = request.app[BULKS].get(request.query["bulk"], identity(request).name)
        if bulk.finished:
            done, error = bulk.summary(), bulk.error
        else:
            going = bulk
    ctx = await _page(request, queue, PatternForm.of(request.query), done=done, error=error)
    ctx["bulk"] = going
    ctx["batch"] = BATCH
    return render(request, "deadletters.html", ctx, status=ctx.pop("status", 200))


def _seqs(values: list[str]) -> list[int]:
    out = []
    for i, v in enumerate(values):
        if not v.isdigit() or int(v) <= 0:
            raise InvalidArgument(f"seqs[{i}]: {v!r} is not a seq")
        out.append(int(v))
    return out


#: What each action is called while it goes and once done.
VERBS = {
    "resubmit": ("Resubmitting", "Resubmitted"),
    "move": ("Moving", "Moved"),
    "delete": ("Deleting", "Deleted"),
}


def _matching(request: web.Request, queue: str, action: str, to: str, pattern: Pattern) -> Bulk:
    """Starts ``action`` on every waiting message of ``queue`` that
    ``pattern`` matches, in batches (``bulk.py``): they are counted first
    (Browse, on the board's reader thread), then acted on ``BATCH`` at a
    time, the oldest matching first, never more than were counted (a
    resubmit whose origin sends them back here ends)."""
    board = board_of(request)
    who = identity(request)
    going, done = VERBS[action]

    async def count() -> int:
        n, seq = 0, 0
        while True:
            got = await answer(
                board.browse_async(
                    queue,
                    Start.SEQ if seq else Start.OLDEST,
                    seq=seq,
                    limit=COUNT_PAGE,
                    section=Section.UNPROCESSED,
                    pattern=pattern,
                )
            )
            n += len(got.messages)
            if not got.next_seq:
                return n
            seq = got.next_seq

    async def step(n: int) -> tuple[int, set[str]]:
        if action == "delete":
            gone = await answer(board.delete_messages_async(queue, (), pattern, n, by=who.name))
            return len(gone), set()
        moved = await answer(
            board.move_messages_async(
                queue, to, (), pattern, n, by=who.name, may=lambda q: who.may(MANAGE, q)
            )
        )
        return len(moved), {m.queue for m in moved}

    bulk = Bulk("", queue, who.name, going, done)
    return request.app[BULKS].start(bulk, count, step, http_status)


@routes.get("/deadletters/{queue}/bulk/{id}")
async def progress(request: web.Request) -> web.Response:
    """How far a bulk action is (htmx asks every second); once it ended,
    the page is loaded again (``HX-Refresh``), to show what it did above
    the list as it is then."""
    queue = request.match_info["queue"]
    require(request, READ, queue)
    bulk = request.app[BULKS].get(request.match_info["id"], identity(request).name)
    if bulk.finished:
        return web.Response(text="", headers={"HX-Refresh": "true"})
    return render(request, "bulk_progress.html", {"bulk": bulk, "batch": BATCH})


@routes.post("/deadletters/{queue}")
async def act(request: web.Request) -> web.Response:
    """One action on the ticked or the matching dead letters."""
    queue = request.match_info["queue"]
    who = require(request, MANAGE, queue)
    board = board_of(request)
    data = await request.post()
    fields = {k: v for k, v in data.items() if isinstance(v, str)}
    form = PatternForm.of(fields)
    action, _, scope = fields.get("action", "").partition(":")
    ticked = [v for v in data.getall("seq", []) if isinstance(v, str)]
    destination = fields.get("destination", "")
    try:
        if action not in ACTIONS:
            raise InvalidArgument(f"action: one of {', '.join(ACTIONS)} (got {action!r})")
        if scope not in SCOPES:
            raise InvalidArgument(f"scope: one of {', '.join(SCOPES)} (got {scope!r})")
        seqs = _seqs(ticked) if scope == "selected" else []
        if scope == "selected" and not seqs:
            raise InvalidArgument("seq: tick at least one message")
        if action == "move":
            if not destination:
                raise InvalidArgument("destination: choose the queue to move them to")
            require(request, MANAGE, destination)
        to = destination if action == "move" else ""
        if scope == "matching":
            bulk = _matching(request, queue, action, to, form.pattern())
            raise web.HTTPSeeOther(
                href(f"/deadletters/{quote(queue, safe='')}", **form.query(), bulk=bulk.id)
            )
        if action == "delete":
            gone = await answer(board.delete_messages_async(queue, seqs, by=who.name))
            done = f"Deleted {len(gone)} message{'s' if len(gone) != 1 else ''}."
        else:
            moved = await answer(
                board.move_messages_async(
                    queue, to, seqs, by=who.name, may=lambda q: who.may(MANAGE, q)
                )
            )
            where = sorted({m.queue for m in moved})
            verb = "Moved" if action == "move" else "Resubmitted"
            s = "s" if len(moved) != 1 else ""
            done = f"{verb} {len(moved)} message{s}" + (
                f" to {', '.join(where)}." if where else "."
            )
    except MsgboardError as e:
        ctx = await _page(request, queue, form, error=str(e), checked=set(ticked))
        ctx.pop("status", None)
        return render(request, "deadletters.html", ctx, status=http_status(e))
    raise web.HTTPSeeOther(href(f"/deadletters/{quote(queue, safe='')}", **form.query(), done=done))
