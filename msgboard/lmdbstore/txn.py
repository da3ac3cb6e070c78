"""A DurableStore's transaction: ``DurableTxn``, which reads and writes
queues, messages, the index and selectors, and the ``Reader`` it hands to
``Search``.

It is handed what it works on, and reaches into no store: the opened
environment and sub-databases (``layout.Dbs``), the store's cache of what is
committed (``cache.Cache``), the disk reserve (``reserve.py``) and a
function to call when it ends. The keys and records it reads and writes
follow ``layout.py``; py-lmdb's rules the store keeps are in
``durable.py``'s docstring. A write transaction works on private copies of
the queues it writes (``QueueState``) and publishes them to the cache only
when LMDB has committed; a reader (``DurableStore.reader``) works on the
queue table of its commit and writes nothing.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import shutil
from collections.abc import Callable, Generator
from functools import partial
from typing import cast

import lmdb

from msgboard.associative import Pattern
from msgboard.associative.keys import message_keys
from msgboard.codec import encode_record, exit_suffix, processed_suffix
from msgboard.errors import RecordDamaged, StoreError, StoreFull
from msgboard.lmdbstore import damage, oplog, record
from msgboard.lmdbstore.cache import Cache, QueueState
from msgboard.lmdbstore.dedup import Dedup
from msgboard.lmdbstore.guard import Guard
from msgboard.lmdbstore.layout import (
    BOARD_ID_KEY,
    KEY,
    LAST,
    MAX_U64,
    SCHEDULED,
    STATE,
    U64,
    Dbs,
    decode,
    encode_link,
    encode_selector,
    load_link,
    load_selector,
    placed,
    seek_last,
    walk,
)
from msgboard.lmdbstore.owned import Owned
from msgboard.lmdbstore.queuereader import QueueReader, seq_at
from msgboard.lmdbstore.reserve import DiskReserve
from msgboard.lmdbstore.schedule import Schedule
from msgboard.lmdbstore.search import FIND_BUDGET, Search
from msgboard.lmdbstore.store import Counts, QueueInfo, Txn
from msgboard.message import Exit, Message, Section, left, now_us, stamp
from msgboard.spec import LinkSpec, QueueSpec, SelectorSpec

_UNPROCESSED = Section.UNPROCESSED
_HISTORY = Section.HISTORY
_SCHEDULED = Section.SCHEDULED
_US = 1_000_000

#: The index keys of a message with neither address nor tuple (a bare
#: body, as most queue traffic is): the same for every one of them.
_BARE_KEYS = message_keys("", ())

MiB = 1 << 20
#: Free map space ``begin`` keeps beyond twice the reserve.
HEADROOM = 16 * MiB


class DurableTxn(Txn):
    """The write transaction ``txn`` of a DurableStore, or (``frozen``: the
    queue table of its commit) a read-only one from ``DurableStore.reader``.
    ``ended`` is called once it has committed or aborted. ``reserve``: the
    bytes ``begin`` was told to expect; ``free``: the disk's free bytes when
    it began; ``log``: a replicated board's log, which its commit writes
    one entry to (``oplog.py``)."""

    def __init__(
        self,
        dbs: Dbs,
        cache: Cache,
        disk: DiskReserve,
        txn: lmdb.Transaction[bytes],
        ended: Callable[[], None],
        *,
        reserve: int = 0,
        free: int = 0,
        frozen: dict[str, QueueState] | None = None,
        committed: Callable[[int], None] | None = None,
        log: oplog.Log | None = None,
    ) -> None:
        self._dbs = dbs
        #: Told the txn id after each commit, before anyone is answered:
        #: the commit sidecar (``sidecar.py``).
        self._committed = committed
        self._cache = cache
        self._disk = disk
        self._ended = ended
        self._free = free
        #: With a log (a replicated board), writes go through its recorder.
        self._log = log
        self._recorder = None if log is None or frozen is not None else oplog.Recorder(txn, dbs)
        if self._recorder is not None:
            txn = cast("lmdb.Transaction[bytes]", self._recorder)
        self._txn = txn
        self._reserve = reserve
        #: The queues as committed: the cache's (live) or a reader's copy.
        self._base = cache.queues if frozen is None else frozen
        self._reading = frozen is not None
        #: Queues this transaction wrote: private copies, None once deleted.
        self._q: dict[str, QueueState | None] = {}
        self._next_qid = cache.next_qid
        self._next_sid = cache.next_sid
        self._wrote = False
        self._done = False
        self._failed = False
        #: What ``admit`` let in, and the room it had (None: not looked at).
        self._admitted = 0
        self._room: int | None = None
        self._guard = Guard(self._fail)
        #: Cursors of generators closed on a thread that did not open them
        #: (``owned.py``): kept until this transaction ends.
        self._strays: list[object] = []
        # The sub-databases a record's read or write uses, one lookup away.
        self._unprocessed = dbs.unprocessed
        self._history = dbs.history
        self._times = dbs.times
        self._index = dbs.index
        self._dedup = Dedup(txn, dbs.keys, dbs.keyends)
        self._schedule = Schedule(txn, dbs.scheduled, dbs.due)

    # -- ending -----------------------------------------------------------

    def commit(self) -> None:
        if self._done:
            # Ending a `with` block after abort() commits nothing, as in
            # py-lmdb; but an error must not pass for a commit.
            if self._failed:
                raise StoreError("the transaction was aborted by an earlier error")
            return
        if not self._wrote:
            self.abort()  # nothing to write, nothing to fsync
            return
        dbs, cache = self._dbs, self._cache
        try:
            with self._guard:
                put = self._txn.put
                for name, q in self._q.items():
                    if q is not None:
                        state = STATE.pack(q.next_seq, q.unprocessed, q.history)
                        put(q.prefix, state, db=dbs.state)
                        was = cache.queues.get(name)
                        if q.scheduled != (0 if was is None else was.scheduled):
                            put(q.prefix + SCHEDULED, U64.pack(q.scheduled), db=dbs.state)
                if self._next_qid != cache.next_qid:
                    put(b"next_qid", U64.pack(self._next_qid), db=dbs.meta)
                if self._next_sid != cache.next_sid:
                    put(b"next_sid", U64.pack(self._next_sid), db=dbs.meta)
                logged = self._write_log()
                txnid = self._txn.id()
                self._txn.commit()
        except StoreError as e:
            # A full disk shows as ENOSPC, or as EIO where a write came up
            # short (LMDB's word for it): tell it by the free space.
            free = shutil.disk_usage(dbs.path).free
            if not isinstance(e, StoreFull) and free < 2 * self._reserve + HEADROOM:
                raise StoreFull(
                    f"disk full: {free} bytes free on {dbs.path}; the write was refused"
                ) from e
            raise
        self._done = True
        if self._committed is not None:
            self._committed(txnid)
        cache.publish(self._q, self._next_qid, self._next_sid)
        self._ended()
        if logged is not None and self._log is not None:
            self._log.last = logged[0]
            if self._log.logged is not None:
                self._log.logged(*logged)

    def _write_log(self) -> tuple[int, bytes] | None:
        """The group's log entry, written in its transaction (a replicated
        board); None without a log or with nothing to log."""
        rec = self._recorder
        if rec is None or self._log is None or not rec.ops:
            return None
        if self._log.fence is not None:
            self._log.epoch = self._log.fence()  # raises: nothing is committed
        return oplog.append(rec.raw, self._dbs, rec.ops, self._log)

    def _fail(self) -> None:
        if not self._done:
            self._failed = True
        self.abort()

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        with contextlib.suppress(lmdb.Error):  # abort never raises
            self._txn.abort()
        self._ended()

    def admit(self, size: int) -> None:
        # Twice the size, as ``begin`` reserves: pages are never full.
        self._admitted += 2 * size
        if self._room is None:
            with self._guard:
                self._room = self._space()
        if self._admitted > self._room:
            self._admitted -= 2 * size
            path, kept = self._dbs.path, self._disk.size
            raise StoreFull(
                f"disk full: a post of {size} bytes does not fit in the "
                f"{max(self._room - self._admitted, 0)} bytes left on {path} beyond the "
                f"{kept} kept for deletes, takes and acks; the post was refused"
            )

    def _space(self) -> int:
        """Bytes new data may still take: the disk's free space beyond
        the reserve, plus, when that is short, the pages LMDB has free inside
        its file (a delete frees pages, not disk)."""
        room = self._disk.room(self._free)
        if room > 4 * HEADROOM:
            return room
        dbs = self._dbs
        inside = max(0, dbs.env.info()["last_pgno"] + 1 - dbs.pages(self._txn)) * dbs.psize
        return room + inside

    # -- queues -----------------------------------------------------------

    def _find(self, name: str) -> QueueState | None:
        self._guard.queue = name
        if name in self._q:
            return self._q[name]
        return self._base.get(name)

    def _get(self, name: str) -> QueueState:
        q = self._find(name)
        if q is None:
            raise KeyError(f"no queue {name!r}")
        return q

    def _touch(self, name: str) -> QueueState:
        """The queue's private copy, to write to."""
        q = self._q.get(name)
        if q is None:
            q = self._get(name).copy()
            self._q[name] = q
        return q

    def create_queue(self, spec: QueueSpec, created_at: int) -> None:
        name = spec.name
        if self._find(name) is not None:
            raise KeyError(f"queue {name!r} exists")
        qid = self._next_qid
        if qid > 0xFFFFFFFF:
            raise StoreError("queue ids exhausted")
        value = {"id": qid, "spec": spec.to_json(), "created_at": created_at}
        with self._guard:
            self._txn.put(name.encode(), json.dumps(value).encode(), db=self._dbs.queues)
        self._next_qid = qid + 1
        q = QueueState(qid, QueueInfo(spec, created_at), 1, 0, 0)
        q.known = True  # a new queue has posted nothing
        self._q[name] = q
        self._wrote = True

    def queue(self, name: str) -> QueueInfo | None:
        q = self._find(name)
        return None if q is None else q.info

    def queues(self) -> list[QueueInfo]:
        if self._reading:
            # The queues sub-database has the names in order: no sort, which
            # for 100,000 names would hold the GIL for some 60 ms at once.
            with self._guard, self._txn.cursor(self._dbs.queues) as cur:
                names = [k.decode() for k in cur.iternext(values=False)]
            return [q.info for q in map(self._base.get, names) if q is not None]
        if not self._q:
            # The cache holds the names as opening read them (in order) and
            # then as created: sorting nearly sorted names is one pass.
            return [q.info for q in map(self._base.get, sorted(self._base)) if q is not None]
        names = sorted(self._base.keys() | self._q.keys())
        return [q.info for q in map(self._find, names) if q is not None]

    def delete_queue(self, name: str) -> bool:
        q = self._find(name)
        if q is None:
            return False
        with self._guard:
            self._txn.delete(name.encode(), db=self._dbs.queues)
            self._txn.delete(q.prefix, db=self._dbs.state)
            self._dedup.drop(q.prefix)
            self._schedule.drop(q.prefix, self._when)
            self._txn.delete(q.prefix + SCHEDULED, db=self._dbs.state)
            for db in (self._unprocessed, self._history, self._times, self._index):
                with self._txn.cursor(db) as cur:
                    if cur.set_range(q.prefix):
                        while cur.key()[:4] == q.prefix and cur.delete(dupdata=True):
                            pass
        self._q[name] = None
        self._wrote = True
        return True

    def _when(self, key: bytes, raw: bytes) -> int:
        """A scheduled record's not_before; 0 if it does not read."""
        try:
            return decode(key, raw, "", 0, _SCHEDULED).not_before
        except RecordDamaged:
            return 0

    def counts(self, name: str) -> Counts:
        q = self._get(name)
        return Counts(q.unprocessed, q.history, q.next_seq, q.scheduled)

    # -- messages ---------------------------------------------------------

    def _derive(self, q: QueueState, name: str) -> None:
        """Reads the queue's last posted_at and posted second (two cursor
        reads): the last record may have been dropped, the times entry not."""
        end = q.prefix + LAST
        damaged = False
        for db, section in ((self._unprocessed, _UNPROCESSED), (self._history, _HISTORY)):
            with self._txn.cursor(db) as cur:
                if not (seek_last(cur, end) and cur.key()[:4] == q.prefix):
                    continue
                k, v = cur.item()
            try:
                m = decode(k, v, name, U64.unpack_from(k, 4)[0], section)
            except RecordDamaged as e:
                self._cache.met(e)
                damaged = True
                continue
            q.last_posted = max(q.last_posted, m.posted_at)
        with self._txn.cursor(self._times) as cur:
            found = seek_last(cur, end) and cur.key()[:4] == q.prefix
            times = cur.key() if found else b""
        if found:
            q.last_second = U64.unpack_from(times, 4)[0]
            # A damaged last record was posted within the last second the
            # times index has: its end keeps posted_at from going back.
            last = (q.last_second + 1) * _US - 1 if damaged else q.last_second * _US
            q.last_posted = max(q.last_posted, last)
        q.known = True

    def append(self, name: str, msg: Message, now: int) -> Message:
        return self._add(name, msg, now, _UNPROCESSED)

    def schedule(self, name: str, msg: Message, now: int) -> Message:
        return self._add(name, msg, now, _SCHEDULED)

    def _add(self, name: str, msg: Message, now: int, section: Section) -> Message:
        """A new message, waiting or (``_SCHEDULED``) scheduled."""
        q = self._q.get(name) or self._touch(name)
        with self._guard:
            if not q.known:
                self._derive(q, name)
            posted = now if now > q.last_posted else q.last_posted
            seq = q.next_seq
            m = stamp(msg, name, seq, posted, 0, msg.delivery_count, section)
            key = KEY.pack(q.qid, seq)
            raw = record.seal(key, encode_record(m))
            if section is _UNPROCESSED:
                self._txn.put(key, raw, db=self._unprocessed)
                self._file(q.prefix, m)
                q.unprocessed += 1
            else:
                self._schedule.put(key, raw, m.not_before)
                q.scheduled += 1
            if m.key:
                self._dedup.hold(q.prefix, m.key, seq)
            second = posted // _US
            if second != q.last_second:
                key = KEY.pack(q.qid, second)
                self._txn.put(key, U64.pack(seq), overwrite=False, db=self._times)
                q.last_second = second
        q.next_seq = seq + 1
        q.last_posted = posted
        self._wrote = True
        return m

    def due(self, now: int, budget: int) -> tuple[list[tuple[str, int, int]], int]:
        with self._guard:
            found, after = self._schedule.due(now, budget)
        if not found:
            return [], after
        # Only the queues found are named (there may be 100,000 others):
        # this transaction's own first, then the committed ones, until done.
        wanted = {qid for _, qid, _ in found}
        names = {q.qid: name for name, q in self._q.items() if q is not None and q.qid in wanted}
        if len(names) < len(wanted):
            for name, q in self._base.items():
                if q.qid in wanted and q.qid not in names:
                    names[q.qid] = name
                    if len(names) == len(wanted):
                        break
        out = []
        for at, qid, seq in found:
            known = names.get(qid)
            if known is None:  # its queue went while a record could not be read
                with self._guard:
                    self._schedule.stale(qid, seq, at)
                self._wrote = True
                continue
            out.append((known, seq, at))
        return out, after

    def next_due(self) -> int:
        with self._guard:
            return self._schedule.first()

    def release(self, name: str, seq: int, at: int) -> Message | None:
        q = self._q.get(name) or self._touch(name)
        key = KEY.pack(q.qid, seq)
        with self._guard:
            raw = self._schedule.get(key)
            if raw is None:
                self._schedule.stale(q.qid, seq, at)
                self._wrote = True
                return None
            try:
                m = decode(key, raw, name, seq, _UNPROCESSED)
            except RecordDamaged as e:
                self._cache.met(e)
                self._schedule.stale(q.qid, seq, at)  # kept, never released
                self._wrote = True
                return None
            self._schedule.pop(key, m.not_before)
            self._txn.put(key, raw, db=self._unprocessed)
            self._file(q.prefix, m)
        q.scheduled -= 1
        q.unprocessed += 1
        self._wrote = True
        return m

    def fetch(self, name: str, seq: int) -> Message | None:
        q = self._get(name)
        if not 0 < seq < q.next_seq:
            return None
        key = KEY.pack(q.qid, seq)
        with self._guard:
            raw = self._txn.get(key, db=self._unprocessed)
            if raw is not None:
                return decode(key, raw, name, seq, _UNPROCESSED)
            raw = self._txn.get(key, db=self._history)
            if raw is not None:
                return decode(key, raw, name, seq, _HISTORY)
            raw = self._schedule.get(key)
        return None if raw is None else decode(key, raw, name, seq, _SCHEDULED)

    def process(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message | None = None,
        how: Exit | None = None,
    ) -> Message:
        old = self._process(name, seq, now, max_history, known, how)
        m = stamp(old, name, seq, old.posted_at, now, old.delivery_count + 1, _HISTORY)
        return m if how is None else left(m, how)

    def finish(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message,
        how: Exit | None = None,
    ) -> None:
        self._process(name, seq, now, max_history, known, how)

    def _process(
        self,
        name: str,
        seq: int,
        now: int,
        max_history: int,
        known: Message | None,
        how: Exit | None,
    ) -> Message:
        """Moves the record to history; returns it as it was (unprocessed)."""
        q = self._q.get(name) or self._touch(name)
        self._guard.queue = name
        if not 0 < seq < q.next_seq:
            raise KeyError(f"{name!r} has no seq {seq}")
        key = KEY.pack(q.qid, seq)
        with self._guard:
            raw = self._txn.pop(key, db=self._unprocessed)
            if raw is None:
                raise KeyError(f"{name!r} seq {seq} is not unprocessed")
            if known is None:
                try:
                    old = decode(key, raw, name, seq, _UNPROCESSED)
                except RecordDamaged:
                    self._txn.put(key, raw, db=self._unprocessed)  # as it was
                    raise
            else:
                old = known
            self._unfile(q.prefix, old)
            q.unprocessed -= 1
            self._wrote = True
            if old.key and max_history <= 0:
                self._left(q, old.key, seq, now)
            if max_history > 0:
                # The unprocessed record never has processed_at, and a later
                # field wins when protobuf parses: appending the two changed
                # fields is the whole new record, without decoding it; how it
                # left (field 18, ``exit_suffix``) follows them.
                suffix = processed_suffix(now, old.delivery_count + 1)
                if how is not None:
                    suffix += exit_suffix(how)
                self._txn.put(key, record.append(raw, suffix), db=self._history)
                q.history += 1
                if q.history > max_history:
                    self._trim(q, q.history - max_history, name, now)
        return old

    def _trim(self, q: QueueState, n: int, name: str, now: int) -> None:
        """Drops the queue's ``n`` oldest history messages; their keys, if
        the queue holds any, start their window."""
        with self._txn.cursor(self._history) as cur:
            if cur.set_range(q.prefix):
                self._trim_from(cur, q, n, name, now)

    def _trim_from(
        self, cur: lmdb.Cursor[bytes], q: QueueState, n: int, name: str, now: int
    ) -> None:
        """``_trim``'s walk, from where ``cur`` stands."""
        keyed = self._dedup.any(q.prefix)
        while n > 0 and cur.key()[:4] == q.prefix:
            if keyed:
                k = cur.key()
                seq = U64.unpack_from(k, 4)[0]
                try:
                    m = decode(k, cur.value(), name, seq, _HISTORY)
                except RecordDamaged as e:
                    self._cache.met(e)  # its key, unknown, is left to check
                else:
                    if m.key:
                        self._left(q, m.key, seq, now)
            if not cur.delete():
                break
            q.history -= 1
            n -= 1

    def trim(self, name: str, n: int, now: int) -> int:
        q = self._q.get(name) or self._touch(name)
        before = q.history
        if n > 0 and before:
            with self._guard:
                self._trim(q, n, name, now)
            self._wrote = True
        return before - q.history

    # -- idempotency keys -------------------------------------------------

    def _left(self, q: QueueState, key: str, seq: int, now: int) -> None:
        self._dedup.left(q.prefix, key, seq, now, q.info.spec.dedup_window)

    def keyed(self, name: str, key: str, now: int) -> int:
        q = self._get(name)
        with self._guard:
            return self._dedup.held(q.prefix, key, now)

    def sweep_keys(self, now: int, budget: int) -> tuple[int, int]:
        with self._guard:
            dropped, after = self._dedup.sweep(now, budget)
        self._wrote = self._wrote or dropped > 0
        return dropped, after

    def restore(self, name: str, msg: Message) -> None:
        q = self._q.get(name) or self._touch(name)
        seq = msg.seq
        if not 0 < seq < q.next_seq:
            raise KeyError(f"{name!r} has no seq {seq}")
        key = KEY.pack(q.qid, seq)
        m = stamp(msg, name, seq, msg.posted_at, 0, msg.delivery_count, _UNPROCESSED)
        with self._guard:
            if self._txn.pop(key, db=self._history) is not None:
                q.history -= 1
            old = self._txn.replace(key, record.seal(key, encode_record(m)), db=self._unprocessed)
            if old is None:
                q.unprocessed += 1
            else:
                with contextlib.suppress(RecordDamaged):  # its keys are unknown: left
                    self._unfile(q.prefix, decode(key, old, name, seq, _UNPROCESSED))
            self._file(q.prefix, m)
            if m.key:
                self._dedup.hold(q.prefix, m.key, seq)
        self._wrote = True

    def _file(self, prefix: bytes, m: Message) -> None:
        """Files an unprocessed message under its index keys."""
        put, seq, db = self._txn.put, U64.pack(m.seq), self._index
        for key in message_keys(m.address, m.tuple) if m.address or m.tuple else _BARE_KEYS:
            put(prefix + key, seq, db=db)

    def _unfile(self, prefix: bytes, m: Message) -> None:
        """Removes a message from the index."""
        delete, seq, db = self._txn.delete, U64.pack(m.seq), self._index
        for key in message_keys(m.address, m.tuple) if m.address or m.tuple else _BARE_KEYS:
            delete(prefix + key, seq, db=db)

    def find(
        self, name: str, pattern: Pattern, start: int | None = None, budget: int = FIND_BUDGET
    ) -> Search:
        q = self._get(name)
        with self._guard:
            reader = QueueReader(
                self._txn,
                self._index,
                self._unprocessed,
                self._guard,
                self._strays,
                self._cache.met,
                self._cache.stale,
                partial(self._scan, name, _UNPROCESSED, q.prefix, reverse=False),
                name,
                q.prefix,
                q.unprocessed,
            )
            return Search(reader, pattern, start, budget)

    def scan(
        self,
        name: str,
        section: Section | None = None,
        start: int | None = None,
        reverse: bool = False,
    ) -> Generator[Message, None, None]:
        q = self._get(name)  # raises now, not at the first next()
        if start is None:
            key = q.prefix + LAST if reverse else q.prefix
        else:
            key = KEY.pack(q.qid, min(max(start, 0), MAX_U64))
        if section is None:
            return self._merged(name, q.prefix, key, reverse)
        return self._scan(name, section, q.prefix, key, reverse)

    def _scan(
        self, name: str, section: Section, prefix: bytes, key: bytes, reverse: bool
    ) -> Generator[Message, None, None]:
        q = self._get(name)
        db = self._dbs.scheduled if section is _SCHEDULED else self._history
        if section is _UNPROCESSED:
            db = self._unprocessed
        want = -1
        if key == prefix and not reverse:
            want = {_UNPROCESSED: q.unprocessed, _HISTORY: q.history}.get(section, q.scheduled)
        met, unpack = self._cache.met, U64.unpack_from
        seen = prev = 0
        # The cursor is closed where it was opened, when the walk ends or
        # its consumer closes this generator (docs/architecture.md).
        with self._guard, Owned(self._txn.cursor(db), self._strays) as cur:
            # As ``_merged`` does, without a generator per layer: a pull reads here.
            for k, v in walk(cur, prefix, key, reverse):
                seen += 1
                seq = unpack(k, 4)[0]
                try:
                    m = decode(k, v, name, seq, section)
                except RecordDamaged as e:
                    met(placed(e, seq, prev, q.next_seq, want >= 0))
                    continue
                prev = seq
                yield m
        if seen < want:
            self._cache.short(name, section.value, want, seen)

    def _merged(
        self, name: str, prefix: bytes, key: bytes, reverse: bool
    ) -> Generator[Message, None, None]:
        """The messages of every section from ``key`` on, in seq order,
        whose records pass their check; a damaged one is counted and
        logged, and skipped, named by its place when its key's seq cannot
        be trusted (not between the last good seq and the next seq). A walk
        of the whole queue that meets fewer records than its counters say
        is counted and logged. The three cursors are closed when the walk
        ends or its consumer closes this generator."""
        q = self._get(name)
        want = -1
        if key == prefix and not reverse:
            want = q.unprocessed + q.history + q.scheduled
        met, unpack = self._cache.met, U64.unpack_from
        seen = prev = 0
        txn, dbs, strays = self._txn, self._dbs, self._strays
        with (
            self._guard,
            Owned(txn.cursor(self._unprocessed), strays) as u,
            Owned(txn.cursor(self._history), strays) as h,
            Owned(txn.cursor(dbs.scheduled), strays) as s,
        ):
            # Keys share the prefix, so they compare as seqs do.
            rows = heapq.merge(
                ((k, v, _UNPROCESSED) for k, v in walk(u, prefix, key, reverse)),
                ((k, v, _HISTORY) for k, v in walk(h, prefix, key, reverse)),
                ((k, v, _SCHEDULED) for k, v in walk(s, prefix, key, reverse)),
                key=_first,
                reverse=reverse,
            )
            for k, v, section in rows:
                seen += 1
                seq = unpack(k, 4)[0]
                try:
                    m = decode(k, v, name, seq, section)
                except RecordDamaged as e:
                    met(placed(e, seq, prev, q.next_seq, want >= 0))
                    continue
                prev = seq
                yield m
        if seen < want:
            self._cache.short(name, "records", want, seen)

    def drop(
        self, name: str, seq: int, after: bool = False, now: int | None = None
    ) -> tuple[int, Section]:
        q = self._touch(name)
        with self._guard:
            dbs = (
                (_UNPROCESSED, self._unprocessed),
                (_HISTORY, self._history),
                (_SCHEDULED, self._dbs.scheduled),
            )
            seq, section = damage.drop(self._txn, dbs, name, q.prefix, seq, after)
            if section is _SCHEDULED:  # its time unread: found by a walk of due
                self._schedule.unfile(KEY.pack(q.qid, seq))
            elif section is _UNPROCESSED:  # its fields unread: a walk of index
                damage.unindex(self._txn, self._index, q.prefix, seq)
            # It left the queue: its key (unread, found by its seq) ends.
            when = now_us() if now is None else now
            self._dedup.lost(q.prefix, seq, when, q.info.spec.dedup_window)
        if section is _UNPROCESSED:
            q.unprocessed -= 1
        elif section is _SCHEDULED:
            q.scheduled -= 1
        else:
            q.history -= 1
        self._wrote = True
        return seq, section

    # -- selectors --------------------------------------------------------

    def new_selector_id(self) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self._wrote = True
        return sid

    def put_selector(self, sid: str, spec: SelectorSpec) -> None:
        data = encode_selector(spec)
        with self._guard:
            self._txn.put(sid.encode(), data, db=self._dbs.selectors)
        self._wrote = True

    def delete_selector(self, sid: str) -> bool:
        with self._guard:
            found: bool = self._txn.delete(sid.encode(), db=self._dbs.selectors)
        self._wrote = self._wrote or found
        return found

    def selectors(self) -> list[tuple[str, SelectorSpec]]:
        with self._guard, self._txn.cursor(db=self._dbs.selectors) as cur:
            stored = [(k.decode(), v) for k, v in cur]
        return [(sid, load_selector(self._dbs.path, sid, v)) for sid, v in stored]

    # -- links ----------------------------------------------------------

    def put_link(self, spec: LinkSpec) -> None:
        data = encode_link(spec)
        with self._guard:
            self._txn.put(spec.name.encode(), data, db=self._dbs.links)
        self._wrote = True

    def delete_link(self, name: str) -> bool:
        with self._guard:
            found: bool = self._txn.delete(name.encode(), db=self._dbs.links)
        self._wrote = self._wrote or found
        return found

    def links(self) -> list[LinkSpec]:
        with self._guard, self._txn.cursor(db=self._dbs.links) as cur:
            stored = [(k.decode(), v) for k, v in cur]
        return [load_link(self._dbs.path, name, v) for name, v in stored]

    # -- the board's id in its data --------------------------------------

    def board_id(self) -> str:
        with self._guard:
            raw = self._txn.get(BOARD_ID_KEY, db=self._dbs.meta)
        return "" if raw is None else raw.decode("ascii", errors="replace")

    def put_board_id(self, board_id: str) -> None:
        with self._guard:
            self._txn.put(BOARD_ID_KEY, board_id.encode("ascii"), db=self._dbs.meta)
        self._wrote = True

    def seq_at(self, name: str, time_us: int) -> int | None:
        q = self._get(name)
        sections = [
            (self._unprocessed, _UNPROCESSED),
            (self._history, _HISTORY),
            (self._dbs.scheduled, _SCHEDULED),
        ]
        with self._guard:
            return seq_at(self._txn, self._times, sections, self._cache.met, name, q, time_us)


def _first(item: tuple[bytes, bytes, Section]) -> bytes:
    return item[0]
