"""The selector table: every selector of one board, filed for routing.

Each selector is filed three ways: by source queue, in round-robin order
(``of``); by source queue and pattern, in a ``PatternIndex`` (``match``:
the selectors a message matches, without trying the others); and by
destination queue (``feeding``: the selectors that pull again when that
queue has room). It also keeps each selector's figures (``bump``) and the
round-robin turns: among the MOVEs that could take a message, the lowest
turn goes first, and a selector that takes gets the next turn (``to_back``).

Writer thread only; additions and removals are undone with their batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from operator import attrgetter

from msgboard.associative.index import PatternIndex
from msgboard.engine.selectors import Selector
from msgboard.engine.writer import Batch
from msgboard.lmdbstore import Txn
from msgboard.message import Message
from msgboard.spec import Op, Position, Role

#: A sort key: round-robin order among selectors.
by_turn = attrgetter("turn")


class Table:
    """Every selector of one board, by id, source, pattern and destination."""

    def __init__(self) -> None:
        #: By id, in creation order.
        self.selectors: dict[str, Selector] = {}
        #: Source queue -> its selectors, in round-robin order.
        self._by_source: dict[str, list[Selector]] = {}
        #: Source queue -> its selectors, indexed by pattern.
        self._index: dict[str, PatternIndex[Selector]] = {}
        #: Source queue -> how many normal or default selectors it has.
        self._normal: dict[str, int] = {}
        #: Destination queue -> the selectors feeding it.
        self._by_dest: dict[str, list[Selector]] = {}
        self._turns = itertools.count(1)

    # -- finding ------------------------------------------------------------

    def of(self, queue: str) -> Sequence[Selector]:
        """The queue's selectors, in round-robin order (do not change it)."""
        return self._by_source.get(queue) or ()

    def match(self, queue: str, msg: Message) -> Sequence[Selector]:
        """The queue's selectors whose pattern ``msg`` matches, through the
        index (the others are not tried)."""
        index = self._index.get(queue)
        return index.match(msg) if index is not None else ()

    def normal(self, queue: str) -> int:
        """How many of the queue's selectors are not overflow selectors."""
        return self._normal.get(queue, 0)

    def feeding(self, queue: str) -> list[Selector] | None:
        """The selectors whose destination is ``queue`` (do not change it)."""
        return self._by_dest.get(queue)

    def has_overflow(self, queue: str) -> bool:
        """Whether the queue has an overflow selector (rule 6)."""
        return any(s.spec.role is Role.OVERFLOW for s in self.of(queue))

    def consumers(self, queue: str) -> int:
        """How many consumers the queue's selectors have."""
        return sum(1 for s in self.of(queue) if s.consumer is not None)

    def figures(self) -> dict[str, tuple[int, int]]:
        """Queue -> (selectors, consumers), for the queues that have any."""
        return {q: (len(sels), self.consumers(q)) for q, sels in self._by_source.items() if sels}

    def reaches(self, start: str, goal: str) -> bool:
        """True if messages can flow from queue ``start`` to ``goal`` through
        internal MOVE and COPY selectors."""
        seen, todo = {start}, [start]
        while todo:
            q = todo.pop()
            if q == goal:
                return True
            for s in self.of(q):
                d = s.spec.destination
                if d and d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False

    # -- changes ------------------------------------------------------------

    def add(self, b: Batch, s: Selector) -> None:
        """Files a new selector, last in its queue's round-robin order."""
        self.selectors[s.id] = s
        lst = self._by_source.setdefault(s.source, [])
        lst.append(s)
        feeds = self._by_dest.setdefault(s.spec.destination, [])
        feeds.append(s)
        self._file(s, +1)
        s.turn = next(self._turns)

        def undo() -> None:
            self._file(s, -1)
            self.selectors.pop(s.id, None)
            if s in lst:
                lst.remove(s)
            if s in feeds:
                feeds.remove(s)

        b.undo(undo)

    def remove(self, b: Batch, s: Selector) -> None:
        """Unfiles a selector."""
        self.selectors.pop(s.id, None)
        lst = self._by_source.get(s.source, [])
        i = lst.index(s)
        del lst[i]
        feeds = self._by_dest.get(s.spec.destination, [])
        j = feeds.index(s)
        del feeds[j]
        self._file(s, -1)

        def undo() -> None:
            self._file(s, +1)
            self.selectors[s.id] = s
            lst.insert(i, s)
            feeds.insert(j, s)

        b.undo(undo)

    def _file(self, s: Selector, step: int) -> None:
        """Adds (+1) or removes (-1) ``s`` in its queue's pattern index."""
        q = s.source
        index = self._index.get(q)
        if step > 0:
            if index is None:
                index = self._index[q] = PatternIndex()
            index.add(s, s.spec.pattern)
        elif index is not None:
            index.remove(s)
            if not len(index):
                del self._index[q]
        if s.spec.role is not Role.OVERFLOW:
            n = self._normal.get(q, 0) + step
            if n:
                self._normal[q] = n
            else:
                self._normal.pop(q, None)

    def to_back(self, b: Batch, s: Selector) -> None:
        """``s`` took a message: it goes to the back of the round-robin order."""
        b.set(s, "turn", next(self._turns))

    @staticmethod
    def start(txn: Txn, s: Selector) -> None:
        """Places a new selector's cursor as its start position says."""
        spec, q = s.spec, s.source
        if spec.start is Position.SEQ:
            s.cursor = max(spec.start_seq, 1)
        elif spec.start is Position.TIME:
            at = txn.seq_at(q, spec.start_time)
            s.cursor = txn.counts(q).next_seq if at is None else at
        elif spec.op is Op.COPY and spec.start is Position.CURRENT:
            s.cursor = txn.counts(q).next_seq
        else:
            s.cursor = 1
        s.behind = spec.op is not Op.COPY or s.cursor < txn.counts(q).next_seq

    def bump(self, sid: str, dropped: int = 0) -> None:
        """Counts a message the selector moved or copied (or, with
        ``dropped``, copies it lost); call from ``Batch.after``."""
        s = self.selectors.get(sid)
        if s is not None:
            if dropped:
                s.dropped += dropped
            else:
                s.delivered += 1
