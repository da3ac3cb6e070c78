"""Blocked Takes and Reads, woken by the post that matches them.

A waiter belongs to one queue; each queue keeps its waiters in arrival
order, so when several Takes wait for the same kind of message the oldest
gets it. They are filed in a ``PatternIndex`` by their patterns, so a post
finds the waiters it matches (``match``) without trying the others.
Deadlines sit in a heap that the writer thread checks between batches: an
expired wait is answered with nothing, never by polling.

Everything here runs on the writer thread.
"""

from __future__ import annotations

import heapq
import itertools
from concurrent.futures import Future
from dataclasses import dataclass, field

from msgboard.associative import Pattern
from msgboard.associative.index import PatternIndex
from msgboard.message import Message

Result = Future[list[Message]]


def claim(fut: Result) -> bool:
    """Marks a future as being answered, so a caller can no longer cancel
    it; False if the caller already gave up."""
    return fut.running() or fut.set_running_or_notify_cancel()


def answer(fut: Result, msgs: list[Message]) -> None:
    if not fut.done() and (fut.running() or fut.set_running_or_notify_cancel()):
        fut.set_result(msgs)


@dataclass(eq=False, slots=True)
class Waiter:
    queue: str
    pattern: Pattern
    take: bool
    deadline: float
    future: Result
    #: A Take with a lease (seconds): it holds what it takes.
    lease: float = 0.0
    #: Set while a batch has given it a message that is not yet committed.
    claimed: bool = False
    done: bool = False
    order: int = field(default_factory=itertools.count().__next__)


class Waiters:
    """The blocked calls of every queue."""

    def __init__(self) -> None:
        self._by_queue: dict[str, PatternIndex[Waiter]] = {}
        self._deadlines: list[tuple[float, int, Waiter]] = []

    def add(self, w: Waiter) -> None:
        index = self._by_queue.get(w.queue)
        if index is None:
            index = self._by_queue[w.queue] = PatternIndex()
        index.add(w, w.pattern)
        heapq.heappush(self._deadlines, (w.deadline, w.order, w))

    def remove(self, w: Waiter) -> None:
        w.done = True
        index = self._by_queue.get(w.queue)
        if index is not None and index.remove(w) and not index:
            del self._by_queue[w.queue]

    def of(self, queue: str) -> list[Waiter]:
        """The queue's live waiters, oldest first (a copy)."""
        return [w for w in self._by_queue.get(queue, ()) if not w.done]

    def match(self, queue: str, msg: Message) -> list[Waiter]:
        """The queue's live waiters whose pattern matches ``msg``, oldest
        first, found through the index (the others are not tried)."""
        index = self._by_queue.get(queue)
        if index is None:
            return []
        return [w for w in index.match(msg) if not w.done]

    def count(self, queue: str) -> int:
        return sum(1 for w in self._by_queue.get(queue, ()) if not w.done)

    def counts(self) -> dict[str, int]:
        """Queue -> how many calls wait on it, for the queues that have any."""
        return {q: n for q in self._by_queue if (n := self.count(q))}

    def any(self, queue: str) -> bool:
        return queue in self._by_queue

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expire(self, now: float) -> list[Waiter]:
        """Removes and returns the unclaimed waiters whose deadline passed."""
        due = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, w = heapq.heappop(self._deadlines)
            if not w.done and not w.claimed:
                self.remove(w)
                due.append(w)
        return due

    def drop_queue(self, queue: str) -> list[Waiter]:
        """Removes and returns every waiter of a deleted queue."""
        ws = list(self._by_queue.pop(queue, ()))
        for w in ws:
            w.done = True
        return ws

    def all(self) -> list[Waiter]:
        return [w for ws in self._by_queue.values() for w in ws if not w.done]
