"""Selectors and subscriptions: checking their specs on the caller's thread,
and wiring each call to the network (``network.py``) on the writer thread.
``Subscriptions`` is a part of the ``Board`` (board.py), which serves its
calls (``create_selector``, ``subscribe``, ``ack``, ...); it owns the
counter that names session selectors and consumers.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from msgboard.associative import EVERYTHING, Pattern
from msgboard.engine import events as ev
from msgboard.engine.events import Events
from msgboard.engine.federation import check_pull
from msgboard.engine.limits import Limits, check_delay, check_redelivery
from msgboard.engine.linked import Linked, check_crossing, outbox_spec, routed
from msgboard.engine.network import Network
from msgboard.engine.selectors import Consumer, Selector
from msgboard.engine.teardown import Teardown
from msgboard.engine.writer import Batch, Found, Writer
from msgboard.errors import FailedPrecondition, InvalidArgument, NotFound, QueueNotFound
from msgboard.results import Acked, SelectorView
from msgboard.spec import Delivery, Op, Position, Redelivery, Role, SelectorSpec


class Subscriptions:
    """The board's selectors and subscriptions."""

    def __init__(
        self,
        limits: Limits,
        writer: Writer,
        net: Network,
        events: Events,
        teardown: Teardown,
        linked: Linked,
    ) -> None:
        self._limits = limits
        self._linked = linked
        self._writer = writer
        self._net = net
        self._events = events
        self._teardown = teardown
        #: Numbers the session selectors ("sub-N") and consumers ("con-N").
        self._sessions = itertools.count(1)

    # -- selectors ------------------------------------------------------

    def create_selector_async(self, spec: SelectorSpec) -> Future[SelectorView]:
        """Creates a selector on an existing queue: QueueNotFound for a missing
        source or destination, FailedPrecondition for one that would close a
        cycle of queues. It is durable when its source queue is."""
        spec = self._check_selector(spec)
        if spec.source_link:
            return self._writer.submit(lambda b: self._create_pull(b, spec))

        def run(b: Batch) -> SelectorView:
            txn, info = self._find_source(b, spec)
            if spec.crossing:
                self._linked.require(spec.destination_link)
            txn_d = b.txn(True)
            durable = not info.spec.transient
            sid = f"sel-{txn_d.new_selector_id()}"
            if spec.crossing:
                box = outbox_spec(sid, spec, transient=not durable)
                b.txn(durable).create_queue(box, b.now)
                s = Selector(sid, routed(sid, spec), durable, False, spec.quota(), shown=spec)
                to = f"{spec.destination_link}:{spec.destination}"
            else:
                s = Selector(sid, spec, durable=durable, session=False, quota=spec.quota())
                to = spec.destination
            self._net.table.start(txn, s)
            if durable:
                txn_d.put_selector(sid, spec)
            self._net.add(b, s)
            self._net.pulls.settle(b)
            self._events.emit(b, ev.SELECTOR_CREATED, sid, spec.source, to, about=spec.source)
            return self._selector_view(s)

        return self._writer.submit(run)

    def _create_pull(self, b: Batch, spec: SelectorSpec) -> SelectorView:
        """A pull selector (``federation.py``): its link must exist, its
        destination queue too."""
        self._linked.require(spec.source_link, "spec.source_link")
        sid = f"sel-{b.txn(True).new_selector_id()}"
        return self._linked.pulls.create(b, sid, spec)

    def _check_selector(self, spec: SelectorSpec, where: str = "spec") -> SelectorSpec:
        if spec.source_link:
            return check_pull(self._limits, spec, where)
        self._limits.check_name(spec.source, f"{where}.source")
        if spec.crossing:
            check_crossing(spec, where)
            # The remote board's name rules are its own; a '$' name is never posted to.
            self._limits.check_name(spec.destination, f"{where}.destination", write=True)
            self._check_selector(dataclasses.replace(spec, destination_link=""), where)
            return spec
        if spec.destination:
            self._limits.check_name(spec.destination, f"{where}.destination", write=True)
            if spec.op in (Op.DELETE, Op.BOUNCE):
                raise InvalidArgument(
                    f"{where}.destination: a {spec.op.value} selector has no destination"
                )
        if spec.credit < 0:
            raise InvalidArgument(f"{where}.credit: must not be negative (got {spec.credit})")
        if spec.role is Role.OVERFLOW and not (
            spec.op is Op.DELETE or (spec.op is Op.MOVE and spec.destination)
        ):
            raise InvalidArgument(f"{where}.role: an overflow selector moves to a queue or deletes")
        if spec.start is Position.SEQ and spec.start_seq < 1:
            raise InvalidArgument(f"{where}.start_seq: must be 1 or more")
        return spec

    def _find_source(self, b: Batch, spec: SelectorSpec, subscribing: bool = False) -> Found:
        found = b.lookup(spec.source)
        if found is None:
            q = spec.source
            if subscribing:
                raise QueueNotFound(q, f'cannot subscribe to queue "{q}": it does not exist')
            raise QueueNotFound(q, f'the selector\'s source queue "{q}" does not exist')
        dest = spec.destination
        if dest and not spec.crossing:
            if b.lookup(dest) is None:
                raise QueueNotFound(
                    dest, f'the selector\'s destination queue "{dest}" does not exist'
                )
            if self._net.table.reaches(dest, spec.source):
                raise FailedPrecondition(
                    f"a selector from {spec.source!r} to {dest!r} would close a cycle: "
                    f"messages already flow from {dest!r} back to {spec.source!r}"
                )
        return found

    def get_selector_async(self, sid: str) -> Future[SelectorView]:
        """A selector and its figures; NotFound if there is none."""

        def run(b: Batch) -> SelectorView:
            pull = self._linked.pulls.by_id.get(sid)
            return pull.view() if pull is not None else self._selector_view(self._selector(sid))

        return self._writer.submit(run)

    def list_selectors_async(self, queue: str = "") -> Future[list[SelectorView]]:
        """The selectors of one queue, or of every queue (by source queue,
        then in creation order)."""
        if queue:
            self._limits.check_name(queue)

        def run(b: Batch) -> list[SelectorView]:
            if queue:
                b.find(queue)
            sels = [s for s in self._net.table.selectors.values() if not queue or s.source == queue]
            sels.sort(key=lambda s: s.source)
            views = [self._selector_view(s) for s in sels]
            if not queue:  # a pull reads no queue here: listed with all of them
                views += [p.view() for p in self._linked.pulls.by_id.values()]
            return views

        return self._writer.submit(run)

    def delete_selector_async(self, sid: str) -> Future[None]:
        """Deletes a selector; what it had delivered and not seen acked goes
        back to the source queue; an auto_delete source queue left without
        selectors deletes itself."""

        def run(b: Batch) -> None:
            if sid in self._linked.pulls.by_id:
                self._linked.pulls.delete(b, sid)
                return
            self._teardown.delete_selector(b, self._selector(sid))
            self._net.pulls.settle(b)

        return self._writer.submit(run)

    def _selector(self, sid: str) -> Selector:
        s = self._net.table.selectors.get(sid)
        if s is None:
            raise NotFound(f"no selector {sid!r}")
        return s

    @staticmethod
    def _selector_view(s: Selector) -> SelectorView:
        c = s.consumer
        return SelectorView(
            s.id,
            s.shown or s.spec,
            s.durable,
            c is not None,
            0 if c is None else len(c.outstanding),
            s.delivered,
            s.dropped,
        )

    # -- subscriptions --------------------------------------------------

    def subscribe_async(
        self,
        queue: str = "",
        pattern: Pattern | None = None,
        *,
        deliver: Callable[[list[Delivery]], None],
        end: Callable[[BaseException | None], None],
        op: Op = Op.MOVE,
        credit: int = 0,
        unlimited_credit: bool = False,
        start: Position = Position.CURRENT,
        start_seq: int = 0,
        start_time: int = 0,
        selector_id: str = "",
        peer: str = "",
        identity: str = "",
        redelivery: Redelivery | None = None,
    ) -> Future[tuple[Consumer, SelectorView]]:
        """Attaches a consumer: a session selector on ``queue`` (MOVE or COPY),
        or the durable terminal selector ``selector_id``. ``deliver`` gets
        batches of deliveries and ``end`` the reason the board ended the
        subscription; both run on the writer thread and must only hand over.
        ``redelivery``: how its nacked or lost deliveries are delayed (None:
        as its queue's policy says)."""
        if redelivery is not None:
            check_redelivery(redelivery, "open.redelivery")
        if credit < 0:
            raise InvalidArgument(f"credit: must not be negative (got {credit})")
        if selector_id:
            if queue or pattern is not None or op is not Op.MOVE or start is not Position.CURRENT:
                raise InvalidArgument(
                    "selector_id: attaching to a selector takes no queue, pattern, op or start"
                )
            spec = None
        else:
            if op not in (Op.MOVE, Op.COPY):
                raise InvalidArgument(f"op: a subscription moves or copies, not {op.value}")
            spec = self._check_selector(
                SelectorSpec(
                    queue,
                    pattern or EVERYTHING,
                    op,
                    credit=credit,
                    unlimited_credit=unlimited_credit,
                    start=start,
                    start_seq=start_seq,
                    start_time=start_time,
                ),
                "subscription",
            )

        def run(b: Batch) -> tuple[Consumer, SelectorView]:
            if spec is None:
                s = self._selector(selector_id)
                if not s.spec.terminal:
                    raise FailedPrecondition(
                        f"selector {selector_id} delivers to queue {s.spec.destination!r}, "
                        "not to a consumer"
                    )
                if s.consumer is not None:
                    raise FailedPrecondition(f"selector {selector_id} already has a consumer")
                window = s.spec.window()
                if credit or unlimited_credit:
                    window = math.inf if unlimited_credit else credit
            else:
                txn, _ = self._find_source(b, spec, subscribing=True)
                s = Selector(f"sub-{next(self._sessions)}", spec, durable=False, session=True)
                self._net.table.start(txn, s)
                self._net.add(b, s)
                window = spec.window()
            lim = self._limits
            window = min(window, lim.max_credit)
            c = Consumer(s, window, deliver, end, lim.max_credit, lim.max_outstanding_bytes)
            c.id, c.since, c.peer, c.identity = f"con-{next(self._sessions)}", b.now, peer, identity
            c.redelivery = redelivery
            self._net.holders.attach(b, s, c)
            self._net.pulls.settle(b)
            self._events.emit(
                b, ev.CONSUMER_ATTACHED, c.id, s.source, s.id, peer, identity, about=s.source
            )
            return c, self._selector_view(s)

        return self._writer.submit(run)

    def ack_async(self, c: Consumer, ids: Sequence[int], up_to: int = 0) -> Future[Acked]:
        """Acks deliveries (and every outstanding one up to ``up_to``; an
        ``up_to`` past the last delivery covers every one so far), once
        durable: acks are per delivery, so it applies every id it can and
        returns those (``Acked.ids``) and, one by one, the ones it could not:
        never delivered, already acked or given back (``Acked.rejected``)."""

        def run(b: Batch) -> Acked:
            self._live(c)
            acked = self._net.holders.ack(b, c, list(ids), up_to)
            self._net.pulls.settle(b)
            return acked

        return self._writer.submit(run)

    def nack_async(
        self, c: Consumer, ids: Sequence[int], reject: bool = False, delay: int | None = None
    ) -> Future[list[int]]:
        """Gives deliveries back for redelivery after a backoff (``delay``
        µs, or the redelivery policy's next step), or dead-letters them
        (``reject``)."""
        if delay is not None:
            check_delay(delay, "nack.delay")

        def run(b: Batch) -> list[int]:
            self._live(c)
            done = self._net.holders.nack(b, c, list(ids), reject, delay)
            self._net.pulls.settle(b)
            return done

        return self._writer.submit(run)

    def add_credit_async(self, c: Consumer, n: int) -> Future[None]:
        """Widens the consumer's window by ``n`` deliveries (up to the
        board's ``max_credit``)."""
        if n < 0:
            raise InvalidArgument(f"credit: must not be negative (got {n})")

        def run(b: Batch) -> None:
            self._live(c)
            b.set(c, "window", min(c.window + n, c.max_credit))
            self._net.pulls.wake(c.selector)
            self._net.pulls.settle(b)

        return self._writer.submit(run)

    def unsubscribe_async(self, c: Consumer) -> Future[None]:
        """Detaches a consumer: its outstanding messages go back to their
        queue at once (delivery count raised); a session selector goes."""

        def run(b: Batch) -> None:
            if not c.closed:
                self._teardown.end_consumer(b, c, "closed")

        return self._writer.submit(run)

    @staticmethod
    def _live(c: Consumer) -> None:
        if c.closed:
            raise FailedPrecondition("the subscription has ended")
