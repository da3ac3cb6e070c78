"""An operator's hands on waiting messages: purge a queue, move messages
to another queue, delete them, give back the ones leased.

The calls a console or the CLI makes, not the routing's own: each is one
operation (one group commit) that checks everything before it writes, so
a bad request changes nothing.

- **Move** (``move_messages``): waiting messages of one queue, chosen by
  seq or by pattern, leave it (into its history as ``moved``, as a MOVE
  selector's do) and are posted to the destination in seq order, with
  their envelope, body and idempotency key, their delivery count back at
  0, and two headers saying whence: ``x-moved-from`` (the source queue)
  and ``x-moved-seq`` (the seq they had there). All of them or none: the
  destination must have room for all under its ``max_unprocessed``
  (QueueFull otherwise; a move never overflows, drops or dead-letters).
  With no destination, each message goes back to the queue its
  ``x-dead-letter-queue`` header names: the dead-letter resubmit. A
  message whose key its destination holds already is refused when the
  holder is still waiting there (FailedPrecondition: two waiting messages
  would share a key); a key held by a message that has left (in history,
  or within ``dedup_window``) is taken over, since a move is a deliberate
  re-entry, not a retried post.
- **Delete** (``delete_messages``): waiting messages chosen the same way
  are removed, kept in no history (their keys start their window).
- **Purge** (``purge_queue``): every waiting message that is not held
  (and, with ``history``, the history) is removed. A purge of many
  messages runs ``PURGE_CHUNK`` per group commit, one after the other,
  so that the board keeps serving: messages posted after the call began
  are left, and a board that stops halfway has purged a part.
- **Release** (``release_messages``): leased messages (a Take with a
  lease) come back now, as if their lease had run out; ``list_leases``
  says which are leased.

A held message (delivered to a consumer and not acked, leased, backing
off after a nack) is not waiting: a seq naming one is refused, a pattern
skips it, a purge leaves it. Scheduled messages are not waiting either.
Each call is announced on ``$sys`` naming who made it (``by``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine import events as ev
from msgboard.engine.events import Events
from msgboard.engine.limits import Limits
from msgboard.engine.network import Network
from msgboard.engine.overflow import fresh
from msgboard.engine.selectors import Backoff, Lease
from msgboard.engine.writer import PENDING, Batch, Writer
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QueueFull,
    QueueNotFound,
    Unavailable,
)
from msgboard.lmdbstore import QueueInfo, Txn
from msgboard.message import Exit, ExitKind, Message, Section
from msgboard.results import LeaseView, Moved, Purged

#: Waiting messages (or history records) one purge step removes.
PURGE_CHUNK = 2_000
#: The header a dead letter names its origin queue by (``overflow.py``).
ORIGIN = "x-dead-letter-queue"
#: The headers a moved message says whence with.
MOVED_FROM = "x-moved-from"
MOVED_SEQ = "x-moved-seq"

#: How a purged or deleted message leaves: in no history, so never seen.
_PURGED = Exit(ExitKind.DROPPED, "purged")
_DELETED = Exit(ExitKind.DROPPED, "deleted")


@dataclasses.dataclass(frozen=True, slots=True)
class _Chosen:
    """The waiting messages a move or delete acts on, in seq order."""

    txn: Txn
    info: QueueInfo
    msgs: list[Message]


class Maintenance:
    """Purge, move, delete and release, for one board."""

    def __init__(self, limits: Limits, writer: Writer, net: Network, events: Events) -> None:
        self._limits = limits
        self._writer = writer
        self._net = net
        self._events = events

    # -- choosing ---------------------------------------------------------

    def _check_choice(
        self, seqs: Sequence[int], pattern: Pattern | None, limit: int, every: bool | None = None
    ) -> tuple[list[tuple[int, int]], int]:
        """The seqs, checked (positive, each once, at most the limit), as
        (place in the request, seq) in seq order; and the limit (0: the
        board's ``max_take``). ``every`` (a move's or delete's explicit
        ``all``; None for a release) must be given when neither seqs nor a
        pattern is, and not with them: a forgotten choice acts on nothing."""
        most = self._limits.max_take
        limit = self._limits.check_count(limit, most, "limit", most)
        if seqs and pattern is not None:
            raise InvalidArgument("pattern: give the seqs or a pattern, not both", field="pattern")
        if every is not None and every == bool(seqs or pattern is not None):
            raise InvalidArgument(
                "all: give all alone, not with seqs or a pattern"
                if every
                else "seqs: give the seqs, a pattern or all (the oldest waiting messages)",
                field="all" if every else "seqs",
            )
        out: list[tuple[int, int]] = []
        seen: set[int] = set()
        for i, seq in enumerate(seqs):
            if not isinstance(seq, int) or seq <= 0:
                raise InvalidArgument(f"seqs[{i}]: {seq!r} is not a seq", field=f"seqs[{i}]")
            if seq in seen:
                raise InvalidArgument(f"seqs[{i}]: seq {seq} is given twice", field=f"seqs[{i}]")
            seen.add(seq)
            out.append((i, seq))
        if len(out) > limit:
            raise InvalidArgument(
                f"seqs: at most {limit} in one call (got {len(out)})", field="seqs"
            )
        return sorted(out, key=lambda x: x[1]), limit

    def _choose(
        self,
        b: Batch,
        queue: str,
        seqs: list[tuple[int, int]],
        pattern: Pattern | None,
        limit: int,
    ) -> _Chosen:
        """Reads what a move or delete acts on: each of ``seqs``, which must
        be waiting (NotFound if it is not on the queue's waiting section,
        FailedPrecondition if it is held, scheduled or expired); or up to
        ``limit`` of the oldest waiting, unheld, unexpired messages matching
        ``pattern`` (all: every waiting message)."""
        txn, info = b.find(queue)
        held = self._net.holds.held(queue)
        msgs: list[Message] = []
        if seqs:
            for i, seq in seqs:
                where = f"seqs[{i}]"
                m = txn.fetch(queue, seq)
                if m is None or m.section is Section.HISTORY:
                    gone = "was processed" if m is not None else "is not on it"
                    raise NotFound(
                        f"{where}: queue {queue!r} has no waiting message {seq} (it {gone})",
                        field=where,
                    )
                if m.section is Section.SCHEDULED:
                    raise FailedPrecondition(
                        f"{where}: message {seq} of queue {queue!r} is scheduled, not waiting yet",
                        queue=queue,
                        seq=seq,
                    )
                if seq in held:
                    raise FailedPrecondition(
                        f"{where}: message {seq} of queue {queue!r} is held by "
                        f"{_holder(held[seq])}: not waiting",
                        queue=queue,
                        seq=seq,
                    )
                if m.expired(b.now):
                    raise FailedPrecondition(
                        f"{where}: message {seq} of queue {queue!r} has expired "
                        "(the expiry sweep dead-letters it)",
                        queue=queue,
                        seq=seq,
                    )
                msgs.append(m)
            return _Chosen(txn, info, msgs)
        pat = pattern or EVERYTHING
        start: int | None = None
        while len(msgs) < limit:
            with txn.find(queue, pat, start) as search:
                for m in search:
                    if m.seq in held or m.expired(b.now):
                        continue
                    msgs.append(m)
                    if len(msgs) >= limit:
                        break
            if len(msgs) >= limit or not search.next_seq:
                break
            start = search.next_seq  # its budget ran out: go on from there
        return _Chosen(txn, info, msgs)

    # -- move -------------------------------------------------------------

    def move_messages_async(
        self,
        source: str,
        destination: str = "",
        seqs: Sequence[int] = (),
        pattern: Pattern | None = None,
        limit: int = 0,
        *,
        every: bool = False,
        by: str = "",
        may: Callable[[str], bool] | None = None,
    ) -> Future[list[Moved]]:
        """Moves waiting messages of ``source`` to ``destination`` (""
        each to the queue its ``x-dead-letter-queue`` header names), all
        in one operation: those of ``seqs``, or up to ``limit`` (0: the
        board's ``max_take``) of the oldest matching ``pattern``, or with
        ``every`` of the oldest waiting (one of the three must be given).
        Returns where each went, in seq order.
        ``by`` names the caller in the ``$sys`` event; ``may``, if given,
        says whether the caller may move into a queue (PermissionDenied
        for a destination it refuses, checked before anything moves).
        Errors, with nothing moved: a bad name, both seqs and a pattern,
        a seq twice, too many (InvalidArgument); the source or a
        destination missing (QueueNotFound); a destination that is the
        source (InvalidArgument); a seq not waiting (NotFound, or
        FailedPrecondition if held, scheduled or expired); a message with
        no origin header to resubmit to, or whose key its destination's
        waiting messages hold (FailedPrecondition); a destination without
        room for all (QueueFull)."""
        self._limits.check_name(source, "source", write=True, verb="manage")
        if destination:
            self._limits.check_name(destination, "destination", write=True, verb="manage")
            if destination == source:
                raise InvalidArgument(
                    f"destination: {destination!r} is the source queue: a move goes elsewhere",
                    field="destination",
                )
        chosen, limit = self._check_choice(seqs, pattern, limit, every)

        def run(b: Batch) -> list[Moved]:
            c = self._choose(b, source, chosen, pattern, limit)
            plan = self._plan(b, source, destination, c.msgs, may, by)
            return self._move(b, source, destination, c, plan, by)

        return self._writer.submit(run)

    def _plan(
        self,
        b: Batch,
        source: str,
        destination: str,
        msgs: list[Message],
        may: Callable[[str], bool] | None,
        by: str,
    ) -> list[tuple[Message, str]]:
        """Where each message goes, checked before anything is written:
        every destination exists, is not the source, may be written by the
        caller, has room for what goes there, and holds none of their keys
        on a waiting message."""
        plan: list[tuple[Message, str]] = []
        for m in msgs:
            to = destination or m.headers.get(ORIGIN, "")
            if not to:
                raise FailedPrecondition(
                    f"message {m.seq} of queue {source!r} has no {ORIGIN} header "
                    "to resubmit to: name a destination",
                    queue=source,
                    seq=m.seq,
                )
            if to == source:
                raise InvalidArgument(
                    f"destination: message {m.seq} of queue {source!r} has the source queue "
                    f"{to!r} as its origin ({ORIGIN}): name a destination",
                    field="destination",
                )
            plan.append((m, to))
        going: dict[str, list[Message]] = {}
        for m, to in plan:
            going.setdefault(to, []).append(m)
        for to, ms in going.items():
            if not destination:  # a name read from a header, not the request
                try:
                    self._limits.check_name(to, ORIGIN, write=True, verb="manage")
                except (InvalidArgument, PermissionDenied) as e:
                    raise FailedPrecondition(
                        f"message {ms[0].seq} of queue {source!r}: {e}", queue=source, seq=ms[0].seq
                    ) from e
            if may is not None and not may(to):
                raise PermissionDenied(
                    f"user {by!r} may not manage queue {to!r} "
                    f"(where message {ms[0].seq} of queue {source!r} would go)",
                    user=by,
                    verb="manage",
                    queue=to,
                )
            found = b.lookup(to)
            if found is None:
                raise QueueNotFound(
                    to, f"queue {to!r} not found (where message {ms[0].seq} would go)"
                )
            txn, info = found
            most = info.spec.max_unprocessed
            if most:
                room = max(0, most - txn.counts(to).unprocessed)
                if room < len(ms):
                    raise QueueFull(
                        to,
                        f"queue {to!r} is full: max_unprocessed is {most}; "
                        f"{len(ms) - room} of the {len(ms)} message(s) moved there do not fit; "
                        "nothing was moved",
                    )
            keys: dict[str, int] = {}
            for m in ms:
                if not m.key:
                    continue
                if m.key in keys:
                    raise FailedPrecondition(
                        f"messages {keys[m.key]} and {m.seq} of queue {source!r} share the key "
                        f"{m.key!r}: queue {to!r} can hold only one of them"
                    )
                keys[m.key] = m.seq
                holder = txn.keyed(to, m.key, b.now)
                if holder:
                    there = txn.fetch(to, holder)
                    if there is not None and there.section is not Section.HISTORY:
                        state = "scheduled" if there.section is Section.SCHEDULED else "waiting"
                        raise FailedPrecondition(
                            f"message {m.seq} of queue {source!r}: its key {m.key!r} is held by "
                            f"message {holder} {state} on queue {to!r}",
                            queue=source,
                            seq=m.seq,
                        )
        return plan

    def _move(
        self,
        b: Batch,
        source: str,
        destination: str,
        c: _Chosen,
        plan: list[tuple[Message, str]],
        by: str,
    ) -> list[Moved]:
        net = self._net
        out: list[Moved] = []
        counts: dict[str, int] = {}
        for m, to in plan:
            at = net.landing(b, to)
            net.process(b, c.txn, c.info, m, Exit(ExitKind.MOVED, "admin", to, "", at))
            txn, info = b.find(to)
            headers = {**m.headers, MOVED_FROM: source, MOVED_SEQ: str(m.seq)}
            stored = txn.append(to, dataclasses.replace(fresh(m), headers=headers), b.now)
            b.stored += 1
            b.count(to, posted=1)
            net.arrive(b, txn, info, stored, 1)
            out.append(Moved(m.seq, to, stored.seq))
            counts[to] = counts.get(to, 0) + 1
        for to, n in counts.items() or [(destination, 0)]:
            self._events.emit(b, ev.MESSAGES_MOVED, source, to, n, by, about=source)
        net.pulls.settle(b)
        return out

    # -- delete -----------------------------------------------------------

    def delete_messages_async(
        self,
        queue: str,
        seqs: Sequence[int] = (),
        pattern: Pattern | None = None,
        limit: int = 0,
        *,
        every: bool = False,
        by: str = "",
    ) -> Future[list[int]]:
        """Deletes waiting messages of ``queue`` (kept in no history), all
        in one operation: those of ``seqs``, or up to ``limit`` (0: the
        board's ``max_take``) of the oldest matching ``pattern``, or with
        ``every`` of the oldest waiting. Returns their seqs, ascending.
        Errors, with nothing deleted, as ``move_messages``'s."""
        self._limits.check_name(queue, write=True, verb="manage")
        chosen, limit = self._check_choice(seqs, pattern, limit, every)

        def run(b: Batch) -> list[int]:
            c = self._choose(b, queue, chosen, pattern, limit)
            self._remove(b, c.txn, c.info, c.msgs, _DELETED)
            self._events.emit(b, ev.MESSAGES_DELETED, queue, len(c.msgs), by, about=queue)
            return [m.seq for m in c.msgs]

        return self._writer.submit(run)

    def _remove(self, b: Batch, txn: Txn, info: QueueInfo, msgs: list[Message], how: Exit) -> None:
        """Removes waiting messages, in no history; the queue has room again."""
        q = info.spec.name
        for m in msgs:
            txn.process(q, m.seq, b.now, 0, m, how)
        if msgs:
            self._net.pulls.drained(q)
            self._net.pulls.settle(b)
            b.count(q, left=len(msgs))

    # -- purge ------------------------------------------------------------

    def purge_queue_async(
        self, queue: str, history: bool = False, *, by: str = ""
    ) -> Future[Purged]:
        """Removes every waiting message of ``queue`` that no one holds
        (and, with ``history``, every history record), kept in no history,
        ``PURGE_CHUNK`` per operation: what was posted after the call
        began stays; a caller that cancels the future stops it after the
        step under way. Returns how many of each went."""
        self._limits.check_name(queue, write=True, verb="manage")
        fut: Future[Purged] = Future()

        def step(b: Batch, bound: int, start: int, old: int, done: Purged) -> object:
            if fut.cancelled():  # its caller gave up: it stops, saying what it did
                if done.purged or done.history:
                    emit(b, done)
                return PENDING
            txn, info = b.find(queue)
            if not bound:
                counts = txn.counts(queue)
                bound, old = counts.next_seq, counts.history if history else 0
            held = self._net.holds.held(queue)
            msgs, nxt = _waiting(txn, queue, start, bound, held)
            self._remove(b, txn, info, msgs, _PURGED)
            trimmed = 0
            room = PURGE_CHUNK - len(msgs)
            if not nxt and old and room:
                trimmed = txn.trim(queue, min(old, room), b.now)
                old = old - trimmed if trimmed else 0  # none left: done
            done = Purged(done.purged + len(msgs), done.history + trimmed)
            if nxt or old:
                resume = nxt or bound  # messages left: from the next; else history
                b.after(lambda: self._again(fut, step, bound, resume, old, done))
                return PENDING
            emit(b, done)
            return done

        def emit(b: Batch, done: Purged) -> None:
            self._events.emit(b, ev.QUEUE_PURGED, queue, done.purged, done.history, by, about=queue)

        return self._writer.submit(lambda b: step(b, 0, 1, 0, Purged(0, 0)), fut)

    def _again(self, fut: Future[Purged], step: Callable[..., object], *args: object) -> None:
        """Submits a purge's next step (after its last one is durable)."""
        try:
            self._writer.submit(lambda b: step(b, *args), fut)
        except Unavailable as e:  # the board closed halfway
            with contextlib.suppress(Exception):
                fut.set_exception(e)

    # -- release ----------------------------------------------------------

    def list_leases_async(self, queue: str = "") -> Future[list[LeaseView]]:
        """The messages taken with a lease and not yet acked (of ``queue``,
        or of every queue), oldest lease first: what ``release_messages``
        gives back. QueueNotFound for a queue that does not exist; the
        board's own queues are refused (Reserved) as every call managing
        them is."""
        if queue:
            self._limits.check_name(queue, write=True, verb="manage")

        def run(b: Batch) -> list[LeaseView]:
            if queue:
                b.find(queue)
            return [
                LeaseView(x.id, x.queue, x.message.seq, x.since, x.until)
                for x in self._net.holders.leases(queue)
            ]

        return self._writer.submit(run)

    def release_messages_async(
        self, queue: str, seqs: Sequence[int], *, by: str = ""
    ) -> Future[list[int]]:
        """Gives back leased messages of ``queue`` now, as if their leases
        had run out (their delivery count raised; past ``max_deliveries``
        dead-lettered): the lease's taker can no longer ack them. Returns
        their seqs. Errors, with nothing released: a seq given twice or
        none (InvalidArgument); a seq not leased (FailedPrecondition if a
        consumer holds it, NotFound otherwise); the board's own queues
        (Reserved)."""
        self._limits.check_name(queue, write=True, verb="manage")
        chosen, _ = self._check_choice(seqs, None, 0)
        if not chosen:
            raise InvalidArgument("seqs: at least one seq is needed")

        def run(b: Batch) -> list[int]:
            b.find(queue)
            held = self._net.holds.held(queue)
            leases: list[Lease] = []
            for i, seq in chosen:
                where = f"seqs[{i}]"
                owner = held.get(seq)
                if isinstance(owner, Lease):
                    leases.append(owner)
                elif owner is not None:
                    raise FailedPrecondition(
                        f"{where}: message {seq} of queue {queue!r} is held by "
                        f"{_holder(owner)}, not a lease: kick the consumer to give it back",
                        queue=queue,
                        seq=seq,
                    )
                else:
                    raise NotFound(
                        f"{where}: message {seq} of queue {queue!r} is not leased", field=where
                    )
            self._net.holders.ack_leases(b, queue, [x.id for x in leases], nack=True, lost=True)
            self._net.pulls.settle(b)
            self._events.emit(b, ev.MESSAGES_RELEASED, queue, len(leases), by, about=queue)
            return [x.message.seq for x in leases]

        return self._writer.submit(run)


def _waiting(
    txn: Txn, queue: str, start: int, bound: int, held: dict[int, object]
) -> tuple[list[Message], int]:
    """Up to ``PURGE_CHUNK`` unheld waiting messages of ``queue`` from seq
    ``start`` below ``bound``, read before anything is written (the store's
    rule), and the seq to go on from (0: none left)."""
    msgs: list[Message] = []
    with contextlib.closing(txn.scan(queue, Section.UNPROCESSED, start)) as rows:
        for m in rows:
            if m.seq >= bound:
                return msgs, 0
            if len(msgs) >= PURGE_CHUNK:
                return msgs, m.seq
            if m.seq not in held:
                msgs.append(m)
    return msgs, 0


def _holder(owner: object) -> str:
    """Who holds a message, in words."""
    if isinstance(owner, Lease):
        return f"lease {owner.id}"
    if isinstance(owner, Backoff):
        return "a nack's backoff"
    return f"consumer {getattr(owner, 'id', '?')}"
