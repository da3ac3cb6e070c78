"""Who is connected: the board's consumers, listed and kicked.

A consumer is a client attached through Subscribe to a terminal selector:
a session selector of its own, or a durable selector it attached to. Each
has an id (``con-N``, unique while the board runs), and the server tells the
board what it knows of the client (its address and user). ``Consumers`` is
a part of the ``Board`` (board.py), which serves its calls
(``list_consumers``, ``kick_consumer``).
"""

from __future__ import annotations

from concurrent.futures import Future
from functools import partial

from msgboard.engine.network import Network
from msgboard.engine.selectors import Consumer
from msgboard.engine.teardown import Teardown
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import Kicked, NotFound
from msgboard.results import ConsumerView


def consumer_view(c: Consumer) -> ConsumerView:
    s = c.selector
    return ConsumerView(
        c.id,
        c.peer,
        c.identity,
        s.source,
        s.id,
        s.spec.op.value,
        c.window,
        len(c.outstanding),
        c.next_id - 1,  # delivery ids count up from 1, one per delivery
        c.since,
        c.oldest(),
    )


class Consumers:
    """The board's consumers, listed and kicked."""

    def __init__(self, writer: Writer, net: Network, teardown: Teardown) -> None:
        self._writer = writer
        self._net = net
        self._teardown = teardown

    def _consumers(self) -> list[Consumer]:
        sels = self._net.table.selectors.values()
        return [s.consumer for s in sels if s.consumer is not None]

    def list_consumers_async(self, queue: str = "") -> Future[list[ConsumerView]]:
        """The consumers of one queue, or of every queue, oldest first."""

        def run(b: Batch) -> list[ConsumerView]:
            if queue:
                b.find(queue)
            found = [c for c in self._consumers() if not queue or c.selector.source == queue]
            return [consumer_view(c) for c in sorted(found, key=lambda c: c.since)]

        return self._writer.submit(run)

    def kick_consumer_async(self, cid: str) -> Future[ConsumerView]:
        """Ends a consumer as if it had disconnected: its outstanding
        messages go back to the queue (delivery count raised), a session
        selector goes, and its stream ends with ``Kicked``. Returns it as it
        was."""

        def run(b: Batch) -> ConsumerView:
            for c in self._consumers():
                if c.id == cid:
                    view = consumer_view(c)
                    self._teardown.end_consumer(b, c, "kicked")
                    why = Kicked(f"consumer {cid} was ended by an operator (KickConsumer)")
                    b.after(partial(c.end, why))
                    return view
            raise NotFound(f"no consumer {cid!r} (msgboard consumer list shows them)")

        return self._writer.submit(run)
