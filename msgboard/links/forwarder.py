"""One crossing selector's forwarder: its outbox drained, oldest first, to
the queue on the linked board.

The engine moves (or copies) what the selector matches into the
selector's outbox, ``$link.`` + its id (``engine/linked.py``), in the same
group commit that takes it from the source queue. A forwarder, a thread of
its own, then loops:

1. waits until the remote board answers the link's probe and the remote
   queue has room (its credit: ``max_unprocessed`` less what waits there,
   read with GetQueue when the last figure is used up; ``WINDOW`` at a
   time when it has no limit, or when the link may not read it);
2. takes the oldest messages of the outbox with a lease (``take_leased``):
   they stay on this board, invisible to anyone else;
3. posts them to the remote queue, each keyed by its origin
   (``key_of``: this board's id, the outbox, the seq), in order;
4. acks the leases once the remote board answered: the messages leave
   this board only once they are durable there.

A failure at step 3 (the link down, the remote queue full, the link's
credentials refused) keeps the batch and sends it again, in the same
order, after a backoff; a crash anywhere leaves the messages in the outbox
(a lease dies with the process), and what is sent again is answered
DUPLICATE by the remote board, which holds the keys. So each message
arrives once, and per source queue in seq order. If a lease runs out while
the link is down, the ack is refused and the same messages are taken and
sent again, still first.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from msgboard.associative import EVERYTHING
from msgboard.engine import Board
from msgboard.errors import (
    InvalidArgument,
    MsgboardError,
    PermissionDenied,
    QueueFull,
    QueueNotFound,
    Unavailable,
)
from msgboard.links.link import BACKOFF, BACKOFF_MAX, Link
from msgboard.message import Message, size
from msgboard.spec import ORIGIN_BOARD, ORIGIN_KEY, Delivery, Disposition, SelectorSpec, outbox

log = logging.getLogger("msgboard.links")

#: Most messages taken and sent at once, and (about) most bytes in one post.
BATCH = 256
BATCH_BYTES = 4 << 20
#: Credit when the remote queue has no limit (or may not be read).
WINDOW = 256
#: Seconds a taken message stays invisible in the outbox.
LEASE = 300.0
#: Seconds a take waits for the outbox before looking at the link again.
WAIT = 1.0

#: Rewrites a message on its way across (the translator; identity if none).
Rewrite = Callable[[Message], Message]


def key_of(board_id: str, sid: str, seq: int) -> str:
    """The idempotency key a forwarded message carries: where it comes
    from (board, outbox queue, seq), the same for every resend."""
    return f"link:{board_id}:{outbox(sid)}:{seq}"


class Forwarder:
    """The forwarder of one crossing selector (a thread)."""

    def __init__(
        self,
        board: Board,
        link: Link,
        sid: str,
        spec: SelectorSpec,
        board_id: str,
        rewrite: Rewrite | None = None,
    ) -> None:
        self.board = board
        self.link = link
        self.sid = sid
        self.spec = spec
        self.outbox = outbox(sid)
        self._board_id = board_id
        self._rewrite = rewrite
        self._stop = threading.Event()
        #: The remote queue's room as last read, less what was sent since.
        self._room = 0.0
        self._thread = threading.Thread(target=self._run, name=f"forward-{sid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop --------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except (Unavailable, QueueNotFound):
            pass  # the board closes, or the selector (and its outbox) went
        except Exception:  # a forwarder must not die silently
            log.exception("link %s: the forwarder of %s failed", self.link.name, self.sid)
        finally:
            self.link.forget(self.sid)

    def _loop(self) -> None:
        batch: list[Delivery] = []
        delay = BACKOFF
        while not self._stop.is_set():
            if not batch:
                if not self.link.wait_reachable(WAIT):
                    continue
                credit = self._credit()
                if credit <= 0:
                    self._stop.wait(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
                    continue
                batch = self.board.take_leased(
                    self.outbox, EVERYTHING, WAIT, int(min(credit, BATCH)), lease=LEASE
                )
                if not batch:
                    continue
            if self._send(batch):
                self.board.ack_leases(self.outbox, [d.id for d in batch])
                batch = []
                delay = BACKOFF
            else:
                self._stop.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    def _credit(self) -> float:
        """The remote queue's room, read again once the last figure is used."""
        if self._room > 0:
            return self._room
        try:
            q = self.link.client.get_queue(self.spec.destination)
        except PermissionDenied:
            self._room = WINDOW  # may post, not read: the post says when it is full
            return self._room
        except MsgboardError as e:  # refused, no such queue, the link down
            self.link.refused(self.sid, e)
            return 0
        limit = q.spec.max_unprocessed
        self._room = float(max(0, limit - q.unprocessed)) if limit else WINDOW
        return self._room

    def _send(self, batch: list[Delivery]) -> bool:
        """Posts ``batch`` to the remote queue in order (in posts of about
        ``BATCH_BYTES``); True once the remote answered all of it."""
        msgs = [self._out(d.message) for d in batch]
        link = self.link
        link.sending(len(msgs))
        try:
            for part in parts(msgs):
                receipts = link.client.post_receipts(self.spec.destination, part)
                dup = sum(1 for r in receipts if r.disposition is Disposition.DUPLICATE)
                link.counted(len(receipts) - dup, dup)
                self._room -= len(receipts) - dup
        except QueueFull:
            self._room = 0  # it waits here until the remote queue has room
            return False
        except InvalidArgument as e:
            # The remote refuses this message (too large for it, ...): it
            # waits, and the reason is shown, rather than be dropped.
            link.refused(self.sid, e)
            return False
        except MsgboardError as e:
            link.refused(self.sid, e)
            return False
        finally:
            link.sending(-len(batch))
        link.accepted(self.sid)
        return True

    def _out(self, m: Message) -> Message:
        """The message as the remote board gets it: a new post keyed by its
        origin, its own key kept in a header, this board named."""
        headers = {**m.headers, ORIGIN_BOARD: self._board_id}
        if m.key:
            headers[ORIGIN_KEY] = m.key
        out = Message(
            tuple=m.tuple,
            address=m.address,
            priority=m.priority,
            headers=headers,
            reply_to=m.reply_to,
            expires_at=m.expires_at,
            content_type=m.content_type,
            body=m.body,
            key=key_of(self._board_id, self.sid, m.seq),
        )
        return self._rewrite(out) if self._rewrite is not None else out


def parts(msgs: list[Message]) -> list[list[Message]]:
    """``msgs`` cut into runs of about ``BATCH_BYTES`` (at least one each):
    what is posted at once (here by a pull, there by a forwarder)."""
    parts: list[list[Message]] = []
    run: list[Message] = []
    n = 0
    for m in msgs:
        b = size(m)
        if run and n + b > BATCH_BYTES:
            parts.append(run)
            run, n = [], 0
        run.append(m)
        n += b
    if run:
        parts.append(run)
    return parts
