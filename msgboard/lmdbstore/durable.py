"""The durable store: queues and messages in one LMDB environment.

This module opens, grows, copies and closes the environment
(``DurableStore``); its transaction, which reads and writes the layout
below, is ``DurableTxn`` in ``txn.py``.

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

import errno
import json
import logging
import os
import struct
import threading

import lmdb

from msgboard.errors import DataFileDamaged, RecordDamaged, StoreError, StoreFull
from msgboard.lmdbstore import datafile, snapshot, upgrade
from msgboard.lmdbstore.layout import _QID, _STATE, _U64, _Guard, _Queue
from msgboard.lmdbstore.lock import DirectoryLock
from msgboard.lmdbstore.reserve import DiskReserve
from msgboard.lmdbstore.snapshot import SnapshotInfo
from msgboard.lmdbstore.store import QueueInfo, Store, StoreInfo
from msgboard.lmdbstore.txn import HEADROOM, DurableTxn, MiB
from msgboard.spec import QueueSpec

log = logging.getLogger(__name__)

SCHEMA = b"3"
#: Schemas this version upgrades when it opens them.
_UPGRADES = (b"1", b"2")
#: Named sub-databases the environment has room for (seven used).
MAX_DBS = 16


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
