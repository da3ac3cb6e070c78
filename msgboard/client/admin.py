"""The Python client's administrative calls: queues, selectors, consumers,
an operator's hands on waiting messages (purge, move, delete, release),
board figures and snapshots. ``Admin`` is a base of ``msgboard.client.Client``
(which provides the connection); use them through a ``Client``::

    with Client("127.0.0.1:7878") as c:
        c.create_queue("jobs", max_history=1000)
        c.create_selector("jobs", to="jobs.done", address="topic:done.#")
        print(c.stats("jobs"))
        c.move_messages("jobs.dlq")  # each dead letter back to its origin
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import TypeVar

from msgboard import codec
from msgboard.associative import AddressPattern, Pattern
from msgboard.client.failover import Calls
from msgboard.client.patterns import Templates, make_pattern, start_position
from msgboard.client.wire import consumer_view, mapped, selector_view
from msgboard.errors import InvalidArgument
from msgboard.results import (
    BoardStats,
    ConsumerView,
    LeaseView,
    LinkView,
    Moved,
    Purged,
    QueueStats,
    QueueView,
    SelectorView,
    StoreInfo,
)
from msgboard.spec import (
    DEDUP_WINDOW,
    LinkSpec,
    Op,
    OverflowPolicy,
    Position,
    QueueSpec,
    Redelivery,
    Role,
    SelectorSpec,
    UnmatchedPolicy,
)
from msgboard.v1 import board_pb2 as pb

P = TypeVar("P", bound=enum.Enum)

#: QueueStats' fields, named as in the proto's QueueStats.
_QUEUE_STATS = [f.name for f in dataclasses.fields(QueueStats)]


def _choose(
    req: pb.MoveMessagesRequest | pb.DeleteMessagesRequest,
    templates: Templates,
    address: str | AddressPattern | None,
    filter: str,
    pattern: Pattern | None,
) -> None:
    """Sets the request's pattern, if any part of one is given."""
    if pattern is None and (templates is not None or address is not None or filter):
        pattern = make_pattern(templates, address, filter)
    if pattern is not None:
        codec.pattern_to_pb(pattern, req.pattern)


def _policy(kind: type[P], value: P | str, where: str) -> P:
    """A policy from its enum or its name; InvalidArgument listing the valid
    names, as the CLI's choices do."""
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(repr(p.value) for p in kind)
        raise InvalidArgument(f"{where}: {value!r} is not one of {names}") from None


def _view(q: pb.Queue) -> QueueView:
    return QueueView(
        codec.spec_from_pb(q.spec),
        codec.ts_to_us(q.created_at),
        q.unprocessed,
        q.history,
        q.next_seq,
        q.waiting,
        q.scheduled,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot the server wrote (its manifest is in the directory)."""

    path: str
    schema: str
    #: µs since the epoch, UTC.
    taken_at: int
    bytes: int
    messages: int
    queues: int


def _pem(path: str, what: str) -> str:
    """The text of PEM file ``path`` ("" for none)."""
    if not path:
        return ""
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{what}: cannot read {path}: {e}") from None


class Admin:
    """Queues, selectors, consumers, stats and snapshots, over the calls
    (which follow the primary) and the default call timeout of the
    ``Client`` that inherits it."""

    _calls: Calls
    timeout: float | None

    # -- queues ---------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        transient: bool = False,
        max_unprocessed: int = 0,
        overflow: OverflowPolicy | str = OverflowPolicy.REJECT,
        max_history: int = 0,
        dead_letter: str = "",
        unmatched: UnmatchedPolicy | str = UnmatchedPolicy.HOLD,
        auto_delete: bool = False,
        max_deliveries: int = 0,
        dedup_window: float | None = None,
        redelivery: Redelivery | None = None,
    ) -> QueueView:
        """Creates a queue (idempotent for the same properties).
        ``dedup_window``: seconds a message's idempotency key is held after
        the message has left the queue (None: 2 minutes; 0: only while it
        is on the board). ``redelivery``: how messages given back (nacked,
        their consumer gone, their lease run out) are delayed before they
        are delivered again (``Redelivery(initial, multiplier, most)``, µs)."""
        window = DEDUP_WINDOW if dedup_window is None else round(dedup_window * 1_000_000)
        if dedup_window and not window:
            raise InvalidArgument(
                f"dedup_window: {dedup_window} s is under 1 µs, the window's unit; "
                "0 is no window (a key is held only while its message is on the board)"
            )
        spec = QueueSpec(
            name,
            transient,
            max_unprocessed,
            _policy(OverflowPolicy, overflow, "overflow"),
            max_history,
            dead_letter,
            _policy(UnmatchedPolicy, unmatched, "unmatched"),
            auto_delete,
            max_deliveries,
            window,
            redelivery,
        )
        with mapped():
            q = self._calls.CreateQueue(
                pb.CreateQueueRequest(spec=codec.spec_to_pb(spec)), timeout=self.timeout
            )
        return _view(q)

    def get_queue(self, name: str) -> QueueView:
        with mapped():
            return _view(self._calls.GetQueue(pb.GetQueueRequest(name=name), timeout=self.timeout))

    def list_queues(self) -> list[QueueView]:
        with mapped():
            r = self._calls.ListQueues(pb.ListQueuesRequest(), timeout=self.timeout)
        return [_view(q) for q in r.queues]

    def delete_queue(self, name: str) -> None:
        with mapped():
            self._calls.DeleteQueue(pb.DeleteQueueRequest(name=name), timeout=self.timeout)

    def stats(self, queue: str = "") -> BoardStats:
        with mapped():
            r = self._calls.Stats(pb.StatsRequest(queue=queue), timeout=self.timeout)
        return BoardStats(
            StoreInfo(True, r.sync, r.map_size, r.map_used, r.commits),
            r.commits,
            r.committed_ops,
            [QueueStats(*(getattr(q, f) for f in _QUEUE_STATS)) for q in r.queues],
            r.board_id,
        )

    # -- selectors ------------------------------------------------------

    def create_selector(
        self,
        source: str,
        *,
        op: Op | str = Op.MOVE,
        to: str = "",
        templates: Templates = None,
        address: str | AddressPattern | None = None,
        pattern: Pattern | None = None,
        filter: str = "",
        credit: int = 0,
        unlimited_credit: bool = False,
        start: Position | str | int = Position.CURRENT,
        start_time: int = 0,
        role: Role | str = Role.NORMAL,
        link: str = "",
        source_link: str = "",
        translator: str = "",
    ) -> SelectorView:
        """Creates a selector on ``source``: MOVE (default), COPY, DELETE or
        BOUNCE, to queue ``to`` or, with none, terminal (attach with
        ``subscribe(selector=...)``). ``start``: a Position, its name, or a
        seq. ``link``: ``to`` is a queue on the board of that link (push
        across a link); ``source_link``: ``source`` is a queue on the board
        of that link and ``to`` the queue here it fills (a pull);
        ``translator``: a selector crossing a link, its translator
        (docs/links.md)."""
        position, seq = start_position(start)
        spec = SelectorSpec(
            source,
            pattern or make_pattern(templates, address, filter),
            Op(op),
            to,
            credit,
            unlimited_credit,
            position,
            seq,
            start_time,
            Role(role),
            destination_link=link,
            source_link=source_link,
            translator=translator,
        )
        req = pb.CreateSelectorRequest(spec=codec.selector_spec_to_pb(spec))
        with mapped():
            return selector_view(self._calls.CreateSelector(req, timeout=self.timeout))

    def get_selector(self, sid: str) -> SelectorView:
        with mapped():
            r = self._calls.GetSelector(pb.GetSelectorRequest(id=sid), timeout=self.timeout)
        return selector_view(r)

    def list_selectors(self, queue: str = "") -> list[SelectorView]:
        with mapped():
            r = self._calls.ListSelectors(
                pb.ListSelectorsRequest(queue=queue), timeout=self.timeout
            )
        return [selector_view(p) for p in r.selectors]

    def delete_selector(self, sid: str) -> None:
        with mapped():
            self._calls.DeleteSelector(pb.DeleteSelectorRequest(id=sid), timeout=self.timeout)

    # -- links to other boards ---------------------------------------------

    def create_link(
        self,
        name: str,
        server: str,
        *,
        token: str = "",
        tls_ca: str = "",
        tls_cert: str = "",
        tls_key: str = "",
        tls: bool = False,
    ) -> LinkView:
        """Creates link ``name`` from the board to the board at ``server``
        ("host:port", or several separated by ','), showing ``token`` there;
        ``tls_ca``, ``tls_cert``, ``tls_key``: files (read here, kept by the
        board) as the Client's own options take them."""
        spec = LinkSpec(
            name,
            server,
            token,
            _pem(tls_ca, "tls_ca"),
            _pem(tls_cert, "tls_cert"),
            _pem(tls_key, "tls_key"),
            tls,
        )
        req = pb.CreateLinkRequest(spec=codec.link_spec_to_pb(spec))
        with mapped():
            return codec.link_from_pb(self._calls.CreateLink(req, timeout=self.timeout))

    def list_links(self) -> list[LinkView]:
        """The board's links, by name, with their state and figures."""
        with mapped():
            r = self._calls.ListLinks(pb.ListLinksRequest(), timeout=self.timeout)
        return [codec.link_from_pb(p) for p in r.links]

    def delete_link(self, name: str) -> None:
        with mapped():
            self._calls.DeleteLink(pb.DeleteLinkRequest(name=name), timeout=self.timeout)

    # -- consumers --------------------------------------------------------

    def list_consumers(self, queue: str = "") -> list[ConsumerView]:
        """Who is connected: the consumers of ``queue`` (or of every queue),
        oldest first. Needs the admin verb."""
        with mapped():
            r = self._calls.ListConsumers(
                pb.ListConsumersRequest(queue=queue), timeout=self.timeout
            )
        return [consumer_view(p) for p in r.consumers]

    def kick_consumer(self, cid: str) -> ConsumerView:
        """Ends consumer ``cid`` as if it had disconnected (its outstanding
        messages go back); returns it as it was. Needs the admin verb."""
        with mapped():
            r = self._calls.KickConsumer(pb.KickConsumerRequest(id=cid), timeout=self.timeout)
        return consumer_view(r.consumer)

    def drop_damaged(self, queue: str, seq: int, *, after: bool = False) -> int:
        """Drops the damaged record of ``queue`` at ``seq`` (``after``: the
        first damaged one after the good record ``seq``, as a DATA_LOSS log
        line names it) without decoding it; returns the seq its key read.
        Needs the admin verb."""
        req = pb.DropDamagedRequest(queue=queue, seq=seq, after=after)
        with mapped():
            r = self._calls.DropDamaged(req, timeout=self.timeout)
        return int(r.seq)

    # -- waiting messages -------------------------------------------------

    def purge_queue(self, queue: str, *, history: bool = False) -> Purged:
        """Removes every waiting message of ``queue`` that no consumer or
        lease holds (and, with ``history``, its history); returns how many
        of each. Needs manage on the queue."""
        req = pb.PurgeQueueRequest(queue=queue, history=history)
        with mapped():
            r = self._calls.PurgeQueue(req, timeout=self.timeout)
        return Purged(r.purged, r.history_purged)

    def move_messages(
        self,
        source: str,
        to: str = "",
        *,
        seqs: Sequence[int] = (),
        templates: Templates = None,
        address: str | AddressPattern | None = None,
        filter: str = "",
        pattern: Pattern | None = None,
        limit: int = 0,
        all: bool = False,
    ) -> list[Moved]:
        """Moves waiting messages of ``source`` to queue ``to`` (none: each
        back to the queue its ``x-dead-letter-queue`` header names), all or
        none: those of ``seqs``, or up to ``limit`` of the oldest matching
        the pattern, or with ``all=True`` up to ``limit`` of the oldest
        waiting (one of the three is needed: InvalidArgument otherwise).
        Returns where each went. Needs manage on the source and on each
        destination."""
        req = pb.MoveMessagesRequest(source=source, destination=to, seqs=seqs, limit=limit, all=all)
        _choose(req, templates, address, filter, pattern)
        with mapped():
            r = self._calls.MoveMessages(req, timeout=self.timeout)
        return [Moved(m.seq, m.queue, m.new_seq) for m in r.messages]

    def delete_messages(
        self,
        queue: str,
        *,
        seqs: Sequence[int] = (),
        templates: Templates = None,
        address: str | AddressPattern | None = None,
        filter: str = "",
        pattern: Pattern | None = None,
        limit: int = 0,
        all: bool = False,
    ) -> list[int]:
        """Deletes waiting messages of ``queue``, chosen as ``move_messages``
        chooses them (seqs, a pattern or ``all``), all or none; returns their
        seqs. Needs manage."""
        req = pb.DeleteMessagesRequest(queue=queue, seqs=seqs, limit=limit, all=all)
        _choose(req, templates, address, filter, pattern)
        with mapped():
            r = self._calls.DeleteMessages(req, timeout=self.timeout)
        return list(r.seqs)

    def release_messages(self, queue: str, seqs: Sequence[int]) -> list[int]:
        """Gives back leased messages of ``queue`` now, by seq, as if their
        leases had run out; returns their seqs. Needs manage."""
        req = pb.ReleaseMessagesRequest(queue=queue, seqs=seqs)
        with mapped():
            r = self._calls.ReleaseMessages(req, timeout=self.timeout)
        return list(r.seqs)

    def list_leases(self, queue: str = "") -> list[LeaseView]:
        """The messages taken with a lease and not yet acked, of ``queue``
        (manage) or of every queue (admin), oldest lease first."""
        with mapped():
            r = self._calls.ListLeases(pb.ListLeasesRequest(queue=queue), timeout=self.timeout)
        return [
            LeaseView(x.id, x.queue, x.seq, codec.ts_to_us(x.since), codec.ts_to_us(x.until))
            for x in r.leases
        ]

    # -- snapshots ------------------------------------------------------

    def snapshot(self, path: str, *, timeout: float | None = None) -> Snapshot:
        """Has the server write a snapshot to ``path``: a name under the
        server's snapshot directory, or (an open board without one) an
        absolute path on the server's file system; waits for it as long as ``timeout`` (None: as
        long as the copy takes)."""
        with mapped():
            r = self._calls.Snapshot(pb.SnapshotRequest(path=path), timeout=timeout)
        return Snapshot(r.path, r.schema, codec.ts_to_us(r.taken_at), r.bytes, r.messages, r.queues)
