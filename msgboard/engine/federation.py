"""Pull selectors: a local queue fed from a queue on a linked board
(federation; ``SelectorSpec.source_link``).

The engine keeps a pull selector's spec (in ``selectors`` like any other,
durable when its destination queue is), lists it, deletes it with its
destination queue, its link's refusal to go while it exists
(``Linked.crossing``), and never routes it: no local queue is its source.
Bringing the messages across is ``msgboard.links``'s ``Puller``, which
posts them to the destination as any poster would (keyed, so that a resend
is a DUPLICATE) and only then takes them from the remote queue.

Writer thread only, inside the board's operations.
"""

from __future__ import annotations

import dataclasses
import re

from msgboard.engine import events as ev
from msgboard.engine.events import Events
from msgboard.engine.limits import Limits
from msgboard.engine.writer import Batch
from msgboard.errors import InvalidArgument, QueueNotFound
from msgboard.results import SelectorView
from msgboard.spec import Op, Position, Role, SelectorSpec

_LINK = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_pull(limits: Limits, spec: SelectorSpec, where: str = "spec") -> SelectorSpec:
    """``spec``, a pull selector's, or InvalidArgument naming its bad field."""
    if not _LINK.fullmatch(spec.source_link):
        raise InvalidArgument(f"{where}.source_link: {spec.source_link!r} is not a link name")
    if spec.destination_link:
        raise InvalidArgument(
            f"{where}.destination_link: a selector pulls from one link or pushes to one, not both"
        )
    limits.check_name(spec.source, f"{where}.source")
    if not spec.destination:
        raise InvalidArgument(f"{where}.destination: the local queue the pull fills is needed")
    limits.check_name(spec.destination, f"{where}.destination", write=True)
    if spec.op is not Op.MOVE:
        raise InvalidArgument(
            f"{where}.op: a pull moves (it takes from the remote queue), not {spec.op.value}"
        )
    if spec.role is not Role.NORMAL:
        raise InvalidArgument(f"{where}.role: a pull has the normal role")
    if spec.start is not Position.CURRENT:
        raise InvalidArgument(
            f"{where}.start: a pull starts at the remote queue's oldest waiting message"
        )
    if spec.credit or spec.unlimited_credit:
        raise InvalidArgument(
            f"{where}.quota: a pull has no quota; the local queue's room paces it"
        )
    return spec


@dataclasses.dataclass(frozen=True, slots=True)
class Pull:
    """A pull selector: its id, spec and whether it is kept across restarts."""

    id: str
    spec: SelectorSpec
    durable: bool

    def view(self) -> SelectorView:
        return SelectorView(self.id, self.spec, self.durable, False, 0, 0, 0)


class Pulls:
    """The board's pull selectors, by id (writer thread)."""

    def __init__(self, events: Events) -> None:
        self._events = events
        self.by_id: dict[str, Pull] = {}

    def load(self, sid: str, spec: SelectorSpec) -> None:
        """A stored pull selector, at start."""
        self.by_id[sid] = Pull(sid, spec, True)

    def create(self, b: Batch, sid: str, spec: SelectorSpec) -> SelectorView:
        """Makes pull selector ``sid`` (its link already found); QueueNotFound
        for a missing destination."""
        found = b.lookup(spec.destination)
        if found is None:
            q = spec.destination
            raise QueueNotFound(q, f'the pull\'s destination queue "{q}" does not exist')
        durable = not found[1].spec.transient
        if durable:
            b.txn(True).put_selector(sid, spec)
        p = Pull(sid, spec, durable)
        self.by_id[sid] = p
        b.undo(lambda: self.by_id.pop(sid, None))
        src = f"{spec.source_link}:{spec.source}"
        self._events.emit(
            b, ev.SELECTOR_CREATED, sid, src, spec.destination, about=spec.destination
        )
        return p.view()

    def delete(self, b: Batch, sid: str) -> None:
        """Removes pull selector ``sid`` (it exists)."""
        p = self.by_id.pop(sid)
        b.undo(lambda: self.by_id.__setitem__(sid, p))
        if p.durable:
            b.txn(True).delete_selector(sid)
        src = f"{p.spec.source_link}:{p.spec.source}"
        self._events.emit(b, ev.SELECTOR_DELETED, sid, src, about=p.spec.destination)

    def into(self, queue: str) -> list[str]:
        """The pull selectors filling ``queue``."""
        return [p.id for p in self.by_id.values() if p.spec.destination == queue]

    def across(self, link: str) -> list[str]:
        """The pull selectors crossing ``link``."""
        return [p.id for p in self.by_id.values() if p.spec.source_link == link]
