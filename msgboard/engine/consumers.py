"""Who is connected: the board's consumers, listed and kicked.

A consumer is a client attached through Subscribe to a terminal selector:
a session selector of its own, or a durable selector it attached to. Each
has an id (``con-N``, unique while the board runs), and the server tells the
board what it knows of the client (its address and user). ``Consumers`` is
a part of ``Board`` (board.py), which provides the writer and the network.
"""

from __future__ import annotations

from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING

from msgboard.engine.network import Network
from msgboard.engine.selectors import Consumer
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import Kicked, NotFound
from msgboard.results import ConsumerView

__all__ = ["ConsumerView", "Consumers", "consumer_view"]


def consumer_view(c: Consumer) -> ConsumerView:
    s = c.selector
    return ConsumerView(
        c.id,
        c.peer,
        c.identity,
        s.source,
        s.id,
        s.spec.op.value,
        c.limit,
        len(c.outstanding),
        c.next_id - 1,  # delivery ids count up from 1, one per delivery
        c.since,
    )


class Consumers:
    """Board's consumer listing and kicking."""

    # Provided by Board (board.py).
    _writer: Writer
    _net: Network

    if TYPE_CHECKING:

        def _find(self, b: Batch, name: str) -> object: ...

        def _end_consumer(self, b: Batch, c: Consumer, reason: str) -> None: ...

    def _consumers(self) -> list[Consumer]:
        return [s.consumer for s in self._net.selectors.values() if s.consumer is not None]

    def list_consumers_async(self, queue: str = "") -> Future[list[ConsumerView]]:
        def run(b: Batch) -> list[ConsumerView]:
            if queue:
                self._find(b, queue)
            found = [c for c in self._consumers() if not queue or c.selector.source == queue]
            return [consumer_view(c) for c in sorted(found, key=lambda c: c.since)]

        return self._writer.submit(run)

    def list_consumers(self, queue: str = "") -> list[ConsumerView]:
        """The consumers of one queue, or of every queue, oldest first."""
        return self.list_consumers_async(queue).result()

    def kick_consumer_async(self, cid: str) -> Future[ConsumerView]:
        def run(b: Batch) -> ConsumerView:
            for c in self._consumers():
                if c.id == cid:
                    view = consumer_view(c)
                    self._end_consumer(b, c, "kicked")
                    why = Kicked(f"consumer {cid} was ended by an operator (KickConsumer)")
                    b.after(partial(c.end, why))
                    return view
            raise NotFound(f"no consumer {cid!r} (msgboard consumer list shows them)")

        return self._writer.submit(run)

    def kick_consumer(self, cid: str) -> ConsumerView:
        """Ends a consumer as if it had disconnected: its outstanding
        messages go back to the queue (delivery count raised), a session
        selector goes, and its stream ends with ``Kicked``. Returns it as it
        was."""
        return self.kick_consumer_async(cid).result()
