"""Pulling when credit arrives: each selector that may have credit again (a
consumer acked, a destination queue drained, a held message came back)
is woken, and at the end of the operation takes what waits for it, in
bounded chunks continued by follow-up operations. ``Pulling`` is a part of
the ``Network`` (network.py), which hands it the routing it needs (a
selector taking or copying a message); network.py's docstring tells the
rules ("Credit"), ``credit.py`` how much a selector may take.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from functools import partial

from msgboard.engine.credit import credit
from msgboard.engine.holds import Holds
from msgboard.engine.overflow import Overflow
from msgboard.engine.selectors import Selector
from msgboard.engine.table import Table
from msgboard.engine.writer import Batch, Writer
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Message, Section
from msgboard.spec import Op, Role

#: Most messages pulled by selectors in one operation; the rest is pulled
#: by a follow-up operation.
PULL_BUDGET = 10_000
#: Most messages one pull collects before acting on them.
PULL_CHUNK = 256

#: A DELETE, MOVE or BOUNCE selector takes a waiting message
#: (``Network.take``).
Take = Callable[[Batch, Txn, QueueInfo, Selector, Message, int], None]
#: A COPY selector copies a message; False if it could not
#: (``Network.copy``).
Copy = Callable[[Batch, Selector, Message, int], bool]


class Pulling:
    """The selectors of one board that may pull, and their pulls."""

    def __init__(
        self,
        writer: Writer,
        table: Table,
        holds: Holds,
        overflow: Overflow,
        take: Take,
        copy: Copy,
    ) -> None:
        self._writer = writer
        self._table = table
        self._holds = holds
        self._overflow = overflow
        self._take = take
        self._copy = copy
        #: The selectors to pull at the end of the operation, in order.
        self._work: dict[Selector, None] = {}
        self._budget = PULL_BUDGET

    def wake(self, s: Selector) -> None:
        """``s`` may have credit again: it pulls at the end of the operation."""
        self._work[s] = None

    def forget(self, s: Selector) -> None:
        """``s`` is gone: it pulls no more."""
        self._work.pop(s, None)

    def drained(self, queue: str) -> None:
        """``queue`` has room again: the selectors feeding it may pull."""
        feeds = self._table.feeding(queue)
        if feeds:
            for s in feeds:
                self._work[s] = None

    def settle(self, b: Batch) -> None:
        """Lets every selector that got credit pull what waits for it. Call at
        the end of each operation that can give credit or return messages."""
        work = self._work
        selectors = self._table.selectors
        while work:
            s = next(iter(work))
            del work[s]
            if selectors.get(s.id) is s:
                self._pull(b, s)
        self._budget = PULL_BUDGET

    def _pull(self, b: Batch, s: Selector) -> None:
        if s.spec.role is Role.OVERFLOW:
            return  # rule 6 acts on a post that finds the queue full, never later
        found = b.lookup(s.source)
        if found is None:
            return
        txn, info = found
        q = info.spec.name
        copy = s.spec.op is Op.COPY
        if copy and not s.behind:
            return
        if s.owed and not self._repay(b, txn, s):
            return
        while True:
            may = credit(b, s)
            if may <= 0:
                return
            if self._budget <= 0:
                b.set(s, "behind", True)
                self._continue(s)
                return
            want = int(min(may, PULL_CHUNK, self._budget))
            held = self._holds.held(q)
            chunk: list[Message] = []
            end = True
            resume = 0
            # A pull stops mid-walk once its chunk is full: the walk (and
            # its cursors) is closed here, on the writer's thread.
            if copy:
                matches = s.spec.pattern.matches
                seen = 0
                with closing(txn.scan(q, None, s.cursor)) as rows:
                    for m in rows:
                        seen += 1
                        # A scheduled one is copied when due (``Network.release``).
                        if m.section is not Section.SCHEDULED and matches(m):
                            chunk.append(m)
                            if len(chunk) >= want:
                                end = False
                                break
                        elif seen >= self._budget:
                            # Passed by until the budget ran out: go on from there.
                            end, resume = False, m.seq + 1
                            break
                self._budget -= seen
            else:
                with txn.find(q, s.spec.pattern, s.cursor) as search:
                    for m in search:
                        if m.seq in held:
                            continue
                        chunk.append(m)
                        if len(chunk) >= want:
                            end = False
                            break
                if end and search.next_seq:
                    # The search's budget ran out before the end of the queue:
                    # everything before next_seq was seen; go on from there.
                    end, resume = False, search.next_seq
                self._budget -= max(len(chunk), search.examined, 1)
            # One undo for the cursor's moves in this chunk, not one each.
            b.undo(partial(setattr, s, "cursor", s.cursor))
            now = b.now
            # A MOVE consumer's credit is its own (``credit`` without the
            # selector's checks, once per message).
            c = None if copy or not s.spec.terminal else s.consumer
            for m in chunk:
                if copy:
                    if credit(b, s) <= 0:  # a byte cap: replay waits
                        s.cursor = m.seq
                        return
                    self._copy(b, s, m, 0)
                elif m.expired(now):
                    self._overflow.dead(b, txn, info, m, "expired", 0)
                elif (not c.closed and c.credit() > 0) if c is not None else credit(b, s) > 0:
                    self._take(b, txn, info, s, m, 0)
                else:
                    s.cursor = m.seq
                    return
                s.cursor = m.seq + 1
            if resume > s.cursor:
                b.set(s, "cursor", resume)
            if end:
                if copy:
                    b.set(s, "cursor", txn.counts(q).next_seq)
                b.set(s, "behind", False)
                return

    def _repay(self, b: Batch, txn: Txn, s: Selector) -> bool:
        """Copies what came due behind a replaying COPY's cursor (``owed``),
        as its credit allows; False if some is left for later."""
        owed, q = s.owed, s.source
        for i, seq in enumerate(owed):
            if credit(b, s) <= 0:
                b.set(s, "owed", owed[i:])
                return False
            m = txn.fetch(q, seq)
            if m is not None and m.section is not Section.SCHEDULED:
                self._copy(b, s, m, 0)
        self._budget -= len(owed)
        b.set(s, "owed", ())
        return True

    def _continue(self, s: Selector) -> None:
        def more(b: Batch) -> None:
            self._work[s] = None
            self.settle(b)

        self._writer.submit(more)
