"""Credit, and pulling when it arrives: how many messages a selector may
take now (its consumer's window, its quota, its destination's room), and
the pull that lets each selector with credit take what waits for it, in
bounded chunks continued by follow-up operations. ``Pulling`` is a part of
``Network`` (network.py), which provides the selectors, the routing and the
undo helpers it uses; network.py's docstring tells the rules ("Credit").
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from msgboard.engine.selectors import Selector
from msgboard.engine.writer import Batch, Writer
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Message
from msgboard.spec import Op, Role

if TYPE_CHECKING:
    from msgboard.engine.network import Lookup, Waiting

#: Most messages pulled by selectors in one operation; the rest is pulled
#: by a follow-up operation.
PULL_BUDGET = 10_000
#: Most messages one pull collects before acting on them.
PULL_CHUNK = 256


class Pulling:
    """Network's credit and pull methods."""

    # Provided by Network (network.py).
    selectors: dict[str, Selector]
    _writer: Writer
    _lookup: Lookup
    _waiting: Waiting
    _work: dict[Selector, None]
    _budget: int

    if TYPE_CHECKING:

        @staticmethod
        def _set(b: Batch, obj: object, attr: str, value: Any) -> None: ...

        def held(self, queue: str) -> dict[int, object]: ...

        def _take(
            self, b: Batch, txn: Txn, info: QueueInfo, s: Selector, msg: Message, hops: int
        ) -> None: ...

        def _copy(self, b: Batch, s: Selector, msg: Message, hops: int) -> bool: ...

        def dead(
            self, b: Batch, txn: Txn, info: QueueInfo, msg: Message, reason: str, hops: int
        ) -> None: ...

    # -- credit -----------------------------------------------------------

    def _room(self, b: Batch, name: str) -> float:
        """How many more messages queue ``name`` takes (0 if it is gone)."""
        found = self._lookup(b, name)
        if found is None:
            return 0
        txn, info = found
        limit = info.spec.max_unprocessed
        if not limit:
            return math.inf
        return max(0, limit - txn.counts(name).unprocessed)

    def credit(self, b: Batch, s: Selector) -> float:
        """How many messages ``s`` may take now."""
        spec = s.spec
        if spec.op is Op.DELETE:
            return math.inf
        if spec.terminal:
            c = s.consumer
            return 0 if c is None or c.closed else c.credit()
        if spec.op is Op.BOUNCE:
            return s.quota
        return min(s.quota, self._room(b, spec.destination))

    # -- pulling: credit arrived -----------------------------------------

    def wake(self, s: Selector) -> None:
        """``s`` may have credit again: it pulls at the end of the operation."""
        self._work[s] = None

    def settle(self, b: Batch) -> None:
        """Lets every selector that got credit pull what waits for it. Call at
        the end of each operation that can give credit or return messages."""
        work = self._work
        while work:
            s = next(iter(work))
            del work[s]
            if self.selectors.get(s.id) is s:
                self._pull(b, s)
        self._budget = PULL_BUDGET

    def _pull(self, b: Batch, s: Selector) -> None:
        if s.spec.role is Role.OVERFLOW:
            return  # rule 6 acts on a post that finds the queue full, never later
        found = self._lookup(b, s.source)
        if found is None:
            return
        txn, info = found
        q = info.spec.name
        copy = s.spec.op is Op.COPY
        if copy and not s.behind:
            return
        while True:
            credit = self.credit(b, s)
            if credit <= 0:
                return
            if self._budget <= 0:
                self._set(b, s, "behind", True)
                self._continue(s)
                return
            want = int(min(credit, PULL_CHUNK, self._budget))
            held = self.held(q)
            chunk: list[Message] = []
            end = True
            resume = 0
            if copy:
                source: Iterator[Message] = (
                    m for m in txn.scan(q, None, s.cursor) if s.spec.pattern.matches(m)
                )
                for m in source:
                    chunk.append(m)
                    if len(chunk) >= want:
                        end = False
                        break
                self._budget -= len(chunk)
            else:
                search = self._waiting(txn, q, s.spec.pattern, s.cursor)
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
                    if self.credit(b, s) <= 0:  # a byte cap: replay waits
                        s.cursor = m.seq
                        return
                    self._copy(b, s, m, 0)
                elif m.expired(now):
                    self.dead(b, txn, info, m, "expired", 0)
                elif (not c.closed and c.credit() > 0) if c is not None else self.credit(b, s) > 0:
                    self._take(b, txn, info, s, m, 0)
                else:
                    s.cursor = m.seq
                    return
                s.cursor = m.seq + 1
            if resume > s.cursor:
                self._set(b, s, "cursor", resume)
            if end:
                if copy:
                    self._set(b, s, "cursor", txn.counts(q).next_seq)
                self._set(b, s, "behind", False)
                return

    def _continue(self, s: Selector) -> None:
        def more(b: Batch) -> None:
            self._work[s] = None
            self.settle(b)

        self._writer.submit(more)
