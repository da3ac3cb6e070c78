"""The board: the embeddable engine, usable in-process with no gRPC.

::

    with Board("./data") as board:
        board.create_queue(QueueSpec("jobs"))
        board.post("jobs", [Message(tuple=("job", 1))])
        [msg] = board.take("jobs", Pattern(templates=(template("job", int),)))

Every call checks its arguments on the caller's thread, then hands an
operation to the single writer thread (``writer.py``), which runs it inside
the next group commit. ``x_async`` returns a ``concurrent.futures.Future``
answered once the operation is durable; ``x`` waits for it (``calls.py``
makes it from ``x_async``, whose docstring it shares). Never call the
waiting form from inside an operation.

Durable queues live in LMDB, transient ones in memory; a queue's name is
unique across both. Selectors, subscriptions and leases are routed by the
network (``network.py``); the board checks arguments and wires the calls.

``Board`` is the face of the engine. It keeps queues, posting and the
system queue ``$sys`` here, and composes the parts that serve its other
calls, each an object given what it needs:

- ``Taking`` (taking.py): take, read, leases, blocked calls;
- ``Subscriptions`` (subscriptions.py): selectors and subscriptions;
- ``Browsing`` (browsing.py): browse, stats, traffic, snapshots;
- ``Consumers`` (consumers.py): consumers listed and kicked;
- ``Maintenance`` (maintenance.py): purge, move, delete, release and the
  leases listed, an operator's hands on waiting messages;
- ``Teardown`` (teardown.py): what goes with a deleted queue, selector or
  consumer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial

from msgboard.associative import EVERYTHING
from msgboard.engine import events as ev
from msgboard.engine import views
from msgboard.engine.browsing import Browsing
from msgboard.engine.calls import served_by, waits
from msgboard.engine.consumers import Consumers
from msgboard.engine.dedup import KeySweep
from msgboard.engine.events import SYS, SYS_HISTORY, SYS_WAITING, Events
from msgboard.engine.federation import Pulls
from msgboard.engine.limits import Limits
from msgboard.engine.linked import Linked, hop_count, routed
from msgboard.engine.maintenance import Maintenance
from msgboard.engine.network import Network
from msgboard.engine.reads import Reads, Work
from msgboard.engine.releases import Releases
from msgboard.engine.selectors import Selector
from msgboard.engine.subscriptions import Subscriptions
from msgboard.engine.taking import Taking
from msgboard.engine.teardown import Teardown
from msgboard.engine.waiters import Waiters
from msgboard.engine.writer import Batch, Release, Writer
from msgboard.errors import InvalidArgument, QueueExists, QueueFull, Unavailable
from msgboard.lmdbstore import DurableStore, Log, MemoryStore, QueueInfo, Txn
from msgboard.lmdbstore.boardid import stable_id
from msgboard.message import TRIMMED, Message, Section
from msgboard.results import QueueView
from msgboard.spec import (
    HOPS,
    Disposition,
    Op,
    OverflowPolicy,
    QueueSpec,
    Receipt,
    differences,
)

#: The bytes a stored message's keys take, about: its record's and each
#: index entry's (one per tuple field). A post reserves disk for each
#: message's size (``message.size``) and its keys.
KEY_BYTES = 64


class Board:
    """One board over one data directory."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        limits: Limits | None = None,
        map_size: int = 256 * 1024 * 1024,
        init: bool = False,
        accept_rollback: bool = False,
        log: Log | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.path = os.fspath(path)
        self._durable = DurableStore(
            self.path,
            sync=sync,
            map_size=map_size,
            init=init,
            accept_rollback=accept_rollback,
            log=log,
        )
        self._memory = MemoryStore()
        self._waiters = Waiters()
        self._writer = writer = Writer(self._durable, self._memory, self._waiters)
        # The hook the engine announces its events through, posted on $sys.
        self.events = Events(writer, self._post_events)
        self._net = net = Network(writer, self._waiters, self.events)
        self._reads = Reads(self._durable)
        self._pulls = pulls = Pulls(self.events)
        self._teardown = Teardown(writer, net, self.events, self._waiters, pulls)
        self._taking = Taking(self.limits, writer, net, self._waiters, self._reads)
        self._linked = Linked(writer, self.events, net.table, pulls)
        self._subscriptions = Subscriptions(
            self.limits, writer, net, self.events, self._teardown, self._linked
        )
        self._browsing = Browsing(
            self.limits, writer, net, self._reads, self._waiters, self._durable, self._memory
        )
        self._consumers = Consumers(writer, net, self._teardown)
        self._maintenance = Maintenance(self.limits, writer, net, self.events)
        self._keys = KeySweep(writer)
        self._releases = Releases(writer, net.release, net.pulls.settle)
        #: Run first when the board closes (``before_close``).
        self._closing: list[Callable[[], object]] = []
        #: The id stored with the data (``board_id``), read or made by ``_load``.
        self._data_id = ""
        try:
            writer.submit(self._load).result()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def failure(self) -> BaseException | None:
        """Why the board stopped writing, if its writer thread died."""
        return self._writer.failure

    def on_failure(self, fn: Callable[[BaseException], object]) -> None:
        """Has ``fn`` called (on the writer thread) if the writer dies: from
        then on every call fails with Unavailable, and whoever serves the
        board must stop serving it."""
        self._writer.on_failure = fn

    # -- replication (msgboard.cluster drives it) ------------------------

    @property
    def log(self) -> Log | None:
        """The operation log's settings and position; None without one."""
        return self._durable.log

    def entries(self, start: int, budget: int = 4 << 20) -> list[bytes]:
        """The log's entries from index ``start`` on (about ``budget`` bytes
        at most); any thread."""
        return self._durable.entries(start, budget)

    def log_bounds(self) -> tuple[int, int]:
        """The log's (first, last) index as committed; any thread."""
        return self._durable.log_bounds()

    def hold_answers(self, gate: Callable[[Release], object]) -> None:
        """Has ``gate`` given each committed group's release: the group's
        answers and after-commit work wait until it calls it (writer.py)."""
        self._writer.gate = gate

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Runs ``fn`` on the writer thread before its next group."""
        self._writer.call_soon(fn)

    def before_close(self, fn: Callable[[], object]) -> None:
        """Has ``fn`` run when the board closes, before anything else (what
        runs beside the board and calls it: ``msgboard.links``)."""
        self._closing.append(fn)

    @property
    def board_id(self) -> str:
        """The id of the board's data (``meta/board_id``, layout.py): what
        the links key with, the same on every board of a cluster (a
        standby gets it with its seed or through the log). The first open
        stores the directory's ``board-id`` (``lmdbstore.boardid``), which
        stays this directory's own: the replication names a standby by it."""
        return self._data_id

    def close(self) -> None:
        """Finishes submitted work, answers blocked calls with nothing, ends
        the subscriptions and closes the stores."""
        closing, self._closing = self._closing, []
        for fn in closing:
            with contextlib.suppress(Exception):  # closing anyway
                fn()
        if not self._writer.closed:
            with contextlib.suppress(Exception):  # closing anyway
                self._writer.submit(self._end_all).result()
        self._writer.stop()
        self._reads.close()
        self._durable.close()
        self._memory.close()

    def _load(self, b: Batch) -> None:
        """Brings back the durable selectors (a read per selector, none per
        message); MOVEs pull what waits for them."""
        txn = b.txn(True)
        self._data_id = txn.board_id()
        if not self._data_id:  # a new board, or one from before: now, logged
            self._data_id = stable_id(self.path)
            txn.put_board_id(self._data_id)
        self._linked.load(b)
        for sid, stored in txn.selectors():
            if stored.source_link:  # a pull: no local source, never routed here
                if b.lookup(stored.destination) is None:
                    txn.delete_selector(sid)
                else:
                    self._pulls.load(sid, stored)
                continue
            spec = routed(sid, stored) if stored.crossing else stored
            dest = spec.destination
            if txn.queue(spec.source) is None or (dest and b.lookup(dest) is None):
                # Its destination was a transient queue, gone with the restart:
                # the selector goes too, as when a queue is deleted.
                txn.delete_selector(sid)
                continue
            s = Selector(sid, spec, durable=True, session=False, quota=spec.quota())
            if stored.crossing:
                s.shown = stored
            if spec.op is Op.COPY:
                s.cursor = txn.counts(spec.source).next_seq
            else:
                s.behind = True
            self._net.add(b, s)
        self._net.pulls.settle(b)
        self._net.expiry.catch_up(b, [info.spec.name for info in txn.queues()])
        self._keys.sweep(b)
        self._releases.start(b)
        self._open_sys(b)

    def _end_all(self, b: Batch) -> None:
        for s in list(self._net.table.selectors.values()):
            c = s.consumer
            if c is not None:
                self._net.holders.detach(b, c)
                b.after(partial(c.end, None))

    # -- queues ---------------------------------------------------------

    def create_queue_async(self, spec: QueueSpec) -> Future[QueueView]:
        """Creates a queue; the same spec again returns it (idempotent), another
        spec under the same name is QueueExists."""
        spec = self.limits.check_spec(spec)

        def run(b: Batch) -> QueueView:
            found = b.lookup(spec.name)
            if found is not None:
                txn, info = found
                if info.spec != spec:
                    raise QueueExists(
                        spec.name, f'queue "{spec.name}" exists with {differences(info.spec, spec)}'
                    )
                return self._view(txn, info)
            txn = b.txn(not spec.transient)
            txn.create_queue(spec, b.now)
            kind = "transient" if spec.transient else "durable"
            self.events.emit(b, ev.QUEUE_CREATED, spec.name, kind)
            return self._view(txn, QueueInfo(spec, b.now))

        return self._writer.submit(run)

    def get_queue_async(self, name: str) -> Future[QueueView]:
        """A queue's properties and counts."""
        self.limits.check_name(name, "name")
        return self._writer.submit(lambda b: self._view(*b.find(name)))

    def drop_damaged_async(
        self, queue: str, seq: int, after: bool = False
    ) -> Future[tuple[int, Section]]:
        """Drops a damaged record of ``queue`` without decoding it: at
        ``seq``, or (``after``) the first damaged one after the good record
        ``seq``; its counters follow. Any record of ``$damaged`` goes by
        seq. Returns the seq its key read and its section; NotFound if there
        is no damaged record there, FailedPrecondition if it passes its
        check (the store's ``drop``)."""
        self.limits.check_name(queue)

        def run(b: Batch) -> tuple[int, Section]:
            txn, _ = b.find(queue)
            return txn.drop(queue, seq, after, b.now)

        return self._writer.submit(run)

    def list_queues_async(self) -> Future[list[QueueView]]:
        """Every queue, by name (``$sys`` left out)."""
        fut: Future[list[QueueView]] = Future()

        def make() -> Work[list[QueueView]]:
            waiting = self._waiters.counts()
            transient = views.transient(self._memory, waiting)

            def work(view: Txn) -> list[QueueView]:
                return views.merged(views.views(view, waiting), transient)

            return work

        return self._writer.submit(lambda b: self._reads.later(b, fut, make), fut)

    def delete_queue_async(self, name: str) -> Future[None]:
        """Deletes a queue, its messages and the selectors reading it or
        writing to it; blocked calls and subscriptions on it get
        QueueNotFound."""
        self.limits.check_name(name, "name", write=True, verb="manage")

        def run(b: Batch) -> None:
            b.find(name)
            self._teardown.delete_queue(b, name)
            self._net.pulls.settle(b)

        return self._writer.submit(run)

    def _view(self, txn: Txn, info: QueueInfo) -> QueueView:
        return views.view(txn, info, self._waiters.count(info.spec.name))

    # -- posting --------------------------------------------------------

    def post_async(self, queue: str, messages: Sequence[Message]) -> Future[list[int]]:
        """Stores messages in order, in one transaction, routes them, and
        returns their seqs once durable. A message that finds the queue full
        and is not refused (drop-new, dead-letter, an overflow selector) is
        not stored on this queue: its seq is 0 (``post_receipts`` says what
        became of it); under drop-head it is stored and the oldest waiting
        message dropped for it. A message whose ``key`` the queue holds is
        not stored either: its seq is the holder's."""
        msgs, nbytes = self._check_post(queue, messages)
        return self._writer.submit(
            lambda b: [r.seq for r in self._post(b, queue, msgs, nbytes)], size=nbytes
        )

    def post_receipts_async(self, queue: str, messages: Sequence[Message]) -> Future[list[Receipt]]:
        """Like post, but answers each message's seq with what became of it:
        stored, overflowed (to an overflow selector's queue), dead-lettered,
        dropped, or a duplicate of the message holding its key (the seq
        is that message's)."""
        msgs, nbytes = self._check_post(queue, messages)
        return self._writer.submit(lambda b: self._post(b, queue, msgs, nbytes), size=nbytes)

    def _check_post(self, queue: str, messages: Sequence[Message]) -> tuple[list[Message], int]:
        self.limits.check_name(queue, write=True)
        if not messages:
            raise InvalidArgument("messages: at least one message is needed")
        if len(messages) > self.limits.max_batch:
            raise InvalidArgument(f"messages: at most {self.limits.max_batch} in one post")
        check = self.limits.check_message
        msgs = []
        total = 0  # what the post writes, about: each message and its keys
        for i, m in enumerate(messages):
            m, n = check(m, f"messages[{i}]")
            msgs.append(m)
            total += n + KEY_BYTES * (1 + len(m.tuple))
        return msgs, total

    def _post(self, b: Batch, queue: str, msgs: list[Message], nbytes: int) -> list[Receipt]:
        txn, info = b.find(queue)
        txn.admit(nbytes)  # a full disk refuses posts first, keeping room for the rest
        spec = info.spec
        net = self._net
        limit = spec.max_unprocessed
        n = len(msgs)
        if limit and spec.overflow is OverflowPolicy.REJECT and not net.table.has_overflow(queue):
            # All or nothing, counted as if none of it were routed away; a
            # duplicate or a scheduled message takes no room (so a retried
            # post is answered DUPLICATE, not QueueFull).
            n = self._waiting(b, txn, queue, msgs)
            room = max(0, limit - txn.counts(queue).unprocessed)
            if room < n:
                b.count(queue, overflowed=n)
                raise QueueFull(
                    queue,
                    f"queue {queue!r} is full: max_unprocessed is {limit}; "
                    f"{n - room} of {n} message(s) do not fit",
                )
        out = []
        arrive = net.arrive
        posted = duplicates = 0
        for m in msgs:
            if m.key:
                # A key the queue holds (posted before, or earlier in this
                # batch: the transaction sees its own appends).
                seq = txn.keyed(queue, m.key, b.now)
                if seq:
                    out.append(Receipt(seq, Disposition.DUPLICATE))
                    duplicates += 1
                    continue
            if m.not_before > b.now:
                # Stored now, seen at its time (``Releases``); not counted
                # against max_unprocessed until then.
                stored = txn.schedule(queue, m, b.now)
                out.append(Receipt(stored.seq, Disposition.STORED))
                posted += 1
                self._releases.add(m.not_before)
                continue
            if limit and txn.counts(queue).unprocessed >= limit:
                went = net.overflow.route(b, txn, info, m)
                if went is not Disposition.STORED:  # drop-head made room: stored
                    out.append(Receipt(0, went))
                    continue
            stored = txn.append(queue, m, b.now)
            out.append(Receipt(stored.seq, Disposition.STORED))
            posted += 1
            # A message from a linked board goes on at the hop count it had.
            hops = m.headers.get(HOPS) if m.headers else None
            arrive(b, txn, info, stored, hop_count(hops) if hops else 0)
        b.stored += posted
        if duplicates:
            b.count(queue, posted=posted, duplicates=duplicates)
        else:
            b.count(queue, posted=posted)
        net.pulls.settle(b)
        return out

    @staticmethod
    def _waiting(b: Batch, txn: Txn, queue: str, msgs: list[Message]) -> int:
        """How many of ``msgs`` a post would add to the waiting messages:
        not those whose key the queue holds (or an earlier one of the batch
        has), nor those scheduled ahead."""
        seen: set[str] = set()
        n = 0
        for m in msgs:
            if m.key:
                if m.key in seen or txn.keyed(queue, m.key, b.now):
                    continue
                seen.add(m.key)
            if m.not_before <= b.now:
                n += 1
        return n

    # -- the system queue -----------------------------------------------

    def _open_sys(self, b: Batch) -> None:
        """Creates ``$sys`` (in memory) and announces the start."""
        if b.lookup(SYS) is None:
            b.txn(False).create_queue(
                QueueSpec(SYS, transient=True, max_history=SYS_HISTORY), b.now
            )
        self.events.emit(b, ev.BOARD_STARTED)

    def _post_events(self, b: Batch, msgs: list[Message]) -> None:
        """Posts the events announced (``Events``) on ``$sys`` and moves the
        oldest past ``SYS_WAITING`` to its history."""
        found = b.lookup(SYS)
        if found is None:
            return
        self._post(b, SYS, msgs, 0)
        txn, info = found
        extra = txn.counts(SYS).unprocessed - SYS_WAITING
        if extra > 0:
            for m in self._oldest(txn, extra):
                self._net.process(b, txn, info, m, TRIMMED)

    def _oldest(self, txn: Txn, n: int) -> list[Message]:
        """Up to ``n`` of the oldest waiting events no consumer holds, read
        (and the search closed) before any is processed."""
        held = self._net.holds.held(SYS)
        out: list[Message] = []
        with txn.find(SYS, EVERYTHING) as search:
            for m in search:
                if len(out) >= n:
                    break
                if m.seq not in held:
                    out.append(m)
        return out

    def emit(self, name: str, *fields: ev.Field) -> None:
        """Announces an event from outside the engine (any thread): the
        server's ``user.denied``."""
        with contextlib.suppress(Unavailable):
            self._writer.submit(lambda b: self.events.emit(b, name, *fields))

    # -- the calls its parts serve ----------------------------------------

    take_async = served_by("_taking", Taking.take_async)
    take_leased_async = served_by("_taking", Taking.take_leased_async)
    ack_leases_async = served_by("_taking", Taking.ack_leases_async)
    read_async = served_by("_taking", Taking.read_async)
    release = served_by("_taking", Taking.release)
    abandon = served_by("_taking", Taking.abandon)

    create_selector_async = served_by("_subscriptions", Subscriptions.create_selector_async)
    get_selector_async = served_by("_subscriptions", Subscriptions.get_selector_async)
    list_selectors_async = served_by("_subscriptions", Subscriptions.list_selectors_async)
    delete_selector_async = served_by("_subscriptions", Subscriptions.delete_selector_async)
    subscribe_async = served_by("_subscriptions", Subscriptions.subscribe_async)
    ack_async = served_by("_subscriptions", Subscriptions.ack_async)
    nack_async = served_by("_subscriptions", Subscriptions.nack_async)
    add_credit_async = served_by("_subscriptions", Subscriptions.add_credit_async)
    unsubscribe_async = served_by("_subscriptions", Subscriptions.unsubscribe_async)

    browse_async = served_by("_browsing", Browsing.browse_async)
    stats_async = served_by("_browsing", Browsing.stats_async)
    traffic_async = served_by("_browsing", Browsing.traffic_async)
    on_commit = served_by("_browsing", Browsing.on_commit)
    snapshot_async = served_by("_browsing", Browsing.snapshot_async)

    create_link_async = served_by("_linked", Linked.create_link_async)
    delete_link_async = served_by("_linked", Linked.delete_link_async)
    list_links_async = served_by("_linked", Linked.list_links_async)

    list_consumers_async = served_by("_consumers", Consumers.list_consumers_async)
    kick_consumer_async = served_by("_consumers", Consumers.kick_consumer_async)

    purge_queue_async = served_by("_maintenance", Maintenance.purge_queue_async)
    move_messages_async = served_by("_maintenance", Maintenance.move_messages_async)
    delete_messages_async = served_by("_maintenance", Maintenance.delete_messages_async)
    release_messages_async = served_by("_maintenance", Maintenance.release_messages_async)
    list_leases_async = served_by("_maintenance", Maintenance.list_leases_async)

    # -- the waiting forms (calls.py) ---------------------------------------

    create_queue = waits(create_queue_async)
    get_queue = waits(get_queue_async)
    list_queues = waits(list_queues_async)
    delete_queue = waits(delete_queue_async)
    post = waits(post_async)
    post_receipts = waits(post_receipts_async)
    take = waits(take_async)
    take_leased = waits(take_leased_async)
    ack_leases = waits(ack_leases_async)
    read = waits(read_async)
    create_selector = waits(create_selector_async)
    get_selector = waits(get_selector_async)
    list_selectors = waits(list_selectors_async)
    delete_selector = waits(delete_selector_async)
    subscribe = waits(subscribe_async)
    ack = waits(ack_async)
    nack = waits(nack_async)
    add_credit = waits(add_credit_async)
    unsubscribe = waits(unsubscribe_async)
    browse = waits(browse_async)
    stats = waits(stats_async)
    snapshot = waits(snapshot_async)
    list_consumers = waits(list_consumers_async)
    kick_consumer = waits(kick_consumer_async)
    drop_damaged = waits(drop_damaged_async)
    create_link = waits(create_link_async)
    delete_link = waits(delete_link_async)
    list_links = waits(list_links_async)
    purge_queue = waits(purge_queue_async)
    move_messages = waits(move_messages_async)
    delete_messages = waits(delete_messages_async)
    release_messages = waits(release_messages_async)
    list_leases = waits(list_leases_async)
