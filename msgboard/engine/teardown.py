"""What goes with what: a queue deleted takes its messages, holds, leases,
blocked calls and every selector reading it or writing to it; a selector
deleted gives back what its consumer held and ends the consumer; a consumer
ending takes its session selector; and an ``auto_delete`` queue left
without selectors deletes itself, which may take more selectors, and so
on. Each removal is announced on ``$sys`` (``events.py``) and each consumer
ended is told why.

Writer thread only: the board's calls (DeleteQueue, DeleteSelector,
Unsubscribe, KickConsumer) run these inside their operations.
"""

from __future__ import annotations

from msgboard.engine import events as ev
from msgboard.engine.events import Events
from msgboard.engine.federation import Pulls
from msgboard.engine.network import Network
from msgboard.engine.selectors import Consumer, Selector
from msgboard.engine.waiters import Waiters, claim
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import NotFound, QueueNotFound


class Teardown:
    """The removals of one board, and what goes with each."""

    def __init__(
        self, writer: Writer, net: Network, events: Events, waiters: Waiters, pulls: Pulls
    ) -> None:
        self._traffic = writer.traffic
        self._pulls = pulls
        self._net = net
        self._events = events
        self._waiters = waiters

    def delete_queue(self, b: Batch, name: str) -> None:
        """Deletes a queue: its messages, the selectors reading it or writing
        to it; blocked calls on it get QueueNotFound."""
        txn, _ = b.find(name)
        txn.delete_queue(name)
        gone = self._net.queue_gone(b, name)
        for s, c in gone:
            self._forget(b, s, c, QueueNotFound(name))
            self._gone(b, s, c, "queue deleted")
        for sid in self._pulls.into(name):  # the pulls that filled it
            self._pulls.delete(b, sid)
        self._events.emit(b, ev.QUEUE_DELETED, name)

        def after() -> None:
            self._traffic.pop(name, None)
            for w in self._waiters.drop_queue(name):
                if claim(w.future):
                    w.future.set_exception(QueueNotFound(name))

        b.after(after)
        for source in dict.fromkeys(s.source for s, _ in gone if s.source != name):
            self.auto_delete(b, source)

    def delete_selector(self, b: Batch, s: Selector) -> None:
        """Deletes a selector: what it had delivered and not seen acked goes
        back to its source queue, its consumer ends."""
        c = self._net.remove(b, s)
        self._forget(b, s, c, NotFound(f"selector {s.id} was deleted"))
        self._gone(b, s, c, "selector deleted")
        self.auto_delete(b, s.source)

    def end_consumer(self, b: Batch, c: Consumer, reason: str) -> None:
        """Detaches a live consumer; a session selector goes with it."""
        net = self._net
        s = c.selector
        net.holders.detach(b, c)
        if s.session and net.table.selectors.get(s.id) is s:
            net.remove(b, s)
            self.auto_delete(b, s.source)
        net.pulls.settle(b)
        self._events.emit(b, ev.CONSUMER_DETACHED, c.id, s.source, s.id, reason, about=s.source)

    def auto_delete(self, b: Batch, queue: str) -> None:
        """Deletes ``queue`` if it is an auto_delete queue left without
        selectors."""
        found = b.lookup(queue)
        if found is not None and found[1].spec.auto_delete and not self._net.table.of(queue):
            self.delete_queue(b, queue)

    def _forget(self, b: Batch, s: Selector, c: Consumer | None, why: BaseException) -> None:
        """A removed selector leaves the store (a crossing one with its
        outbox and what waits there); its consumer is told."""
        if s.durable:
            b.txn(True).delete_selector(s.id)
        if s.shown is not None and b.lookup(s.spec.destination) is not None:
            self.delete_queue(b, s.spec.destination)
        if c is not None:
            b.after(lambda: c.end(why))

    def _gone(self, b: Batch, s: Selector, c: Consumer | None, reason: str) -> None:
        """Announces a selector that went (a durable one: a session
        selector goes with its consumer) and the consumer it had."""
        if c is not None:
            self._events.emit(b, ev.CONSUMER_DETACHED, c.id, s.source, s.id, reason, about=s.source)
        if not s.session:
            self._events.emit(b, ev.SELECTOR_DELETED, s.id, s.source, about=s.source)
