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
ticked, or ``matching``, every waiting message the pattern matches, up to
the board's ``max_take`` a call) and comes back to the page saying what
it did.

Each action is one engine call, so one operation of the board (atomic: all
of it or, on any error, nothing), and the board posts it on ``$sys``
naming the user (``messages.moved``, ``messages.deleted``):
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

from msgboard.console.auth import identity, require
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
    ctx = await _page(
        request, queue, PatternForm.of(request.query), done=request.query.get("done", "")
    )
    return render(request, "deadletters.html", ctx, status=ctx.pop("status", 200))


def _seqs(values: list[str]) -> list[int]:
    out = []
    for i, v in enumerate(values):
        if not v.isdigit() or int(v) <= 0:
            raise InvalidArgument(f"seqs[{i}]: {v!r} is not a seq")
        out.append(int(v))
    return out


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
        pattern = form.pattern() if scope == "matching" else None
        # "All matching" with an empty form: every dead letter, said outright
        # (the engine refuses a call that chooses nothing).
        every = scope == "matching" and pattern is None
        if action == "move":
            if not destination:
                raise InvalidArgument("destination: choose the queue to move them to")
            require(request, MANAGE, destination)
        if action == "delete":
            gone = await answer(
                board.delete_messages_async(queue, seqs, pattern, every=every, by=who.name)
            )
            done = f"Deleted {len(gone)} message{'s' if len(gone) != 1 else ''}."
        else:
            to = destination if action == "move" else ""
            moved = await answer(
                board.move_messages_async(
                    queue,
                    to,
                    seqs,
                    pattern,
                    every=every,
                    by=who.name,
                    may=lambda q: who.may(MANAGE, q),
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
