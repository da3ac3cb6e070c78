"""What is held: the waiting messages that consumers, leased Takes and
backoffs keep invisible to everyone else.

A held message stays in its queue's unprocessed section; only this table,
in memory, says it is held and by whom: a ``Consumer`` (delivered, not yet
acked), a ``Lease`` (taken with a lease) or a ``Backoff`` (nacked, waiting a
moment before it is routed again). Searches, pulls, Reads and the expiry
sweep skip held seqs. If the server dies, the table dies with it and the
messages are simply waiting again: at-least-once, with nothing written per
delivery. How a held message comes back is ``holders.py``'s.

Writer thread only; every change is undone with its batch.
"""

from __future__ import annotations

from functools import partial

from msgboard.engine.selectors import Consumer
from msgboard.engine.writer import Batch
from msgboard.message import Message


class Holds:
    """Queue -> held seq -> its holder (a Consumer, Lease or Backoff)."""

    def __init__(self) -> None:
        self._held: dict[str, dict[int, object]] = {}

    def held(self, queue: str) -> dict[int, object]:
        """The queue's held seqs (do not change it)."""
        return self._held.get(queue) or {}

    def outstanding(self, queue: str) -> int:
        """How many of the queue's messages are held."""
        return len(self._held.get(queue) or ())

    def counts(self) -> dict[str, int]:
        """Queue -> held messages, for the queues that hold any."""
        return {q: len(held) for q, held in self._held.items() if held}

    def hold(self, b: Batch, queue: str, seq: int, owner: object) -> None:
        """Holds the queue's message ``seq`` for ``owner``."""
        held = self._held.setdefault(queue, {})
        old = held.get(seq)
        held[seq] = owner
        b.undo(lambda: held.__setitem__(seq, old) if old is not None else held.pop(seq, None))

    def unhold(self, b: Batch, queue: str, seq: int) -> None:
        """The queue's message ``seq`` is held no more (if it was)."""
        held = self._held.get(queue)
        if held is not None and seq in held:
            old = held.pop(seq)
            b.undo(lambda: held.__setitem__(seq, old))

    def deliver(self, b: Batch, queue: str, seq: int, c: Consumer) -> None:
        """Holds a message delivered to ``c``. A message held already (by a
        backoff) is held with an undo of its own; otherwise the undo of
        ``c``'s deliveries in the group drops it (``undeliver``)."""
        held = self._held.setdefault(queue, {})
        if seq in held:
            self.hold(b, queue, seq, c)
        else:
            held[seq] = c

    def undeliver(self, queue: str, c: Consumer, msgs: list[Message]) -> None:
        """Drops what ``c`` holds of ``msgs`` (undoing its deliveries)."""
        held = self._held.get(queue)
        if held:
            for m in msgs:
                if held.get(m.seq) is c:
                    del held[m.seq]

    def finish(self, b: Batch, queue: str, msgs: list[Message]) -> None:
        """Drops the holds of ``msgs``, processed: one undo for all of them."""
        held = self._held.get(queue)
        if held:
            gone = [(m.seq, held.pop(m.seq)) for m in msgs if m.seq in held]
            if gone:
                b.undo(partial(held.update, gone))

    def drop_queue(self, b: Batch, queue: str) -> None:
        """Forgets a deleted queue's holds."""
        held = self._held.pop(queue, None)
        if held is not None:
            b.undo(lambda: self._held.__setitem__(queue, held))
