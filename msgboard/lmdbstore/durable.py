"""The durable store: queues and messages in one LMDB environment.

Layout. One environment (a directory), seven named sub-databases; a Spark
reader decodes these files directly, so change the layout only together with
``schema``. Integers are big-endian, so keys sort by queue, then seq::

    sub-database  key                            value
    ------------  -----------------------------  -----------------------------
    meta          b"schema"                      b"3"
                  b"next_qid"                    u64: the next queue id
    queues        queue name, UTF-8              JSON {"id": qid,
                                                   "spec": QueueSpec.to_json(),
                                                   "created_at": µs}
    state         qid u32                        ">QQQ": next_seq, unprocessed
                                                   count, history count
    unprocessed   qid u32 + seq u64 (12 bytes)   record.seal(key, payload), the
                                                   payload encode_record(msg)
    history       qid u32 + seq u64 (12 bytes)   the same
    times         qid u32 + second u64           seq u64
    selectors     selector id, UTF-8             msgboard.v1.SelectorSpec
    meta          b"next_sid"                    u64: the next selector number
    index         qid u32 + index key            seq u64, sorted duplicates
                  (dupsort)                        (one per message filed)

A record is a format byte and a CRC32C of its key and payload
(``record.py``), then the payload: a ``msgboard.v1.Message`` without queue,
seq and section (its key and sub-database say them). Every read checks it:
a damaged record is RecordDamaged (DATA_LOSS) where one record was asked
for (``fetch``), and is skipped, logged once and counted (``damaged``)
where records are walked (``scan``, ``find``, ``seq_at``), so the rest of
the queue stays usable. The other sub-databases carry no checksum: they are
read at open (``queues``, ``state``, ``selectors``) or cross-checked by
``msgboard check`` (``index``, ``times``, the counters).

``times`` is a sparse index: one entry per second in which the queue's
posted second changed, holding the first seq posted in that second. As
``posted_at`` never goes backwards within a queue, every seq from one entry
up to the next was posted in that entry's second; this is what makes
``seq_at`` a few cursor reads. Queue ids are never reused; deleting a
queue removes all its keys.

``index`` files each *unprocessed* message under the keys of
``msgboard.associative.keys`` (its address ``a…``, its shape ``s…``, each
field ``f…``), written and deleted in the transaction that appends,
processes or restores it; ``find`` (``search.py``) reads it. A key's
duplicates are big-endian seqs, so they come back in seq order, and
LMDB counts them without reading them.

Schemas. ``2`` added ``index``; ``3`` framed every record with its
checksum. An older directory is upgraded when it is opened (``upgrade.py``),
once, in one transaction, with a log line (the one time opening reads
messages): from schema 1 the index is built from the unprocessed records;
from 1 or 2 every record is sealed. A directory of any other schema is
refused with StoreError.

Opening. The directory is created with mode 0700 if missing, then locked
(``lock.py``: one board per directory), then its data file is checked
against its meta pages (``datafile.py``) before LMDB maps it: a truncated
file would otherwise kill the process with SIGBUS at the first read.

Caches. Opening reads ``meta``, ``queues`` and ``state`` (a few reads per
queue, never one per message). Each queue's counters live in memory; a
transaction works on private copies of the queues it writes and publishes
them only when LMDB has committed, so an abort leaves no trace. Counters are
written to ``state`` once per transaction, at commit. A queue's last
``posted_at`` is derived when first needed, from its last record and its last
``times`` entry (two cursor reads).

py-lmdb's rules, which the engine keeps:

- A write transaction stays on the thread that began it; one at a time.
- Never keep an environment across ``fork()``: open the store in the child.
- The map grows through ``Environment.set_mapsize``, only while this process
  has no transaction open, read transactions included (a snapshot's copy):
  ``begin(reserve)`` grows ahead when the reserve might not fit, and after
  ``MapFull`` the caller calls ``grow()`` and runs the transaction again.
  A snapshot's copy holds a read transaction for its whole run, so growth
  and copies exclude each other (``_resize``): grow-ahead is skipped while a
  copy runs, and ``grow()`` after MapFull waits for the copy to finish. A
  ``reader()`` (a read-only transaction for a call that only reads) counts
  as a copy does.
- ``sync=False`` skips fsync at commit (the "weaker-no-fsync" mode): a crash
  of the machine, not just the process, may lose the last commits.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterator
from types import TracebackType

import lmdb

from msgboard.associative import Pattern
from msgboard.associative.keys import message_keys
from msgboard.codec import decode_record, encode_record, processed_suffix
from msgboard.errors import (
    DataFileDamaged,
    MsgboardError,
    RecordDamaged,
    StoreError,
    StoreFull,
)
from msgboard.lmdbstore import datafile, record, snapshot, upgrade
from msgboard.lmdbstore.lock import DirectoryLock
from msgboard.lmdbstore.reserve import DiskReserve
from msgboard.lmdbstore.search import FIND_BUDGET, Reader, Search
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.lmdbstore.store import Counts, MapFull, QueueInfo, Store, StoreInfo, Txn
from msgboard.message import Message, Section, stamp
from msgboard.spec import QueueSpec

log = logging.getLogger(__name__)

SCHEMA = b"3"
#: Schemas this version upgrades when it opens them.
_UPGRADES = (b"1", b"2")
#: Named sub-databases the environment has room for (seven used).
MAX_DBS = 16
MiB = 1 << 20
#: Free map space ``begin`` keeps beyond twice the reserve.
HEADROOM = 16 * MiB

_QID = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_KEY = struct.Struct(">IQ")
_STATE = struct.Struct(">QQQ")
_LAST = b"\xff" * 8  # sorts after every seq of a queue
_MAX_U64 = 2**64 - 1
_US = 1_000_000

_UNPROCESSED = Section.UNPROCESSED
_HISTORY = Section.HISTORY


def _translate(e: lmdb.Error) -> MsgboardError:
    if isinstance(e, lmdb.MapFullError):
        return MapFull(f"LMDB map full: {e}")
    if isinstance(e, lmdb.DiskError) or getattr(e, "code", 0) == errno.ENOSPC:
        return StoreFull(f"disk full: the disk refused a write: {e}")
    if isinstance(e, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return DataFileDamaged(f"LMDB: {e}; check it with msgboard check, restore a snapshot")
    return StoreError(f"LMDB: {e}")


def _decode(key: bytes, raw: bytes, name: str, seq: int, section: Section) -> Message:
    """The message stored as ``raw`` under ``key``; RecordDamaged if it fails
    its check."""
    try:
        return decode_record(record.unseal(key, raw), name, seq, section)
    except record.Damaged as e:
        raise RecordDamaged(name, seq, str(e)) from None
    except Exception as e:  # a payload that passed its checksum but does not parse
        raise RecordDamaged(name, seq, f"undecodable: {e}") from None


class _Guard:
    """Translates lmdb errors into store errors, at this one boundary; first
    calls ``on_error`` (which aborts the transaction: a failed LMDB write
    leaves the transaction unusable)."""

    __slots__ = ("_on_error",)

    def __init__(self, on_error: Callable[[], None] | None = None) -> None:
        self._on_error = on_error

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, lmdb.Error):
            if self._on_error is not None:
                self._on_error()
            raise _translate(exc) from exc


def _seek_last(cur: lmdb.Cursor[bytes], key: bytes) -> bool:
    """Positions ``cur`` on the last key <= ``key``; False if there is none."""
    if cur.set_range(key):
        return cur.key() == key or cur.prev()
    return cur.last()


def _walk(
    cur: lmdb.Cursor[bytes], prefix: bytes, key: bytes, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Yields the items from ``key`` on (down, if ``reverse``) while their keys
    start with ``prefix``."""
    if not (_seek_last(cur, key) if reverse else cur.set_range(key)):
        return
    step = cur.prev if reverse else cur.next
    k, v = cur.item()
    while k[:4] == prefix:
        yield k, v
        if not step():
            return
        k, v = cur.item()


class _Queue:
    """A queue's counters: the committed ones in the store's cache, a private
    copy in a transaction that writes the queue."""

    __slots__ = (
        "history",
        "info",
        "known",
        "last_posted",
        "last_second",
        "next_seq",
        "prefix",
        "qid",
        "unprocessed",
    )

    def __init__(
        self, qid: int, info: QueueInfo, next_seq: int, unprocessed: int, history: int
    ) -> None:
        self.qid = qid
        self.prefix = _QID.pack(qid)
        self.info = info
        self.next_seq = next_seq
        self.unprocessed = unprocessed
        self.history = history
        #: False until last_posted and last_second are read from the records.
        self.known = False
        self.last_posted = 0
        self.last_second = -1

    def copy(self) -> _Queue:
        q = _Queue(self.qid, self.info, self.next_seq, self.unprocessed, self.history)
        q.known, q.last_posted, q.last_second = self.known, self.last_posted, self.last_second
        return q


class DurableStore(Store):
    """Queues and messages in the LMDB environment at ``path`` (a directory,
    created with mode 0700 if missing, and locked for the store's life).
    ``map_size``: the initial map; ``max_map_size``: the most it grows to
    (None: no limit; beyond it writes fail with StoreFull).
    ``disk_reserve``: disk bytes that posts may not use, kept for deletes,
    takes and acks (``reserve.py``; None: a sixteenth of the file system,
    from 256 KiB to 64 MiB).

    Raises DirectoryLocked if another store holds the directory,
    DataFileDamaged if its data file is truncated or not LMDB's, StoreError
    for a schema this version does not read."""

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = 256 * MiB,
        max_map_size: int | None = None,
        disk_reserve: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.sync = sync
        self._max_map_size = max_map_size
        self._txn: DurableTxn | None = None
        self._commits = 0
        self._closed = False
        #: Snapshot copies running; guarded by ``_copying``.
        self._copies = 0
        self._copying = threading.Condition()
        #: Per queue, the seqs of the damaged records met since open.
        self._damaged: dict[str, set[int]] = {}
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        self._lock = DirectoryLock(self.path)
        try:
            self._reserve = DiskReserve(self.path, disk_reserve)
            datafile.check(self.path)
            with _Guard():
                self._env = self._open_env(self.path, map_size, sync)
                try:
                    self._psize = self._env.stat()["psize"]
                    self._load()
                except BaseException:
                    self._env.close()
                    raise
        except BaseException:
            self._lock.release()
            raise

    def _open_env(self, path: str, map_size: int, sync: bool) -> lmdb.Environment:
        """Opens the environment; a seam for tests that watch what is read."""
        return lmdb.open(
            path,
            map_size=map_size,
            subdir=True,
            create=True,
            max_dbs=MAX_DBS,
            sync=sync,
            metasync=sync,
            mode=0o600,
        )

    def _load(self) -> None:
        while True:
            try:
                self._load_once()
                return
            except lmdb.MapFullError:  # only an upgrade writes much
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    def _load_once(self) -> None:
        env = self._env
        with env.begin(write=True) as txn:
            self._meta = env.open_db(b"meta", txn=txn)
            self._queues_db = env.open_db(b"queues", txn=txn)
            self._state = env.open_db(b"state", txn=txn)
            self._unprocessed = env.open_db(b"unprocessed", txn=txn)
            self._history = env.open_db(b"history", txn=txn)
            self._times = env.open_db(b"times", txn=txn)
            self._selectors = env.open_db(b"selectors", txn=txn)
            # Not dupfixed: LMDB 0.9.36's compacting copy (a snapshot)
            # crashes on a dupfixed database.
            self._index = env.open_db(b"index", txn=txn, dupsort=True)
            schema = txn.get(b"schema", db=self._meta)
            if schema is None:
                txn.put(b"schema", SCHEMA, db=self._meta)
            elif schema in _UPGRADES:
                dbs = {"queues": self._queues_db, "unprocessed": self._unprocessed}
                dbs |= {"history": self._history, "index": self._index, "meta": self._meta}
                upgrade.run(txn, dbs, schema, SCHEMA, self.path)
            elif schema != SCHEMA:
                raise StoreError(f"{self.path}: schema {schema!r}, this version reads {SCHEMA!r}")
            raw = txn.get(b"next_qid", db=self._meta)
            self._next_qid = 1 if raw is None else _U64.unpack(raw)[0]
            raw = txn.get(b"next_sid", db=self._meta)
            self._next_sid = 1 if raw is None else _U64.unpack(raw)[0]
            self._queues: dict[str, _Queue] = {}
            for key, value in txn.cursor(db=self._queues_db):
                try:
                    d = json.loads(value)
                    info = QueueInfo(QueueSpec.from_json(d["spec"]), d["created_at"])
                    state = txn.get(_QID.pack(d["id"]), db=self._state)
                    counts = (1, 0, 0) if state is None else _STATE.unpack(state)
                except (ValueError, KeyError, TypeError, struct.error) as e:
                    raise DataFileDamaged(
                        f"{self.path}: queue {key.decode(errors='replace')!r}: its stored "
                        f"entry does not parse ({e}); msgboard check {self.path} tells more"
                    ) from None
                self._queues[key.decode()] = _Queue(d["id"], info, *counts)

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed")
        if self._txn is not None:
            raise StoreError("a transaction is already open on this store")

    def begin(self, reserve: int = 0) -> DurableTxn:
        self._check()
        free = self._reserve.tend()
        with _Guard():
            info = self._env.info()
            size = info["map_size"]
            need = (info["last_pgno"] + 1) * self._psize + 2 * reserve + HEADROOM
            if need > size:
                while size < need:
                    size *= 2
                if self._max_map_size is not None:
                    size = min(size, self._max_map_size)
                if size > info["map_size"]:
                    self._resize(size, wait=False)
            self._txn = DurableTxn(self, self._env.begin(write=True), reserve, free)
        return self._txn

    def reader(self) -> DurableTxn:
        """A read-only transaction on the last commit, with the queues and
        counters of that commit. Begin it on the writer's thread between two
        write transactions (then LMDB's snapshot and the counters agree);
        use it on one other thread; end it with ``abort()``. Growth waits
        for it as for a snapshot copy, so keep it short. Writing through it
        raises StoreError."""
        with self._copying:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            self._copies += 1
        try:
            with _Guard():
                txn = self._env.begin()
        except BaseException:
            self._end_copy()
            raise
        return DurableTxn(self, txn, 0, 0, frozen=dict(self._queues))

    def _end_copy(self) -> None:
        with self._copying:
            self._copies -= 1
            self._copying.notify_all()

    def grow(self) -> None:
        self._check()
        with _Guard():
            size = self._env.info()["map_size"]
            new = size * 2
            if self._max_map_size is not None:
                new = min(new, self._max_map_size)
            if new <= size:
                raise StoreFull(f"the LMDB map is at its maximum, {size} bytes")
            self._resize(new, wait=True)

    def _resize(self, size: int, *, wait: bool) -> None:
        """Sets the map size once no snapshot copy runs: waits for running
        copies, or with ``wait=False`` leaves the map as it is."""
        with self._copying:
            if self._copies and not wait:
                return
            self._copying.wait_for(lambda: not self._copies)
            self._env.set_mapsize(size)

    def snapshot(self, path: str) -> SnapshotInfo:
        """Writes a consistent compacted copy of the environment to the
        directory ``path`` (absolute; absent or empty), with its manifest
        (``snapshot.py``). Call it on any thread but the writer's: the copy
        holds a read transaction while writes go on. Raises InvalidArgument,
        FailedPrecondition (path taken), StoreError or StoreFull."""
        with self._copying:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            self._copies += 1
        try:
            with _Guard(), self._env.begin() as txn:
                return self._copy(txn, path)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise StoreFull(f"disk full while writing the snapshot {path}: {e}") from e
            raise StoreError(f"snapshot {path}: {e}") from e
        finally:
            self._end_copy()

    def _copy(self, txn: lmdb.Transaction[bytes], path: str) -> SnapshotInfo:
        """Copies what ``txn`` sees; a seam for tests that hold a copy open."""
        dbs = {"meta": self._meta, "queues": self._queues_db, "state": self._state}
        return snapshot.write(self._env, txn, path, source=self.path, dbs=dbs)

    def info(self) -> StoreInfo:
        with _Guard():
            info = self._env.info()
        return StoreInfo(
            durable=True,
            sync="fsync" if self.sync else "weaker-no-fsync",
            map_size=info["map_size"],
            map_used=(info["last_pgno"] + 1) * self._psize,
            commits=self._commits,
        )

    def close(self) -> None:
        if self._closed:
            return
        if self._txn is not None:
            self._txn.abort()
        with self._copying:
            self._closed = True
            self._copying.wait_for(lambda: not self._copies)
        self._env.close()
        self._lock.release()

    @property
    def disk_reserve(self) -> int:
        return self._reserve.size

    def _room(self, txn: lmdb.Transaction[bytes], free: int) -> int:
        """Bytes new data may still take: the disk's ``free`` space beyond
        the reserve, plus, when that is short, the pages LMDB has free inside
        its file (a delete frees pages, not disk)."""
        room = self._reserve.room(free)
        if room > 4 * HEADROOM:
            return room
        used = 2  # the meta pages
        for db in (None, self._meta, self._queues_db, self._state, self._unprocessed):
            st = txn.stat(db) if db is not None else self._env.stat()
            used += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        for db in (self._history, self._times, self._selectors, self._index):
            st = txn.stat(db)
            used += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        inside = max(0, self._env.info()["last_pgno"] + 1 - used) * self._psize
        return room + inside

    def damaged(self, name: str) -> int:
        return len(self._damaged.get(name, ()))

    def damaged_counts(self) -> dict[str, int]:
        """Damaged records met so far, per queue (a copy)."""
        return {name: len(seqs) for name, seqs in list(self._damaged.items())}

    def _met(self, e: RecordDamaged) -> None:
        """Counts a damaged record met while walking a queue, and logs it
        the first time."""
        seqs = self._damaged.setdefault(e.queue, set())
        if e.seq not in seqs:
            seqs.add(e.seq)
            log.error("DATA_LOSS: %s; skipped (msgboard check lists every one)", e)


class DurableTxn(Txn):
    """The write transaction of a DurableStore, or (``frozen``: the queue
    table of its commit) a read-only one from ``DurableStore.reader``."""

    def __init__(
        self,
        store: DurableStore,
        txn: lmdb.Transaction[bytes],
        reserve: int,
        free: int,
        frozen: dict[str, _Queue] | None = None,
    ) -> None:
        self._store = store
        #: The disk's free bytes when the transaction began.
        self._free = free
        self._txn = txn
        self._reserve = reserve
        #: The queues as committed: the store's (live) or a reader's copy.
        self._base = store._queues if frozen is None else frozen
        self._reading = frozen is not None
        #: Queues this transaction wrote: private copies, None once deleted.
        self._q: dict[str, _Queue | None] = {}
        self._next_qid = store._next_qid
        self._next_sid = store._next_sid
        self._wrote = False
        self._done = False
        self._failed = False
        #: What ``admit`` let in, and the room it had (None: not looked at).
        self._admitted = 0
        self._room: int | None = None
        self._guard = _Guard(self._fail)
        self._unprocessed = store._unprocessed
        self._history = store._history
        self._times = store._times
        self._index = store._index

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
        store = self._store
        try:
            with self._guard:
                put = self._txn.put
                for q in self._q.values():
                    if q is not None:
                        state = _STATE.pack(q.next_seq, q.unprocessed, q.history)
                        put(q.prefix, state, db=store._state)
                if self._next_qid != store._next_qid:
                    put(b"next_qid", _U64.pack(self._next_qid), db=store._meta)
                if self._next_sid != store._next_sid:
                    put(b"next_sid", _U64.pack(self._next_sid), db=store._meta)
                self._txn.commit()
        except StoreError as e:
            # A full disk shows as ENOSPC, or as EIO where a write came up
            # short (LMDB's word for it): tell it by the free space.
            free = shutil.disk_usage(store.path).free
            if not isinstance(e, StoreFull) and free < 2 * self._reserve + HEADROOM:
                raise StoreFull(
                    f"disk full: {free} bytes free on {store.path}; the write was refused"
                ) from e
            raise
        self._done = True
        store._txn = None
        for name, q in self._q.items():
            if q is None:
                store._queues.pop(name, None)
                store._damaged.pop(name, None)
            else:
                store._queues[name] = q
        store._next_qid = self._next_qid
        store._next_sid = self._next_sid
        store._commits += 1

    def _fail(self) -> None:
        if not self._done:
            self._failed = True
        self.abort()

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        if self._reading:
            with contextlib.suppress(lmdb.Error):
                self._txn.abort()
            self._store._end_copy()
            return
        self._store._txn = None
        with contextlib.suppress(lmdb.Error):  # abort never raises
            self._txn.abort()

    def admit(self, size: int) -> None:
        # Twice the size, as ``begin`` reserves: pages are never full.
        self._admitted += 2 * size
        if self._room is None:
            with self._guard:
                self._room = self._store._room(self._txn, self._free)
        if self._admitted > self._room:
            self._admitted -= 2 * size
            path, kept = self._store.path, self._store.disk_reserve
            raise StoreFull(
                f"disk full: a post of {size} bytes does not fit in the "
                f"{max(self._room - self._admitted, 0)} bytes left on {path} beyond the "
                f"{kept} kept for deletes, takes and acks; the post was refused"
            )

    # -- queues -----------------------------------------------------------

    def _find(self, name: str) -> _Queue | None:
        if name in self._q:
            return self._q[name]
        return self._base.get(name)

    def _get(self, name: str) -> _Queue:
        q = self._find(name)
        if q is None:
            raise KeyError(f"no queue {name!r}")
        return q

    def _touch(self, name: str) -> _Queue:
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
            self._txn.put(name.encode(), json.dumps(value).encode(), db=self._store._queues_db)
        self._next_qid = qid + 1
        q = _Queue(qid, QueueInfo(spec, created_at), 1, 0, 0)
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
            with self._guard:
                cur = self._txn.cursor(self._store._queues_db)
                names = [k.decode() for k in cur.iternext(values=False)]
            return [q.info for q in map(self._base.get, names) if q is not None]
        names = sorted(self._base.keys() | self._q.keys())
        return [q.info for q in map(self._find, names) if q is not None]

    def delete_queue(self, name: str) -> bool:
        q = self._find(name)
        if q is None:
            return False
        store = self._store
        with self._guard:
            self._txn.delete(name.encode(), db=store._queues_db)
            self._txn.delete(q.prefix, db=store._state)
            for db in (self._unprocessed, self._history, self._times, self._index):
                cur = self._txn.cursor(db)
                if cur.set_range(q.prefix):
                    while cur.key()[:4] == q.prefix and cur.delete(dupdata=True):
                        pass
        self._q[name] = None
        self._wrote = True
        return True

    def counts(self, name: str) -> Counts:
        q = self._get(name)
        return Counts(q.unprocessed, q.history, q.next_seq)

    # -- messages ---------------------------------------------------------

    def _derive(self, q: _Queue, name: str) -> None:
        """Reads the queue's last posted_at and posted second (two cursor
        reads): the last record may have been dropped, the times entry not."""
        end = q.prefix + _LAST
        damaged = False
        for db, section in ((self._unprocessed, _UNPROCESSED), (self._history, _HISTORY)):
            cur = self._txn.cursor(db)
            if _seek_last(cur, end) and cur.key()[:4] == q.prefix:
                k = cur.key()
                try:
                    m = _decode(k, cur.value(), name, _U64.unpack_from(k, 4)[0], section)
                except RecordDamaged as e:
                    self._store._met(e)
                    damaged = True
                    continue
                q.last_posted = max(q.last_posted, m.posted_at)
        cur = self._txn.cursor(self._times)
        if _seek_last(cur, end) and cur.key()[:4] == q.prefix:
            q.last_second = _U64.unpack_from(cur.key(), 4)[0]
            # A damaged last record was posted within the last second the
            # times index has: its end keeps posted_at from going back.
            last = (q.last_second + 1) * _US - 1 if damaged else q.last_second * _US
            q.last_posted = max(q.last_posted, last)
        q.known = True

    def append(self, name: str, msg: Message, now: int) -> Message:
        q = self._q.get(name) or self._touch(name)
        with self._guard:
            if not q.known:
                self._derive(q, name)
            posted = now if now > q.last_posted else q.last_posted
            seq = q.next_seq
            m = stamp(msg, name, seq, posted, 0, msg.delivery_count, _UNPROCESSED)
            key = _KEY.pack(q.qid, seq)
            self._txn.put(key, record.seal(key, encode_record(m)), db=self._unprocessed)
            self._file(q.prefix, m)
            second = posted // _US
            if second != q.last_second:
                key = _KEY.pack(q.qid, second)
                self._txn.put(key, _U64.pack(seq), overwrite=False, db=self._times)
                q.last_second = second
        q.next_seq = seq + 1
        q.unprocessed += 1
        q.last_posted = posted
        self._wrote = True
        return m

    def fetch(self, name: str, seq: int) -> Message | None:
        q = self._get(name)
        if not 0 < seq < q.next_seq:
            return None
        key = _KEY.pack(q.qid, seq)
        with self._guard:
            raw = self._txn.get(key, db=self._unprocessed)
            if raw is not None:
                return _decode(key, raw, name, seq, _UNPROCESSED)
            raw = self._txn.get(key, db=self._history)
        return None if raw is None else _decode(key, raw, name, seq, _HISTORY)

    def process(
        self, name: str, seq: int, now: int, max_history: int, known: Message | None = None
    ) -> Message:
        q = self._q.get(name) or self._touch(name)
        if not 0 < seq < q.next_seq:
            raise KeyError(f"{name!r} has no seq {seq}")
        key = _KEY.pack(q.qid, seq)
        with self._guard:
            raw = self._txn.pop(key, db=self._unprocessed)
            if raw is None:
                raise KeyError(f"{name!r} seq {seq} is not unprocessed")
            if known is None:
                try:
                    old = _decode(key, raw, name, seq, _UNPROCESSED)
                except RecordDamaged:
                    self._txn.put(key, raw, db=self._unprocessed)  # as it was
                    raise
            else:
                old = known
            self._unfile(q.prefix, old)
            m = stamp(old, name, seq, old.posted_at, now, old.delivery_count + 1, _HISTORY)
            q.unprocessed -= 1
            self._wrote = True
            if max_history > 0:
                # The unprocessed record never has processed_at, and a later
                # field wins when protobuf parses: appending the two changed
                # fields is the whole new record, without decoding it.
                suffix = processed_suffix(now, m.delivery_count)
                self._txn.put(key, record.append(raw, suffix), db=self._history)
                q.history += 1
                if q.history > max_history:
                    self._trim(q, q.history - max_history)
        return m

    def _trim(self, q: _Queue, n: int) -> None:
        """Drops the queue's ``n`` oldest history messages."""
        cur = self._txn.cursor(self._history)
        if not cur.set_range(q.prefix):
            return
        while n > 0 and cur.key()[:4] == q.prefix and cur.delete():
            q.history -= 1
            n -= 1

    def restore(self, name: str, msg: Message) -> None:
        q = self._q.get(name) or self._touch(name)
        seq = msg.seq
        if not 0 < seq < q.next_seq:
            raise KeyError(f"{name!r} has no seq {seq}")
        key = _KEY.pack(q.qid, seq)
        m = stamp(msg, name, seq, msg.posted_at, 0, msg.delivery_count, _UNPROCESSED)
        with self._guard:
            if self._txn.pop(key, db=self._history) is not None:
                q.history -= 1
            old = self._txn.replace(key, record.seal(key, encode_record(m)), db=self._unprocessed)
            if old is None:
                q.unprocessed += 1
            else:
                with contextlib.suppress(RecordDamaged):  # its keys are unknown: left
                    self._unfile(q.prefix, _decode(key, old, name, seq, _UNPROCESSED))
            self._file(q.prefix, m)
        self._wrote = True

    def _file(self, prefix: bytes, m: Message) -> None:
        """Files an unprocessed message under its index keys."""
        put, seq, db = self._txn.put, _U64.pack(m.seq), self._index
        for key in message_keys(m.address, m.tuple):
            put(prefix + key, seq, db=db)

    def _unfile(self, prefix: bytes, m: Message) -> None:
        """Removes a message from the index."""
        delete, seq, db = self._txn.delete, _U64.pack(m.seq), self._index
        for key in message_keys(m.address, m.tuple):
            delete(prefix + key, seq, db=db)

    def find(
        self, name: str, pattern: Pattern, start: int | None = None, budget: int = FIND_BUDGET
    ) -> Search:
        q = self._get(name)
        with self._guard:
            return Search(_Reader(self, name, q), pattern, start, budget)

    def scan(
        self,
        name: str,
        section: Section | None = None,
        start: int | None = None,
        reverse: bool = False,
    ) -> Iterator[Message]:
        q = self._get(name)  # raises now, not at the first next()
        if start is None:
            key = q.prefix + _LAST if reverse else q.prefix
        else:
            key = _KEY.pack(q.qid, min(max(start, 0), _MAX_U64))
        if section is None:
            return self._merged(name, q.prefix, key, reverse)
        return self._scan(name, section, q.prefix, key, reverse)

    def _scan(
        self, name: str, section: Section, prefix: bytes, key: bytes, reverse: bool
    ) -> Iterator[Message]:
        met = self._store._met
        with self._guard:
            db = self._unprocessed if section is _UNPROCESSED else self._history
            for k, v in _walk(self._txn.cursor(db), prefix, key, reverse):
                try:
                    m = _decode(k, v, name, _U64.unpack_from(k, 4)[0], section)
                except RecordDamaged as e:
                    met(e)
                    continue
                yield m

    def _merged(self, name: str, prefix: bytes, key: bytes, reverse: bool) -> Iterator[Message]:
        with self._guard:
            u = _walk(self._txn.cursor(self._unprocessed), prefix, key, reverse)
            h = _walk(self._txn.cursor(self._history), prefix, key, reverse)
            # Keys share the prefix, so they compare as seqs do.
            both = heapq.merge(
                ((k, v, _UNPROCESSED) for k, v in u),
                ((k, v, _HISTORY) for k, v in h),
                key=_first,
                reverse=reverse,
            )
            met = self._store._met
            for k, v, section in both:
                try:
                    m = _decode(k, v, name, _U64.unpack_from(k, 4)[0], section)
                except RecordDamaged as e:
                    met(e)
                    continue
                yield m

    # -- selectors --------------------------------------------------------

    def new_selector_id(self) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self._wrote = True
        return sid

    def put_selector(self, sid: str, data: bytes) -> None:
        with self._guard:
            self._txn.put(sid.encode(), data, db=self._store._selectors)
        self._wrote = True

    def delete_selector(self, sid: str) -> bool:
        with self._guard:
            found: bool = self._txn.delete(sid.encode(), db=self._store._selectors)
        self._wrote = self._wrote or found
        return found

    def selectors(self) -> list[tuple[str, bytes]]:
        with self._guard:
            return [(k.decode(), v) for k, v in self._txn.cursor(db=self._store._selectors)]

    def seq_at(self, name: str, time_us: int) -> int | None:
        q = self._get(name)
        second = min(max(time_us, 0) // _US, _MAX_U64)
        with self._guard:
            cur = self._txn.cursor(self._times)
            if not cur.set_range(_KEY.pack(q.qid, second)) or cur.key()[:4] != q.prefix:
                return None  # nothing was posted in that second or later
            lo = _U64.unpack(cur.value())[0]
            if _U64.unpack_from(cur.key(), 4)[0] > second:
                hi = lo  # lo is the first seq posted after that second
            elif cur.next() and cur.key()[:4] == q.prefix:
                hi = _U64.unpack(cur.value())[0]
            else:
                hi = q.next_seq
            # Binary search within [lo, hi]: posted_at rises with seq.
            first = self._first_from(name, q.prefix)
            while lo < hi:
                mid = (lo + hi) // 2
                found = first(mid)
                if found is None or found.posted_at >= time_us:
                    hi = mid
                else:
                    lo = found.seq + 1
            found = first(lo)
        return None if found is None else found.seq

    def _first_from(self, name: str, prefix: bytes) -> Callable[[int], Message | None]:
        """A function giving the first message (either section) at or after a seq."""
        curs = [(self._txn.cursor(self._unprocessed), _UNPROCESSED)]
        curs.append((self._txn.cursor(self._history), _HISTORY))

        def first(seq: int) -> Message | None:
            while True:
                key = prefix + _U64.pack(seq)
                best: tuple[bytes, bytes, Section] | None = None
                for cur, section in curs:
                    if cur.set_range(key):
                        k = cur.key()
                        if k[:4] == prefix and (best is None or k < best[0]):
                            best = (k, cur.value(), section)
                if best is None:
                    return None
                k, raw, section = best
                seq = _U64.unpack_from(k, 4)[0]
                try:
                    return _decode(k, raw, name, seq, section)
                except RecordDamaged as e:
                    self._store._met(e)
                    seq += 1  # the next one, as if it were not there

        return first


def _first(item: tuple[bytes, bytes, Section]) -> bytes:
    return item[0]


class _Reader(Reader):
    """One LMDB queue's unprocessed section and index, for ``Search``."""

    def __init__(self, t: DurableTxn, name: str, q: _Queue) -> None:
        self._t, self._name, self._prefix = t, name, q.prefix
        self._txn = t._txn
        self.unprocessed = q.unprocessed

    def count(self, key: bytes) -> int:
        cur = self._txn.cursor(self._t._index)
        return cur.count() if cur.set_key(self._prefix + key) else 0

    def keys(self, prefix: bytes) -> Iterator[tuple[bytes, int]]:
        full = self._prefix + prefix
        with self._t._guard:
            cur = self._txn.cursor(self._t._index)
            if not cur.set_range(full):
                return
            while True:
                key = cur.key()
                if not key.startswith(full):
                    return
                yield key[4:], cur.count()
                if not cur.next_nodup():
                    return

    def seqs(self, key: bytes, start: int) -> Iterator[int]:
        unpack = _U64.unpack
        with self._t._guard:
            cur = self._txn.cursor(self._t._index)
            if cur.set_range_dup(self._prefix + key, _U64.pack(min(start, _MAX_U64))):
                for v in cur.iternext_dup(keys=False):
                    yield unpack(v)[0]

    def get(self, seq: int) -> Message | None:
        key = self._prefix + _U64.pack(seq)
        with self._t._guard:
            raw = self._txn.get(key, db=self._t._unprocessed)
        if raw is None:
            return None
        try:
            return _decode(key, raw, self._name, seq, _UNPROCESSED)
        except RecordDamaged as e:
            self._t._store._met(e)
            return None

    def scan(self, start: int) -> Iterator[Message]:
        key = self._prefix + _U64.pack(min(start, _MAX_U64))
        return self._t._scan(self._name, _UNPROCESSED, self._prefix, key, False)
