"""What each RPC needs, and whether a user has it.

``RPCS`` is the one table: every method of ``msgboard.v1.Board`` -> the verb
it needs and the queues it needs it on, read from the request. The verbs:

- ``read``: Take, Read, Browse, Subscribe, Ack; see the queue and its
  selectors (GetQueue, GetSelector, the listings).
- ``write``: Post and PostStream to the queue.
- ``manage``: create and delete the queue and the selectors whose source it
  is; purge it, delete its waiting messages, give back its leased ones;
  move messages out of it and into it (MoveMessages needs manage on both;
  the dead-letter resubmit, with no destination, on each message's origin,
  checked by the engine through ``manages``); list its leases (whose ids
  would let a reader ack them). A selector also needs
  ``read`` on its source and ``write`` on its destination (across a link:
  on ``LINK:QUEUE``, the link's name and the queue on the linked board); a
  queue created with a dead-letter queue needs ``write`` on that queue. A
  BOUNCE selector writes to whatever queue each message's ``reply_to``
  names, so it needs ``admin``.
- ``admin``: Snapshot, Stats of the whole board, ListConsumers and
  KickConsumer, DropDamaged, ListLeases of every queue, the links
  (CreateLink, ListLinks, DeleteLink: they hold credentials for other
  boards), and anything on any queue.

ListQueues and ListSelectors (and GetQueue, GetSelector) show only what the
caller may read or manage. ``msgboard.security.guard`` applies the table before any
servicer runs; tests walk it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from msgboard.engine.events import SYS
from msgboard.errors import PermissionDenied
from msgboard.security.auth import User
from msgboard.v1 import board_pb2 as pb

READ, WRITE, MANAGE, ADMIN = "read", "write", "manage", "admin"
#: Stands for "the whole board" where a need names no queue.
BOARD = ""
SEE = (READ, MANAGE)


@dataclasses.dataclass(frozen=True, slots=True)
class SelectorRef:
    """A queue named by a selector id: the selector's source, which the
    guard looks up."""

    id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Need:
    """One of ``verbs`` on ``queue`` (BOARD: on the whole board)."""

    verbs: tuple[str, ...]
    queue: str | SelectorRef


def _n(verb: str | tuple[str, ...], queue: str | SelectorRef) -> Need:
    return Need(verb if isinstance(verb, tuple) else (verb,), queue)


def _create_queue(r: pb.CreateQueueRequest) -> list[Need]:
    needs = [_n(MANAGE, r.spec.name)]
    if r.spec.dead_letter:
        needs.append(_n(WRITE, r.spec.dead_letter))
    return needs


def _create_selector(r: pb.CreateSelectorRequest) -> list[Need]:
    s = r.spec
    if s.op == pb.OPERATION_BOUNCE:
        return [_n(ADMIN, BOARD)]
    if s.source_link:
        # A pull: the queue on the linked board, named as the CLI names it,
        # read; the local queue it fills, managed and written.
        remote = f"{s.source_link}:{s.source}"
        return [_n(READ, remote), _n(MANAGE, s.destination), _n(WRITE, s.destination)]
    needs = [_n(MANAGE, s.source), _n(READ, s.source)]
    if s.destination_link:
        # The queue on the linked board, named as the CLI names it.
        needs.append(_n(WRITE, f"{s.destination_link}:{s.destination}"))
    elif s.destination:
        needs.append(_n(WRITE, s.destination))
    return needs


def _move(r: pb.MoveMessagesRequest) -> list[Need]:
    needs = [_n(MANAGE, r.source)]
    if r.destination:
        needs.append(_n(MANAGE, r.destination))
    return needs


def _subscribe(r: pb.SubscribeRequest) -> list[Need]:
    if r.WhichOneof("kind") != "open":
        return []  # the servicer refuses it: the first request must open
    o = r.open
    return [_n(READ, SelectorRef(o.selector_id) if o.selector_id else o.queue)]


@dataclasses.dataclass(frozen=True, slots=True)
class Rpc:
    """One RPC: its verb (as documented), what a request needs, and, for a
    listing, how to keep only what the caller may see."""

    verb: str
    needs: Callable[[Any], list[Need]]
    #: Listings: the response without what the caller may not see.
    filter: Callable[[Any, Callable[[str], bool]], Any] | None = None


def _keep_queues(
    r: pb.ListQueuesResponse | bytes, sees: Callable[[str], bool]
) -> pb.ListQueuesResponse:
    if isinstance(r, bytes):  # serialized in pieces (msgboard/server/prebuilt.py)
        r = pb.ListQueuesResponse.FromString(r)
    kept = [q for q in r.queues if sees(q.spec.name)]
    del r.queues[:]
    r.queues.extend(kept)
    return r


def _keep_selectors(
    r: pb.ListSelectorsResponse, sees: Callable[[str], bool]
) -> pb.ListSelectorsResponse:
    kept = [
        s for s in r.selectors if sees(s.spec.destination if s.spec.source_link else s.spec.source)
    ]
    del r.selectors[:]
    r.selectors.extend(kept)
    return r


#: Every RPC of msgboard.v1.Board. For the streams, ``needs`` reads one
#: request: each PostStream batch, and Subscribe's first (``open``).
RPCS: dict[str, Rpc] = {
    "CreateQueue": Rpc(MANAGE, _create_queue),
    "GetQueue": Rpc(READ, lambda r: [_n(SEE, r.name)]),
    "ListQueues": Rpc(READ, lambda r: [], _keep_queues),
    "DeleteQueue": Rpc(MANAGE, lambda r: [_n(MANAGE, r.name)]),
    "Post": Rpc(WRITE, lambda r: [_n(WRITE, r.queue)]),
    "PostStream": Rpc(WRITE, lambda r: [_n(WRITE, r.queue)]),
    "Take": Rpc(READ, lambda r: [_n(READ, r.queue)]),
    "Read": Rpc(READ, lambda r: [_n(READ, r.queue)]),
    "Browse": Rpc(READ, lambda r: [_n(READ, r.queue)]),
    "Ack": Rpc(READ, lambda r: [_n(READ, r.queue)]),
    "Stats": Rpc(READ, lambda r: [_n(READ, r.queue) if r.queue else _n(ADMIN, BOARD)]),
    "CreateSelector": Rpc(MANAGE, _create_selector),
    "GetSelector": Rpc(READ, lambda r: [_n(SEE, SelectorRef(r.id))]),
    "ListSelectors": Rpc(READ, lambda r: [_n(SEE, r.queue)] if r.queue else [], _keep_selectors),
    "DeleteSelector": Rpc(MANAGE, lambda r: [_n(MANAGE, SelectorRef(r.id))]),
    "Subscribe": Rpc(READ, _subscribe),
    "Snapshot": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "ListConsumers": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "KickConsumer": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "DropDamaged": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "CreateLink": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "ListLinks": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "DeleteLink": Rpc(ADMIN, lambda r: [_n(ADMIN, BOARD)]),
    "PurgeQueue": Rpc(MANAGE, lambda r: [_n(MANAGE, r.queue)]),
    "MoveMessages": Rpc(MANAGE, _move),
    "DeleteMessages": Rpc(MANAGE, lambda r: [_n(MANAGE, r.queue)]),
    "ReleaseMessages": Rpc(MANAGE, lambda r: [_n(MANAGE, r.queue)]),
    "ListLeases": Rpc(MANAGE, lambda r: [_n(MANAGE, r.queue)] if r.queue else [_n(ADMIN, BOARD)]),
}

#: Whether the caller of the call in progress may ``verb`` on a queue,
#: left by the guard for what the table cannot name before the call runs
#: (the queues a dead-letter resubmit goes to); None on a board without
#: users, where everyone may do everything. A refusal is announced
#: (``user.denied``) by the guard's function.
permits: ContextVar[Callable[[str, str], bool] | None] = ContextVar(
    "msgboard_permits", default=None
)


def manages() -> Callable[[str], bool] | None:
    """Whether the caller may manage a queue (None: anyone may)."""
    p = permits.get()
    if p is None:
        return None
    return lambda queue: p(MANAGE, queue)


def allows(user: User, verb: str, queue: str) -> bool:
    """Whether ``user`` may ``verb`` on ``queue`` (BOARD: the whole board)."""
    if user.admin:
        return True
    if queue == SYS:
        return verb == READ  # the board's events: anyone reads, nobody writes
    if queue == BOARD:
        return False
    return any(verb in r.verbs and fnmatch.fnmatchcase(queue, r.queues) for r in user.rules)


def sees(user: User, queue: str) -> bool:
    """Whether ``user`` may see ``queue`` in listings (read or manage)."""
    return any(allows(user, v, queue) for v in SEE)


def check(user: User, verbs: tuple[str, ...], queue: str) -> None:
    """PermissionDenied naming user, verb and queue unless ``user`` has one
    of ``verbs`` on ``queue``."""
    if any(allows(user, v, queue) for v in verbs):
        return
    what = " or ".join(verbs)
    where = "the whole board" if queue == BOARD else f"queue {queue!r}"
    raise PermissionDenied(
        f"user {user.name!r} may not {what} {where}", user=user.name, verb=what, queue=queue
    )
