"""The durable store: queues and messages in one LMDB environment.

This module opens, grows, copies and closes the environment
(``DurableStore``); its transaction, which reads and writes queues,
messages and selectors, is ``DurableTxn`` in ``txn.py``. The layout of the
environment (its sub-databases, their keys and records, the schemas)
is written down, and declared in code, in ``layout.py``; an older schema is
upgraded at open (``upgrade.py``).

Opening. The directory is created with mode 0700 if missing, then locked
(``lock.py``: one board per directory), then its data file is checked
against its meta pages (``datafile.py``) before LMDB maps it: a truncated
file would otherwise kill the process with SIGBUS at the first read.

Caches. Opening reads ``meta``, ``queues`` and ``state`` (a few reads per
queue, never one per message) into the store's ``Cache`` (``cache.py``):
each queue's counters live in memory, and a transaction publishes its
private copies there only when LMDB has committed. Counters are written to
``state`` once per transaction, at commit.

Transactions. ``begin`` and ``reader`` hand a ``DurableTxn`` what it works
on: the opened sub-databases (``layout.Dbs``), the cache, the disk reserve,
and a function it calls when it ends; it reaches into the store for nothing
else.

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

One barrier per commit (``sync=True`` and ``DEFER_META_SYNC``, off by
default for now). LMDB's commit writes the data pages, syncs them
(``fdatasync``), then writes the meta page that points at them. LMDB's
default syncs that meta page too (an ``O_DSYNC`` write: a second barrier
per commit). With ``DEFER_META_SYNC`` the store opens LMDB with
``MDB_NOMETASYNC`` instead: the meta page is written but left to the next
sync, which is the next commit's data sync, or ``flush`` (one
``fdatasync``) when no commit follows. The writer answers a group only once a sync has covered its
commit (``unsynced``, ``syncs``; ``engine/writer.py``). What a crash
(process or machine) leaves, step by step, for commit N:

1. data pages of N written, not synced: the file's last durable meta page
   is N-1's, whose pages N never overwrites (LMDB reuses a page only two
   commits after it was freed): the board opens at N-1 or before; N was
   answered to nobody.
2. data of N synced, meta page of N written, no sync yet: N-1 (meta of N
   lost) or N (it reached the disk anyway); both are whole. Nobody was
   answered for N.
3. a later sync (the next commit's data sync, or ``flush``) returned: N is
   durable, then answered. The commit sidecar (``sidecar.py``) records N
   only now, so that a machine crash before it never leaves the sidecar
   ahead of the data file (which would refuse the start as a rollback).

Readers see a commit once its meta page is written, before step 3: a
view for a read call is begun only after a flush (``engine/reads.py``), and
``snapshot`` syncs once its copy's transaction has begun, so no client
reads what a power loss could drop. The operation log's entries (``entries``,
what a primary ships to its standbys) are not held back: a standby may get
a group before the primary's own sync (nothing is answered before both are
durable).

A kill -9 loses nothing the OS has: every write is in the page cache.
``tests/test_durable.py`` copies the data file at step 2 (only what was
synced) and opens the copy.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import lmdb

from msgboard.errors import DataFileDamaged, StoreError, StoreFull
from msgboard.lmdbstore import datafile, opening, oplog, snapshot, upgrade
from msgboard.lmdbstore.cache import Cache, QueueState
from msgboard.lmdbstore.guard import Guard
from msgboard.lmdbstore.layout import (
    LOG_LAST,
    LOG_LAST_KEY,
    MAX_DBS,
    QID,
    SCHEDULED,
    SCHEMA,
    SCHEMAS,
    STATE,
    U64,
    Dbs,
)
from msgboard.lmdbstore.lock import DirectoryLock
from msgboard.lmdbstore.reserve import DiskReserve
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.lmdbstore.store import MapFull, QueueInfo, Store, StoreInfo
from msgboard.lmdbstore.txn import HEADROOM, DurableTxn, MiB
from msgboard.spec import QueueSpec

T = TypeVar("T")

#: Decodes one JSON document with none of ``json.loads``'s checks of the
#: input's type and encoding: at open, for 100,000 queues, 0.2 s of CPU
#: less (of 0.5).
_decode = json.JSONDecoder().raw_decode


def _entry(value: bytes) -> dict[str, Any]:
    """A ``queues`` entry's JSON; ValueError if it is not one whole object."""
    text = value.decode()
    d, end = _decode(text)
    if not isinstance(d, dict) or text[end:].strip():
        raise ValueError("not one JSON object")
    return d


#: Leave each commit's meta page to the next sync (``MDB_NOMETASYNC``, the
#: module's docstring). False (the default for now): LMDB syncs it within
#: the commit (two barriers a commit, and the writer holds nothing), as
#: before issue 34. Off until a run on a quiet machine shows no row worse
#: (docs/performance.md, "One barrier per commit"); tests/test_power_loss.py
#: runs with it on.
DEFER_META_SYNC = False


class DurableStore(Store):
    """Queues and messages in the LMDB environment at ``path`` (a directory,
    created with mode 0700 if missing, and locked for the store's life).
    ``map_size``: the initial map; ``max_map_size``: the most it grows to
    (None: no limit; beyond it writes fail with StoreFull).
    ``disk_reserve``: disk bytes that posts may not use, kept for deletes,
    takes and acks (``reserve.py``; None: a sixteenth of the file system,
    from 256 KiB to 64 MiB). ``log``: the operation log's settings, for a
    replicated board (``oplog.py``; None: no log, and a log left from before
    is dropped at open). ``standby``: the store only applies a primary's
    log (``apply``): ``begin`` refuses.

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
        init: bool = False,
        accept_rollback: bool = False,
        log: oplog.Log | None = None,
        standby: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.sync = sync
        self._defer = sync and DEFER_META_SYNC
        self.unsynced = 0
        self.syncs = 0
        self.log = log
        self._standby = standby
        self._max_map_size = max_map_size
        self._txn: DurableTxn | None = None
        self._closed = False
        #: Snapshot copies running; guarded by ``_copying``.
        self._copies = 0
        self._copying = threading.Condition()
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        self._lock = DirectoryLock(self.path)
        try:
            self._reserve = DiskReserve(self.path, disk_reserve)
            datafile.check(self.path)
            verdict = opening.vet(self.path, init=init, sync=sync, accept=accept_rollback)
            with Guard():
                self._env = self._open_env(self.path, map_size, sync)
                try:
                    self._load(self._env.stat()["psize"])
                    if sync:  # what opening wrote (a schema, an upgrade), durable
                        self._env.sync(True)
                    self._sidecar = opening.adopt(self.path, self._env, verdict)
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
            metasync=sync and not DEFER_META_SYNC,  # see the module's docstring
            mode=0o600,
        )

    def _load(self, psize: int) -> None:
        while True:
            try:
                self._dbs, self._cache = self._load_once(psize)
                return
            except lmdb.MapFullError:  # only an upgrade writes much
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    def _load_once(self, psize: int) -> tuple[Dbs, Cache]:
        """Opens the sub-databases (upgrading an older schema) and reads the
        queue table and counters."""
        env = self._env
        with env.begin(write=True) as txn:
            dbs = Dbs(env, txn, self.path, psize)
            schema = txn.get(b"schema", db=dbs.meta)
            if schema is None:
                txn.put(b"schema", SCHEMA, db=dbs.meta)
            elif schema != SCHEMA:
                if schema not in SCHEMAS:
                    raise StoreError(
                        f"{self.path}: schema {schema!r}, this version reads {SCHEMA!r}"
                    )
                upgrade.run(txn, dbs, schema, SCHEMA, self.path)
            if self.log is None:
                oplog.hole(txn, dbs)
            else:
                self.log.last = oplog.bounds(txn, dbs)[1]
            raw = txn.get(b"next_qid", db=dbs.meta)
            next_qid = 1 if raw is None else U64.unpack(raw)[0]
            raw = txn.get(b"next_sid", db=dbs.meta)
            next_sid = 1 if raw is None else U64.unpack(raw)[0]
            queues: dict[str, QueueState] = {}
            for key, value in txn.cursor(db=dbs.queues):
                try:
                    d = _entry(value)
                    info = QueueInfo(QueueSpec.from_json(d["spec"]), d["created_at"])
                    state = txn.get(QID.pack(d["id"]), db=dbs.state)
                    counts = (1, 0, 0) if state is None else STATE.unpack(state)
                    raw = txn.get(QID.pack(d["id"]) + SCHEDULED, db=dbs.state)
                    scheduled = 0 if raw is None else U64.unpack(raw)[0]
                except (ValueError, KeyError, TypeError, struct.error) as e:
                    raise DataFileDamaged(
                        f"{self.path}: queue {key.decode(errors='replace')!r}: its stored "
                        f"entry does not parse ({e}); msgboard check {self.path} tells more"
                    ) from None
                next_seq, unprocessed, history = counts
                queues[key.decode()] = QueueState(
                    d["id"], info, next_seq, unprocessed, history, scheduled
                )
        return dbs, Cache(queues, next_qid, next_sid)

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed")
        if self._txn is not None:
            raise StoreError("a transaction is already open on this store")

    def begin(self, reserve: int = 0) -> DurableTxn:
        self._check()
        if self._standby:
            raise StoreError(f"{self.path} is a standby's: it only applies its primary's log")
        free = self._reserve.tend()
        with Guard():
            info = self._env.info()
            size = info["map_size"]
            need = (info["last_pgno"] + 1) * self._dbs.psize + 2 * reserve + HEADROOM
            if need > size:
                while size < need:
                    size *= 2
                if self._max_map_size is not None:
                    size = min(size, self._max_map_size)
                if size > info["map_size"]:
                    self._resize(size, wait=False)
            txn = self._env.begin(write=True)
            self._txn = DurableTxn(
                self._dbs,
                self._cache,
                self._reserve,
                txn,
                self._ended,
                reserve=reserve,
                free=free,
                committed=self._committed,
                log=self.log,
            )
        return self._txn

    def _committed(self, txnid: int) -> None:
        """Commit ``txnid`` is made. In fsync mode its data sync made the
        commit before it durable, and its own meta page waits for the next
        sync."""
        if not self._defer:
            self._sidecar.write(txnid)
            return
        self.syncs += 1
        if self.unsynced:
            self._sidecar.write(self.unsynced)
        self.unsynced = txnid

    def flush(self) -> None:
        """Syncs the data file (one ``fdatasync``): every commit so far is
        durable. Writer's thread, between transactions."""
        if not self.unsynced:
            return
        with Guard():
            self._env.sync(True)
        self.syncs += 1
        self._sidecar.write(self.unsynced)
        self.unsynced = 0

    def _ended(self) -> None:
        """Called by the write transaction once it has committed or aborted."""
        self._txn = None

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
            with Guard():
                txn = self._env.begin()
        except BaseException:
            self._end_copy()
            raise
        frozen = dict(self._cache.queues)
        return DurableTxn(self._dbs, self._cache, self._reserve, txn, self._end_copy, frozen=frozen)

    def _end_copy(self) -> None:
        with self._copying:
            self._copies -= 1
            self._copying.notify_all()

    # -- the operation log (oplog.py) --------------------------------------

    def apply(self, entries: list[bytes]) -> int:
        """A standby's: applies the primary's ``entries`` (consecutive, the
        first following the last applied) in one transaction, committed
        with fsync; returns the last index. LogGap if they do not follow;
        a full map grows and the whole runs again."""
        log = self.log or oplog.Log()
        while True:
            try:
                with Guard(), self._env.begin(write=True) as txn:
                    last = log.last
                    for entry in entries:
                        last = oplog.apply(txn, self._dbs, entry, log)
                    txnid = txn.id()
                self._committed(txnid)  # as a board's commit does
                self.flush()  # durable before the primary is told
            except MapFull:
                self._resize(self._env.info()["map_size"] * 2, wait=True)
                continue
            log.last = last
            return last

    def log_position(self) -> tuple[int, int]:
        """(index, epoch) of the log's last entry as committed; (0, 0) if
        the log was never written; any thread."""
        return self._reading(_log_last)

    def log_bounds(self) -> tuple[int, int]:
        """(first, last) index of the log as committed (oplog.bounds)."""
        return self._reading(oplog.bounds)

    def entries(self, start: int, budget: int = 4 << 20) -> list[bytes]:
        """The log's entries from index ``start`` on, about ``budget``
        bytes at most; any thread. [] if ``start`` is past the last."""
        return self._reading(lambda txn, dbs: oplog.entries(txn, dbs, start, budget))

    def _reading(self, read: Callable[[lmdb.Transaction[bytes], Dbs], T]) -> T:
        """``read`` in a read transaction, counted as a copy (growth waits
        for it); any thread."""
        with self._copying:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            self._copies += 1
        try:
            with Guard(), self._env.begin() as txn:
                return read(txn, self._dbs)
        finally:
            self._end_copy()

    def grow(self) -> None:
        self._check()
        with Guard():
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
        try:
            return self._reading(lambda txn, dbs: self._copy(self._synced(txn), path))
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise StoreFull(f"disk full while writing the snapshot {path}: {e}") from e
            raise StoreError(f"snapshot {path}: {e}") from e

    def _synced(self, txn: lmdb.Transaction[bytes]) -> lmdb.Transaction[bytes]:
        """``txn``, begun, once what it sees is durable: a commit's meta page
        may wait for the next sync (fsync mode), and a copy must not hold a
        commit a power loss would drop. One ``fdatasync``, any thread."""
        if self._defer:
            with Guard():
                self._env.sync(True)
        return txn

    def _copy(self, txn: lmdb.Transaction[bytes], path: str) -> SnapshotInfo:
        """Copies what ``txn`` sees; a seam for tests that hold a copy open."""
        return snapshot.write(self._dbs, txn, path, source=self.path)

    def info(self) -> StoreInfo:
        with Guard():
            info = self._env.info()
        return StoreInfo(
            durable=True,
            sync="fsync" if self.sync else "weaker-no-fsync",
            map_size=info["map_size"],
            map_used=(info["last_pgno"] + 1) * self._dbs.psize,
            commits=self._cache.commits,
        )

    def close(self) -> None:
        if self._closed:
            return
        if self._txn is not None:
            self._txn.abort()
        with self._copying:
            self._closed = True
            self._copying.wait_for(lambda: not self._copies)
        self.flush()
        self._env.close()
        self._sidecar.close()
        self._lock.release()

    @property
    def disk_reserve(self) -> int:
        return self._reserve.size

    def damaged(self, name: str) -> int:
        return sum(self._cache.damaged.get(name, {}).values())

    def damaged_counts(self) -> dict[str, int]:
        """Damaged records met so far, per queue (a copy)."""
        return {name: sum(found.values()) for name, found in list(self._cache.damaged.items())}


def _log_last(txn: lmdb.Transaction[bytes], dbs: Dbs) -> tuple[int, int]:
    raw = txn.get(LOG_LAST_KEY, db=dbs.meta)
    if raw is None:
        return 0, 0
    index, epoch = LOG_LAST.unpack(raw)
    return int(index), int(epoch)
