"""The store contract: where queues and messages live.

Two implementations keep the same contract: ``DurableStore`` (LMDB, in
``durable.py``) and ``MemoryStore`` (``memory.py``, for transient queues).
``tests/test_store.py`` holds the contract tests, written once and run on
both.

Every verb works inside a transaction::

    with store.begin() as txn:      # commits on success, aborts on error
        msg = txn.append("jobs", Message(tuple=("job", 1)), now=now_us())

Rules (from py-lmdb's documentation, and kept by the memory store too):

- One transaction at a time per store, and it stays on the thread that
  began it: the engine runs every transaction on its own single thread.
- Never keep an environment across ``fork()``.
- Do not write while iterating a ``scan``: collect first, then write.
- A transaction sees its own writes. Nothing is visible to a later
  transaction until commit; an aborted transaction leaves no trace, in the
  store or in its in-memory counters.
- The store assigns seqs: per queue, increasing from 1, never reused, also
  across restarts. ``posted_at`` never goes backwards within a queue.

Errors: ``MapFull`` when the LMDB map needs to grow mid-transaction (the
transaction is aborted; call ``grow()`` and run it again), ``StoreFull`` when
the disk refuses a write, ``StoreError`` for anything else the backend
raises. Contract violations by the caller (a queue that does not exist, a
seq that is not there) raise ``KeyError``: the engine checks first.

Indexes: each store files every unprocessed message under its index keys
(``msgboard.associative.keys``) in the transaction that appends, processes
or restores it, and drops a queue's keys with the queue, so ``find`` is
exact at every commit. History is not indexed.
"""

from __future__ import annotations

import abc
from collections.abc import Generator
from dataclasses import dataclass
from types import TracebackType

from msgboard.associative import Pattern
from msgboard.errors import NotFound, StoreError
from msgboard.lmdbstore.search import FIND_BUDGET, Search
from msgboard.message import Exit, Message, Section
from msgboard.results import StoreInfo
from msgboard.spec import LinkSpec, QueueSpec, SelectorSpec

__all__ = ["Counts", "MapFull", "QueueInfo", "Store", "StoreInfo", "Txn"]


class MapFull(StoreError):
    """The LMDB map is full: the transaction was aborted; grow and retry."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A stored queue: its properties and when it was created (µs)."""

    spec: QueueSpec
    created_at: int


@dataclass(frozen=True, slots=True)
class Counts:
    """How many messages a queue holds, and the seq its next one gets."""

    unprocessed: int
    history: int
    next_seq: int
    #: Posted with a not_before still to come (section SCHEDULED).
    scheduled: int = 0


class Txn(abc.ABC):
    """A transaction over one store. Use it through ``with``."""

    def __enter__(self) -> Txn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    @abc.abstractmethod
    def commit(self) -> None:
        """Makes every write durable (for LMDB: fsync, in the default mode).
        Raises StoreFull if the disk refuses, StoreError otherwise; either way
        the transaction is then aborted."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Discards every write of this transaction. Never raises."""

    def admit(self, size: int) -> None:
        """Raises StoreFull, before anything is written, if new data of
        about ``size`` bytes (a post) must be refused: the LMDB store keeps
        the last of the disk for what makes room (deletes, takes, acks).
        Nothing else calls it. The memory store admits everything."""
        return None

    # -- queues ---------------------------------------------------------

    @abc.abstractmethod
    def create_queue(self, spec: QueueSpec, created_at: int) -> None:
        """Stores a new, empty queue. KeyError if the name is taken."""

    @abc.abstractmethod
    def queue(self, name: str) -> QueueInfo | None:
        """The queue of that name, or None."""

    @abc.abstractmethod
    def queues(self) -> list[QueueInfo]:
        """Every queue, ordered by name. Costs one read per queue, never a
        read per message."""

    @abc.abstractmethod
    def delete_queue(self, name: str) -> bool:
        """Removes the queue and all its messages; False if there was none.
        A queue created later under the same name starts again at seq 1."""

    @abc.abstractmethod
    def counts(self, name: str) -> Counts:
        """The queue's counts, in O(1). KeyError if no such queue."""

    # -- messages -------------------------------------------------------

    @abc.abstractmethod
    def append(self, name: str, msg: Message, now: int) -> Message:
        """Adds ``msg`` to the end of the queue's unprocessed section and
        returns it as stored: ``queue``, the next ``seq``, ``posted_at`` (``now``,
        or the queue's previous posted_at if that is later), section
        UNPROCESSED; processed_at 0 and delivery_count as given."""

    @abc.abstractmethod
    def schedule(self, name: str, msg: Message, now: int) -> Message:
        """As ``append``, into the SCHEDULED section: kept, under the next
        seq, until ``release``; not seen by ``find``, nor by ``scan`` of
        UNPROCESSED, and filed under ``msg.not_before`` for ``due``."""

    @abc.abstractmethod
    def due(self, now: int, budget: int) -> tuple[list[tuple[str, int, int]], int]:
        """Up to ``budget`` scheduled messages due at ``now`` (µs), as
        (queue, seq, not_before), by time then seq, read from an index of
        their times (nothing else is read); and when the next one is due
        (``now`` if the budget ran out first, 0 if none is left)."""

    @abc.abstractmethod
    def next_due(self) -> int:
        """When the first scheduled message is due (µs); 0 if none is."""

    @abc.abstractmethod
    def release(self, name: str, seq: int, at: int) -> Message | None:
        """Moves a scheduled message (due at ``at``) to the unprocessed
        section under its seq and returns it there; None if it is not
        there any more (or its record is damaged: kept, never released)."""

    @abc.abstractmethod
    def fetch(self, name: str, seq: int) -> Message | None:
        """The message with that seq, from whichever section holds it."""

    @abc.abstractmethod
    def process(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message | None = None,
        how: Exit | None = None,
    ) -> Message:
        """Marks an unprocessed message processed and returns it with
        ``processed_at=now``, ``delivery_count`` one higher, section HISTORY
        and ``exit`` ``how`` (how it left; None: not recorded). It is kept in
        history, with ``how``, when ``max_history > 0``; then the
        oldest history beyond ``max_history`` messages is discarded. KeyError
        if the seq is not unprocessed. ``known``, when the caller has it, is
        the message as this store holds it (read in this transaction or
        since): the store may use it rather than read it again."""

    def finish(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message,
        how: Exit | None = None,
    ) -> None:
        """As ``process``, for a caller that does not use the processed
        message (an ack): a store may skip building it."""
        self.process(name, seq, now, max_history, known, how)

    @abc.abstractmethod
    def trim(self, name: str, n: int, now: int) -> int:
        """Drops the queue's ``n`` oldest history messages (a purge); the
        idempotency keys they held start their window at ``now``. Returns
        how many it dropped (fewer when history runs out). KeyError if no
        such queue."""

    def drop(
        self, name: str, seq: int, after: bool = False, now: int | None = None
    ) -> tuple[int, Section]:
        """Drops the damaged record at ``seq`` (``after``: the first damaged
        one after the good record ``seq``) without decoding it, from any
        section (a scheduled one with its ``due`` entry, a waiting one with
        its ``index`` entries), and returns the seq its key read and its
        section. The idempotency key it held ends as when a message leaves:
        at ``now`` (None: the clock's) plus the queue's ``dedup_window``.
        NotFound if there is none, FailedPrecondition if the record at
        ``seq`` passes its check. A memory store holds no damaged records."""
        raise NotFound(f"queue {name!r}: no damaged record (a transient queue)")

    @abc.abstractmethod
    def restore(self, name: str, msg: Message) -> None:
        """Puts a processed message back into the unprocessed section under
        its own seq (removing it from history if it is there), keeping its
        delivery_count: a taken message that never reached its taker."""

    @abc.abstractmethod
    def scan(
        self,
        name: str,
        section: Section | None = None,
        start: int | None = None,
        reverse: bool = False,
    ) -> Generator[Message, None, None]:
        """Yields the queue's messages in seq order (descending if
        ``reverse``), from seq ``start`` included (None: from the first in
        that direction), from one section or, with None, from both merged by
        seq. Lazy: the caller stops when it has enough. The generator may
        hold cursors of the transaction: a caller that may stop before its
        end closes it, on its own thread (``with closing(txn.scan(...))``)."""

    # -- idempotency keys -------------------------------------------------

    @abc.abstractmethod
    def keyed(self, name: str, key: str, now: int) -> int:
        """The seq of the message that holds idempotency ``key`` on the
        queue at ``now`` (µs), 0 if none: one lookup. A key is held from the
        append of its message (``append`` files ``msg.key``; a queue holds
        one message per key, the engine checks first) while the message is
        on the queue, and for the queue's ``dedup_window`` after it has
        left (processed with no history kept, or trimmed from history);
        ``restore`` holds it again. KeyError if no such queue."""

    @abc.abstractmethod
    def sweep_keys(self, now: int, budget: int) -> tuple[int, int]:
        """Forgets up to ``budget`` keys whose window ended at or before
        ``now``, reading only those; returns how many, and when the next
        one ends (``now`` if the budget ran out first, 0 if none)."""

    # -- selectors ------------------------------------------------------

    @abc.abstractmethod
    def new_selector_id(self) -> int:
        """A number never handed out before by this store (for LMDB: not even
        before a restart)."""

    @abc.abstractmethod
    def put_selector(self, sid: str, spec: SelectorSpec) -> None:
        """Stores a selector's spec under its id (the LMDB store keeps its
        protobuf bytes: ``selectors.py``)."""

    @abc.abstractmethod
    def delete_selector(self, sid: str) -> bool:
        """Removes a selector; False if there was none."""

    @abc.abstractmethod
    def selectors(self) -> list[tuple[str, SelectorSpec]]:
        """Every stored selector as (id, spec), in id order. DataFileDamaged
        if a stored spec does not parse."""

    # -- links to other boards ----------------------------------------------

    @abc.abstractmethod
    def put_link(self, spec: LinkSpec) -> None:
        """Stores a link's spec under its name (replacing one there)."""

    @abc.abstractmethod
    def delete_link(self, name: str) -> bool:
        """Removes a link; False if there was none."""

    @abc.abstractmethod
    def links(self) -> list[LinkSpec]:
        """Every stored link, by name. DataFileDamaged if a stored spec does
        not parse."""

    @abc.abstractmethod
    def board_id(self) -> str:
        """The id stored with the data (``meta/board_id``); empty if none."""

    @abc.abstractmethod
    def put_board_id(self, board_id: str) -> None:
        """Stores the id that goes with the data (``layout.BOARD_ID_KEY``)."""

    @abc.abstractmethod
    def find(
        self, name: str, pattern: Pattern, start: int | None = None, budget: int = FIND_BUDGET
    ) -> Search:
        """The queue's unprocessed messages that match ``pattern``, oldest
        first, from seq ``start`` included (None: from the first), found
        through the queue's index when a key is more selective than the whole
        section (see ``search.py``), else by a scan. Lazy, and bounded: it
        examines at most ``budget`` candidates, then ends with ``next_seq``
        set to the seq to resume from (0: nothing left). Do not write while
        iterating it; use it in a ``with`` block, on the thread that made
        it, so that its cursors are closed there when it is left before its
        end. KeyError if no such queue (at the call)."""

    @abc.abstractmethod
    def seq_at(self, name: str, time_us: int) -> int | None:
        """The seq of the first message (any section) posted at or after
        ``time_us``, found without reading every message; None if none."""


class Store(abc.ABC):
    """A store of queues and messages."""

    #: True for LMDB: survives a restart.
    durable: bool
    #: Commits whose durability waits for a later sync (``flush``): the
    #: commit of the last one not yet covered, 0 if none. The LMDB store
    #: in fsync mode leaves each commit's meta page to the next sync.
    unsynced = 0
    #: Syncs so far (each data sync of a commit, each ``flush``): a commit
    #: is durable once this count has moved past the one it left.
    syncs = 0

    def flush(self) -> None:  # noqa: B027 - a no-op unless commits wait for a sync
        """Makes every commit so far durable (one barrier); a no-op when
        ``unsynced`` is 0."""

    @abc.abstractmethod
    def begin(self, reserve: int = 0) -> Txn:
        """Begins the write transaction. ``reserve``: bytes the caller
        expects to write; the LMDB store grows its map first if they might
        not fit."""

    @abc.abstractmethod
    def grow(self) -> None:
        """Makes room after MapFull (LMDB doubles its map). Only between
        transactions."""

    @abc.abstractmethod
    def info(self) -> StoreInfo:
        """Figures for Stats."""

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the store; it cannot be used after."""

    def damaged(self, name: str) -> int:
        """How many damaged records of the queue were met (and skipped)
        since the store was opened. The memory store has none."""
        return 0
