"""The memory store: the store contract for transient queues, in process.

Each queue keeps its two sections as ``SortedDict`` (seq -> Message), a
sparse time index like the LMDB store's ``times`` (second -> first seq posted
in it), and the index of its unprocessed messages as the LMDB store's
``index`` holds it: a ``SortedDict`` of index key -> ``SortedList`` of seqs.
A transaction applies its writes at once and logs how to undo each;
``abort`` plays the log backwards and puts the queues' counters back, so an
aborted transaction leaves no trace; ``commit`` drops the log. Nothing
survives ``close`` or the process.

The LMDB store's rules hold here too: one transaction at a time, on the
thread that began it, and no writes while iterating a ``scan``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from operator import attrgetter
from typing import Any

from sortedcontainers import SortedDict, SortedList

from msgboard.associative import Pattern
from msgboard.associative.keys import message_keys
from msgboard.errors import StoreError
from msgboard.lmdbstore.search import FIND_BUDGET, Reader, Search
from msgboard.lmdbstore.store import Counts, QueueInfo, Store, StoreInfo, Txn
from msgboard.message import Exit, Message, Section, left, stamp
from msgboard.spec import LinkSpec, QueueSpec, SelectorSpec

_US = 1_000_000
_UNPROCESSED = Section.UNPROCESSED
_HISTORY = Section.HISTORY
_SCHEDULED = Section.SCHEDULED
_seq = attrgetter("seq")

#: One undo step: a function and its arguments.
_Undo = tuple[Callable[..., Any], tuple[Any, ...]]


class _Queue:
    __slots__ = (
        "history",
        "index",
        "info",
        "keys",
        "last_posted",
        "last_second",
        "next_seq",
        "scheduled",
        "times",
        "unprocessed",
    )

    def __init__(self, info: QueueInfo) -> None:
        self.info = info
        self.next_seq = 1
        self.last_posted = 0
        self.last_second = -1
        self.unprocessed: SortedDict = SortedDict()  # seq -> Message
        self.history: SortedDict = SortedDict()  # seq -> Message
        self.times: SortedDict = SortedDict()  # second -> first seq posted in it
        self.index: SortedDict = SortedDict()  # index key -> SortedList of seqs
        self.keys: dict[str, tuple[int, int]] = {}  # idempotency key -> (seq, until)
        self.scheduled: SortedDict = SortedDict()  # seq -> Message, not yet due

    def file(self, m: Message) -> None:
        """Files an unprocessed message under its index keys."""
        index, seq = self.index, m.seq
        for key in message_keys(m.address, m.tuple):
            seqs = index.get(key)
            if seqs is None:
                index[key] = SortedList((seq,))
            else:
                seqs.add(seq)

    def unfile(self, m: Message) -> None:
        """Removes a message from the index."""
        index, seq = self.index, m.seq
        for key in message_keys(m.address, m.tuple):
            seqs = index[key]
            seqs.remove(seq)
            if not seqs:
                del index[key]

    def first_from(self, seq: int) -> Message | None:
        """The first message (any section) at or after ``seq``."""
        best: Message | None = None
        for sd in (self.unprocessed, self.history, self.scheduled):
            i = sd.bisect_left(seq)
            if i < len(sd):
                m: Message = sd.peekitem(i)[1]
                if best is None or m.seq < best.seq:
                    best = m
        return best


class MemoryStore(Store):
    """Queues and messages in this process's memory."""

    durable = False

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}
        self._selectors: dict[str, SelectorSpec] = {}
        self._links: dict[str, LinkSpec] = {}
        self._next_sid = 1
        self._board_id = ""
        #: (until, queue, key): keys whose message has left, by when they end.
        self._keyends: SortedList = SortedList()
        #: (not_before, queue, seq): the scheduled messages, by when they are due.
        self._due: SortedList = SortedList()
        self._txn: MemoryTxn | None = None
        self._commits = 0
        self._closed = False

    def begin(self, reserve: int = 0) -> MemoryTxn:
        if self._closed:
            raise StoreError("the memory store is closed")
        if self._txn is not None:
            raise StoreError("a transaction is already open on this store")
        self._txn = MemoryTxn(self)
        return self._txn

    def grow(self) -> None:
        """Nothing to grow: memory has no map."""

    def info(self) -> StoreInfo:
        return StoreInfo(
            durable=False, sync="memory", map_size=0, map_used=0, commits=self._commits
        )

    def close(self) -> None:
        if self._txn is not None:
            self._txn.abort()
        self._closed = True
        self._queues.clear()


class MemoryTxn(Txn):
    """The transaction of a MemoryStore."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._queues = store._queues
        self._log: list[_Undo] = []
        #: Counters of the queues this transaction wrote, as they were.
        self._saved: dict[_Queue, tuple[int, int, int]] = {}
        self._done = False

    # -- ending -----------------------------------------------------------

    def commit(self) -> None:
        if self._done:
            return  # a `with` block ending after abort() commits nothing
        self._done = True
        self._store._txn = None
        if self._log:
            self._store._commits += 1
        self._log = []
        self._saved = {}

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._store._txn = None
        for fn, args in reversed(self._log):
            fn(*args)
        for q, (next_seq, last_posted, last_second) in self._saved.items():
            q.next_seq, q.last_posted, q.last_second = next_seq, last_posted, last_second
        self._log = []
        self._saved = {}

    # -- queues -----------------------------------------------------------

    def _get(self, name: str) -> _Queue:
        if self._done:
            raise StoreError("the transaction has ended")
        q = self._queues.get(name)
        if q is None:
            raise KeyError(f"no queue {name!r}")
        return q

    def _touch(self, name: str) -> _Queue:
        """The queue, its counters saved for abort."""
        q = self._get(name)
        if q not in self._saved:
            self._saved[q] = (q.next_seq, q.last_posted, q.last_second)
        return q

    def create_queue(self, spec: QueueSpec, created_at: int) -> None:
        if self._done:
            raise StoreError("the transaction has ended")
        if spec.name in self._queues:
            raise KeyError(f"queue {spec.name!r} exists")
        self._queues[spec.name] = _Queue(QueueInfo(spec, created_at))
        self._log.append((self._queues.__delitem__, (spec.name,)))

    def queue(self, name: str) -> QueueInfo | None:
        q = self._queues.get(name)
        return None if q is None else q.info

    def queues(self) -> list[QueueInfo]:
        return [self._queues[name].info for name in sorted(self._queues)]

    def delete_queue(self, name: str) -> bool:
        if self._done:
            raise StoreError("the transaction has ended")
        q = self._queues.pop(name, None)
        if q is None:
            return False
        # The queue object is left as it was, so undo just puts it back.
        self._log.append((self._queues.__setitem__, (name, q)))
        # Its due times and key ends go too: they are filed by name, and a
        # queue made again by that name starts its seqs at 1 again.
        store = self._store
        for index, gone in (
            (store._due, [(m.not_before, name, seq) for seq, m in q.scheduled.items()]),
            (store._keyends, [(e[1], name, k) for k, e in q.keys.items() if e[1]]),
        ):
            for entry in gone:
                if entry in index:
                    index.remove(entry)
                    self._log.append((index.add, (entry,)))
        return True

    def counts(self, name: str) -> Counts:
        q = self._get(name)
        return Counts(len(q.unprocessed), len(q.history), q.next_seq, len(q.scheduled))

    # -- messages ---------------------------------------------------------

    def append(self, name: str, msg: Message, now: int) -> Message:
        return self._add(name, msg, now, _UNPROCESSED)

    def schedule(self, name: str, msg: Message, now: int) -> Message:
        return self._add(name, msg, now, _SCHEDULED)

    def _add(self, name: str, msg: Message, now: int, section: Section) -> Message:
        q = self._touch(name)
        posted = now if now > q.last_posted else q.last_posted
        seq = q.next_seq
        m = stamp(msg, name, seq, posted, 0, msg.delivery_count, section)
        if section is _UNPROCESSED:
            q.unprocessed[seq] = m
            q.file(m)
            self._log.append((q.unprocessed.__delitem__, (seq,)))
            self._log.append((q.unfile, (m,)))
        else:
            q.scheduled[seq] = m
            entry = (m.not_before, name, seq)
            self._store._due.add(entry)
            self._log.append((q.scheduled.__delitem__, (seq,)))
            self._log.append((self._store._due.discard, (entry,)))
        if m.key:
            self._hold(name, q, m.key, seq)
        second = posted // _US
        if second != q.last_second:
            q.times[second] = seq
            self._log.append((q.times.__delitem__, (second,)))
            q.last_second = second
        q.next_seq = seq + 1
        q.last_posted = posted
        return m

    def due(self, now: int, budget: int) -> tuple[list[tuple[str, int, int]], int]:
        out: list[tuple[str, int, int]] = []
        for at, name, seq in self._store._due:
            if at > now:
                return out, at
            if len(out) >= budget:
                return out, now
            out.append((name, seq, at))
        return out, 0

    def next_due(self) -> int:
        due = self._store._due
        return int(due[0][0]) if due else 0

    def release(self, name: str, seq: int, at: int) -> Message | None:
        due = self._store._due
        entry = (at, name, seq)
        if entry in due:
            due.remove(entry)
            self._log.append((due.add, (entry,)))
        q = self._queues.get(name)
        old: Message | None = None if q is None else q.scheduled.pop(seq, None)
        if q is None or old is None:
            return None
        self._log.append((q.scheduled.__setitem__, (seq, old)))
        m = stamp(old, name, seq, old.posted_at, 0, old.delivery_count, _UNPROCESSED)
        q.unprocessed[seq] = m
        q.file(m)
        self._log.append((q.unprocessed.__delitem__, (seq,)))
        self._log.append((q.unfile, (m,)))
        return m

    def fetch(self, name: str, seq: int) -> Message | None:
        q = self._get(name)
        m: Message | None = q.unprocessed.get(seq)
        if m is None:
            m = q.history.get(seq)
        return q.scheduled.get(seq) if m is None else m

    def process(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message | None = None,
        how: Exit | None = None,
    ) -> Message:
        q = self._get(name)
        old: Message | None = q.unprocessed.pop(seq, None)
        if old is None:
            raise KeyError(f"{name!r} seq {seq} is not unprocessed")
        q.unfile(old)
        log = self._log
        log.append((q.unprocessed.__setitem__, (seq, old)))
        log.append((q.file, (old,)))
        m = stamp(old, name, seq, old.posted_at, now, old.delivery_count + 1, _HISTORY)
        if how is not None:
            left(m, how)
        if max_history > 0:
            history = q.history
            history[seq] = m
            log.append((history.__delitem__, (seq,)))
            while len(history) > max_history:
                gone = history.popitem(0)
                log.append((history.__setitem__, gone))
                if gone[1].key:
                    self._left(name, q, gone[1].key, gone[0], now)
        elif old.key:
            self._left(name, q, old.key, seq, now)
        return m

    def trim(self, name: str, n: int, now: int) -> int:
        q = self._get(name)
        history = q.history
        dropped = 0
        while dropped < n and history:
            gone = history.popitem(0)
            self._log.append((history.__setitem__, gone))
            if gone[1].key:
                self._left(name, q, gone[1].key, gone[0], now)
            dropped += 1
        return dropped

    # -- idempotency keys -------------------------------------------------

    def _set_key(self, q: _Queue, key: str, held: tuple[int, int] | None) -> None:
        """Sets (None: removes) the queue's entry for ``key``, and its end."""
        old = q.keys.pop(key, None)
        ends = self._store._keyends
        name = q.info.spec.name
        if old is not None and old[1]:
            ends.discard((old[1], name, key))
        if held is not None:
            q.keys[key] = held
            if held[1]:
                ends.add((held[1], name, key))
        self._log.append((self._put_back, (q, key, old)))

    def _put_back(self, q: _Queue, key: str, old: tuple[int, int] | None) -> None:
        now = q.keys.pop(key, None)
        ends, name = self._store._keyends, q.info.spec.name
        if now is not None and now[1]:
            ends.discard((now[1], name, key))
        if old is not None:
            q.keys[key] = old
            if old[1]:
                ends.add((old[1], name, key))

    def _hold(self, name: str, q: _Queue, key: str, seq: int) -> None:
        self._set_key(q, key, (seq, 0))

    def _left(self, name: str, q: _Queue, key: str, seq: int, now: int) -> None:
        held = q.keys.get(key)
        if held is None or held[0] != seq:
            return
        window = q.info.spec.dedup_window
        self._set_key(q, key, (seq, now + window) if window > 0 else None)

    def keyed(self, name: str, key: str, now: int) -> int:
        held = self._get(name).keys.get(key)
        if held is None:
            return 0
        seq, until = held
        return seq if until == 0 or until > now else 0

    def sweep_keys(self, now: int, budget: int) -> tuple[int, int]:
        ends = self._store._keyends
        dropped = 0
        while ends:
            until, name, key = ends[0]
            if until > now:
                return dropped, until
            if dropped >= budget:
                return dropped, now
            q = self._queues.get(name)
            if q is None or q.keys.get(key, (0, 0))[1] != until:
                ends.remove((until, name, key))  # its queue is gone
                self._log.append((ends.add, ((until, name, key),)))
            else:
                self._set_key(q, key, None)
            dropped += 1
        return dropped, 0

    def restore(self, name: str, msg: Message) -> None:
        q = self._get(name)
        seq = msg.seq
        if not 0 < seq < q.next_seq:
            raise KeyError(f"{name!r} has no seq {seq}")
        old = q.history.pop(seq, None)
        if old is not None:
            self._log.append((q.history.__setitem__, (seq, old)))
        old = q.unprocessed.get(seq)
        if old is not None:
            q.unfile(old)
            self._log.append((q.file, (old,)))
        m = stamp(msg, name, seq, msg.posted_at, 0, msg.delivery_count, _UNPROCESSED)
        q.unprocessed[seq] = m
        q.file(m)
        self._log.append((q.unfile, (m,)))
        if m.key:
            self._hold(name, q, m.key, seq)
        if old is None:
            self._log.append((q.unprocessed.__delitem__, (seq,)))
        else:
            self._log.append((q.unprocessed.__setitem__, (seq, old)))

    def scan(
        self,
        name: str,
        section: Section | None = None,
        start: int | None = None,
        reverse: bool = False,
    ) -> Generator[Message, None, None]:
        q = self._get(name)  # raises now, not at the first next()
        if section is _UNPROCESSED:
            return _walk(q.unprocessed, start, reverse)
        if section is _HISTORY:
            return _walk(q.history, start, reverse)
        if section is _SCHEDULED:
            return _walk(q.scheduled, start, reverse)
        every = (_walk(sd, start, reverse) for sd in (q.unprocessed, q.history, q.scheduled))
        return heapq.merge(*every, key=_seq, reverse=reverse)

    # -- selectors --------------------------------------------------------

    def new_selector_id(self) -> int:
        store = self._store
        sid = store._next_sid
        store._next_sid += 1
        self._log.append((setattr, (store, "_next_sid", sid)))
        return sid

    def put_selector(self, sid: str, spec: SelectorSpec) -> None:
        sels = self._store._selectors
        old = sels.get(sid)
        sels[sid] = spec
        if old is None:
            self._log.append((sels.pop, (sid, None)))
        else:
            self._log.append((sels.__setitem__, (sid, old)))

    def delete_selector(self, sid: str) -> bool:
        sels = self._store._selectors
        old = sels.pop(sid, None)
        if old is None:
            return False
        self._log.append((sels.__setitem__, (sid, old)))
        return True

    def selectors(self) -> list[tuple[str, SelectorSpec]]:
        return sorted(self._store._selectors.items())

    def put_link(self, spec: LinkSpec) -> None:
        links = self._store._links
        old = links.get(spec.name)
        links[spec.name] = spec
        if old is None:
            self._log.append((links.pop, (spec.name, None)))
        else:
            self._log.append((links.__setitem__, (spec.name, old)))

    def delete_link(self, name: str) -> bool:
        links = self._store._links
        old = links.pop(name, None)
        if old is None:
            return False
        self._log.append((links.__setitem__, (name, old)))
        return True

    def links(self) -> list[LinkSpec]:
        return [spec for _, spec in sorted(self._store._links.items())]

    def board_id(self) -> str:
        return self._store._board_id

    def put_board_id(self, board_id: str) -> None:
        self._log.append((setattr, (self._store, "_board_id", self._store._board_id)))
        self._store._board_id = board_id

    def find(
        self, name: str, pattern: Pattern, start: int | None = None, budget: int = FIND_BUDGET
    ) -> Search:
        return Search(_Reader(self._get(name)), pattern, start, budget)

    def seq_at(self, name: str, time_us: int) -> int | None:
        q = self._get(name)
        second = max(time_us, 0) // _US
        times = q.times
        i = times.bisect_left(second)
        if i == len(times):
            return None  # nothing was posted in that second or later
        at, lo = times.peekitem(i)
        hi = lo  # when at > second, lo is the first seq posted after it
        if at == second:
            hi = times.peekitem(i + 1)[1] if i + 1 < len(times) else q.next_seq
        # Binary search within [lo, hi]: posted_at rises with seq.
        while lo < hi:
            mid = (lo + hi) // 2
            found = q.first_from(mid)
            if found is None or found.posted_at >= time_us:
                hi = mid
            else:
                lo = found.seq + 1
        found = q.first_from(lo)
        return None if found is None else found.seq


def _walk(sd: SortedDict, start: int | None, reverse: bool) -> Generator[Message, None, None]:
    keys = sd.irange(maximum=start, reverse=True) if reverse else sd.irange(minimum=start)
    for seq in keys:
        m: Message = sd[seq]
        yield m


class _Reader(Reader):
    """One memory queue's unprocessed section and index, for ``Search``."""

    def __init__(self, q: _Queue) -> None:
        self._q = q
        self.unprocessed = len(q.unprocessed)

    def count(self, key: bytes) -> int:
        seqs = self._q.index.get(key)
        return 0 if seqs is None else len(seqs)

    def keys(self, prefix: bytes) -> Generator[tuple[bytes, int], None, None]:
        index = self._q.index
        for key in index.irange(minimum=prefix):
            if not key.startswith(prefix):
                return
            yield key, len(index[key])

    def seqs(self, key: bytes, start: int) -> Generator[int, None, None]:
        seqs = self._q.index.get(key)
        if seqs is not None:
            yield from seqs.irange(minimum=start)

    def get(self, seq: int) -> Message | None:
        m: Message | None = self._q.unprocessed.get(seq)
        return m

    def scan(self, start: int) -> Generator[Message, None, None]:
        return _walk(self._q.unprocessed, start, False)
