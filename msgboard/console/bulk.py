"""Bulk actions that go on after the click: an action on every dead letter
that matches a filter (thousands, maybe) runs in the board's event loop as
an ``asyncio`` task, in batches of ``BATCH`` messages, each batch one
engine call (one operation of the board: all of its messages or none),
while the page shows how far it is (done of total) and, once it ends, what
it did or the error that stopped it.

``Bulks`` is the console's set of them (``BULKS`` in the app): ``start``
counts the matching messages, then calls ``step`` with the size of the
next batch until every one counted is done, a batch does none, or one
fails (the action stops there; the batches before it stay done). Between
two batches it waits as long as the last one took (``PAUSE`` at least),
so a bulk action of 100,000 messages takes at most half of the board's
writer: the live traffic goes on between its batches.
It keeps the last ``KEPT`` actions, finished or not, by a random id; a
page shows one to the user who started it only. The tasks are cancelled
when the console's listener closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from msgboard.errors import MsgboardError

#: Messages a batch acts on (one engine call each; under the board's
#: ``max_take``, 10,000 by default).
BATCH = 500
#: Seconds an action waits after each batch, at least (and at least as
#: long as the batch took): it takes at most half of the board's writer,
#: whose other clients' calls go between its batches.
PAUSE = 0.1
#: Actions kept (their progress and outcome), the oldest forgotten first.
KEPT = 64


@dataclasses.dataclass(eq=False)
class Bulk:
    """One action going on: what it does (``verb``: "Resubmitting"...), on
    which queue, for whom; how many it counted and has done; once it ends,
    ``finished``, and ``error`` if a batch failed."""

    id: str
    queue: str
    owner: str
    verb: str
    done_verb: str
    total: int = 0
    done: int = 0
    #: Counting the matching messages (before the first batch).
    counting: bool = True
    batches: int = 0
    #: The queues the messages went to (a move's or resubmit's).
    to: set[str] = dataclasses.field(default_factory=set)
    error: str = ""
    #: The error's HTTP status (``forms.http_status``), 0 without one.
    status: int = 0
    finished: bool = False
    task: asyncio.Task[None] | None = None

    def summary(self) -> str:
        """What it did, once finished: ``Resubmitted 3,000 messages to jobs.``
        (or, stopped by an error, how many of how many)."""
        s = "s" if self.done != 1 else ""
        where = f" to {', '.join(sorted(self.to))}" if self.to else ""
        if self.error and not self.done:
            return f"{self.done_verb} none of {self.total:,}."
        if self.error:
            return (
                f"{self.done_verb} {self.done:,} of {self.total:,} message{s}{where} "
                f"in {self.batches} batch{'es' if self.batches != 1 else ''}, then stopped."
            )
        return f"{self.done_verb} {self.done:,} message{s}{where}."


#: What a batch did: how many messages, and the queues they went to.
Step = Callable[[int], Awaitable[tuple[int, set[str]]]]


class Bulks:
    """The console's bulk actions (the module's story)."""

    def __init__(self) -> None:
        self._bulks: dict[str, Bulk] = {}

    def start(
        self,
        bulk: Bulk,
        count: Callable[[], Awaitable[int]],
        step: Step,
        status: Callable[[MsgboardError], int],
    ) -> Bulk:
        """Runs ``bulk``: ``count()`` the messages, then ``step(n)`` with
        each batch's size until done; an error of either ends it with its
        text and ``status(e)``."""
        bulk.id = secrets.token_urlsafe(12)
        while len(self._bulks) >= KEPT:
            old = next(iter(self._bulks))
            if not self._bulks[old].finished:
                break  # KEPT going on at once: keep them all
            del self._bulks[old]
        self._bulks[bulk.id] = bulk

        async def run() -> None:
            try:
                bulk.total = await count()
                bulk.counting = False
                loop = asyncio.get_running_loop()
                while bulk.done < bulk.total:
                    began = loop.time()
                    n, to = await step(min(BATCH, bulk.total - bulk.done))
                    bulk.batches += 1
                    bulk.done += n
                    bulk.to |= to
                    if n == 0:  # none left that matches: others took them
                        break
                    if bulk.done < bulk.total:
                        await asyncio.sleep(max(PAUSE, loop.time() - began))
            except MsgboardError as e:
                bulk.error, bulk.status = str(e), status(e)
            finally:
                bulk.counting = False
                bulk.finished = True

        bulk.task = asyncio.create_task(run(), name=f"console-bulk-{bulk.id}")
        return bulk

    def get(self, id: str, owner: str) -> Bulk:
        """The action ``id`` if ``owner`` started it; 404 otherwise."""
        bulk = self._bulks.get(id)
        if bulk is None or bulk.owner != owner:
            raise web.HTTPNotFound(text=f"no bulk action {id!r} of yours (it may be forgotten)")
        return bulk

    async def close(self) -> None:
        """Cancels what is going on (the listener closes)."""
        tasks = [b.task for b in self._bulks.values() if b.task is not None and not b.finished]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


BULKS = web.AppKey("bulks", Bulks)
