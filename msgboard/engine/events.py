"""The board's own events, posted on its reserved system queue ``$sys``.

A board describes itself, as the Channel design's system messages do: its
queues, selectors and consumers coming and going, its dead letters, its
start and stop, and refused calls are posted on ``$sys`` as messages whose
tuple starts with the event's name and whose address is that name, so a
template (``["queue.created", "?str", "?str"]``) or a topic address
(``topic:queue.*``) picks them out. Every name and its fields:

==========================  ===============================================
event                       tuple after the name
==========================  ===============================================
``queue.created``           queue, "durable" or "transient"
``queue.deleted``           queue
``selector.created``        selector id, source, destination ("" terminal)
``selector.deleted``        selector id, source
``consumer.attached``       consumer id, queue, selector id, peer, identity
``consumer.detached``       consumer id, queue, selector id, reason
``message.dead_lettered``   queue, seq (0: never stored there), reason
``queue.purged``            queue, waiting purged, history purged, user
``messages.moved``          source, destination, how many, user
``messages.deleted``        queue, how many, user
``messages.released``       queue, how many, user
``board.started``           (none)
``board.stopping``          (none)
``user.denied``             user, what was refused
``cluster.promoted``        epoch (0: static roles)
``cluster.demoted``         epoch it led in, the primary it follows ("")
``standby.joined``          standby, its acknowledged log index
``standby.lost``            standby, its last acknowledged index, reason
``console.action``          user ("" on an open board), action, queue
==========================  ===============================================

The user of ``queue.purged`` and ``messages.*`` is who asked: the
identity a server authenticated ("" on an open board, or in-process).

The last four come from ``msgboard.cluster`` (a replicating board's), which
announces them through ``Board.emit``: ``cluster.*`` as the board's role
changes (``cluster/roleevents.py``), ``standby.*`` on a primary as its
standbys come, keep up, fall behind and go (``cluster/status.py``).
``console.action`` comes from the console (``msgboard.console``): what a
person did there and who (the action says what, e.g. "delete queue").

A subscription's session selector is not announced (its consumer is); an
event about ``$sys`` itself (a consumer of ``$sys``, a selector reading it)
is not posted, so that reading the events never makes more of them.

``$sys`` is transient: its events live in memory and are gone after a
restart. It keeps the newest ``SYS_WAITING`` events waiting and moves older
ones to its history, which keeps ``SYS_HISTORY``. Anyone may read it (Take,
Read, Browse, Subscribe: a COPY subscription leaves the events to others);
nobody may post to it, create, delete or dead-letter into it (``Reserved``).
ListQueues and the whole board's Stats leave it out; GetQueue and Stats of
``$sys`` show it.

How the engine emits: an operation calls ``Events.emit`` on the writer
thread. The events wait until the operation's group is durable (an aborted
group announces nothing) and are then posted by one operation of their own
in the next group, never inside the operation that caused them: posting is
routing, which must not run in the middle of another routing step, and the
writer never waits on itself. Posting to ``$sys`` emits nothing, so it
cannot recurse. Events are best effort: a board that dies loses the ones
not yet posted. The board opens ``$sys``, posts the events and keeps it
bounded (``Board``, board.py: "the system queue").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from msgboard.engine.writer import Batch, Writer
from msgboard.errors import Unavailable
from msgboard.message import Message

#: The board's system queue.
SYS = "$sys"
#: Events kept waiting on ``$sys``; older ones move to its history.
SYS_WAITING = 1000
#: Events kept in ``$sys``'s history.
SYS_HISTORY = 1000

QUEUE_CREATED = "queue.created"
QUEUE_DELETED = "queue.deleted"
SELECTOR_CREATED = "selector.created"
SELECTOR_DELETED = "selector.deleted"
CONSUMER_ATTACHED = "consumer.attached"
CONSUMER_DETACHED = "consumer.detached"
DEAD_LETTERED = "message.dead_lettered"
QUEUE_PURGED = "queue.purged"
MESSAGES_MOVED = "messages.moved"
MESSAGES_DELETED = "messages.deleted"
MESSAGES_RELEASED = "messages.released"
BOARD_STARTED = "board.started"
BOARD_STOPPING = "board.stopping"
USER_DENIED = "user.denied"
CLUSTER_PROMOTED = "cluster.promoted"
CLUSTER_DEMOTED = "cluster.demoted"
STANDBY_JOINED = "standby.joined"
STANDBY_LOST = "standby.lost"
CONSOLE_ACTION = "console.action"

#: Every event, in the order the module docstring lists them.
EVENTS = (
    QUEUE_CREATED,
    QUEUE_DELETED,
    SELECTOR_CREATED,
    SELECTOR_DELETED,
    CONSUMER_ATTACHED,
    CONSUMER_DETACHED,
    DEAD_LETTERED,
    QUEUE_PURGED,
    MESSAGES_MOVED,
    MESSAGES_DELETED,
    MESSAGES_RELEASED,
    BOARD_STARTED,
    BOARD_STOPPING,
    USER_DENIED,
    CLUSTER_PROMOTED,
    CLUSTER_DEMOTED,
    STANDBY_JOINED,
    STANDBY_LOST,
    CONSOLE_ACTION,
)

Field = str | int


def reserved(name: str) -> bool:
    """Whether ``name`` is the board's to use (it starts with ``$``)."""
    return name.startswith("$")


class Events:
    """The hook the engine emits through (writer thread only)."""

    def __init__(self, writer: Writer, post: Callable[[Batch, list[Message]], None]) -> None:
        self._writer = writer
        self._post = post
        self._pending: list[Message] = []

    def emit(self, b: Batch, name: str, *fields: Field, about: str = "") -> None:
        """Announces ``name`` with ``fields`` once ``b`` is durable; nothing
        when the event is ``about`` a reserved queue."""
        if reserved(about):
            return
        m = Message(tuple=(name, *fields), address=name)
        b.after(lambda: self._queue(m))

    def _queue(self, m: Message) -> None:
        first = not self._pending
        self._pending.append(m)
        if first:
            # One posting operation for everything announced until it runs.
            # A board closing posts nothing more.
            with contextlib.suppress(Unavailable):
                self._writer.submit(self._flush)

    def _flush(self, b: Batch) -> None:
        msgs, self._pending = self._pending, []
        self._post(b, msgs)
