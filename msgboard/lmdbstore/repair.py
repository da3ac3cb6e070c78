"""``msgboard check --repair DIR``: a damaged board made servable again,
offline. What is readable is copied into a fresh data file; what can be
derived is rebuilt; what is damaged is set aside in the board's own queue
``$damaged``, raw bytes and all, so the rest of the board serves.

LMDB never reads the damaged file: the salvage walk (``verify.DataFile``)
reads each tree by hand and skips damaged subtrees. Into the new file
(LMDB's own, fresh, so safe to write through LMDB):

- ``meta``, ``queues``, ``selectors``: every entry that parses (the board
  checks selectors again when it opens);
- ``unprocessed``, ``history``: every record under its own key, byte for
  byte, when its key is a known queue's, its seq below the queue's next
  seq, and it passes its check; any other record goes to ``$damaged`` with
  its raw bytes as the body and headers saying where it was (``db``, ``key``
  in hex, ``queue``, ``after_seq``: its place, ``why``);
- ``state``: counted from the records copied; the next seq is the old one
  where readable, never below the highest seq copied + 1;
- ``scheduled``: as the records, and ``due`` rebuilt from them (with each
  queue's scheduled count); ``keys`` and ``keyends`` (idempotency keys):
  every entry of a known queue, as stored;
- ``index`` and ``times``: rebuilt from the records copied;
- each damaged subtree of records becomes one ``$damaged`` message naming
  the queue and seqs it held (its bytes are gone).

Then the files are swapped: ``data.mdb`` is kept as
``data.mdb.damaged-<UTC time>``, the new file takes its place, ``lock.mdb``
and the commit sidecar go (the new file starts its own commits), the marker
stays. A board holding the directory (its lock) is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field

import lmdb

from msgboard.associative.keys import message_keys
from msgboard.codec import decode_record
from msgboard.lmdbstore import record, sidecar
from msgboard.lmdbstore.durable import DurableStore
from msgboard.lmdbstore.layout import (
    BOARD_ID_KEY,
    DAMAGED,
    DUE,
    KEY,
    MAX_DBS,
    NAMES,
    QID,
    SCHEDULED,
    SCHEMA,
    STATE,
    U64,
    dupsort,
)
from msgboard.lmdbstore.lock import DirectoryLock
from msgboard.lmdbstore.salvage import SECTIONS, Salvage, salvage
from msgboard.lmdbstore.verify import DataFile
from msgboard.message import Message, Section, now_us
from msgboard.spec import QueueSpec

#: The seqs of one second share a ``times`` entry (µs per second).
_US = 1_000_000


@dataclass
class Summary:
    """What the repair copied, set aside and lost."""

    copied: dict[str, int] = field(default_factory=dict)
    set_aside: int = 0
    lost: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    kept: str = ""

    def lines(self) -> list[str]:
        out = [f"queue {n!r}: {c:,} records copied" for n, c in sorted(self.copied.items())]
        out.append(f"{self.set_aside} damaged record(s) or range(s) moved to {DAMAGED!r}")
        out += [f"lost: {r}" for r in self.lost]
        out += [f"rebuilt: {r}" for r in self.rebuilt]
        if self.kept:
            out.append(f"the damaged file is kept as {self.kept}")
        return out


def repair(path: str) -> Summary:
    """Repairs the stopped board at ``path`` in place (see the module's
    docstring); DirectoryLocked if a board holds it."""
    lock = DirectoryLock(path)
    try:
        new = os.path.join(path, "repair.tmp")
        shutil.rmtree(new, ignore_errors=True)
        os.makedirs(new, mode=0o700)
        s, aside = _copy(path, new)
        _swap(path, new, s)
    finally:
        lock.release()
    store = DurableStore(path, accept_rollback=True)
    try:
        txn = store.begin()
        now = now_us()
        if aside and txn.queue(DAMAGED) is None:
            txn.create_queue(QueueSpec(DAMAGED), now)
        for m in aside:
            txn.append(DAMAGED, m, now)
        txn.commit()
    finally:
        store.close()
    s.set_aside = len(aside)
    return s


def _copy(src: str, dst: str) -> tuple[Summary, list[Message]]:
    """Copies the readable part of ``src`` into a new environment at ``dst``."""
    s, aside = Summary(), []
    found: Salvage = salvage(src, deep=True)
    env = lmdb.open(dst, map_size=1 << 36, max_dbs=MAX_DBS, subdir=True)
    try:
        dbs = {n: env.open_db(n.encode(), dupsort=dupsort(n)) for n in NAMES}
        with DataFile(src) as f, env.begin(write=True) as txn:
            meta = dict(f.items(b"meta"))
            txn.put(b"schema", SCHEMA, db=dbs["meta"])
            names: dict[int, str] = {}
            for key, value in f.items(b"queues"):
                try:
                    d = json.loads(value)
                    QueueSpec.from_json(d["spec"])
                    names[int(d["id"])] = key.decode()
                except (ValueError, KeyError, TypeError) as e:
                    aside.append(_aside("queues", key, value, "?", 0, f"does not parse: {e}"))
                    continue
                txn.put(key, value, db=dbs["queues"])
            old_next = {
                QID.unpack(k)[0]: STATE.unpack(v)[0]
                for k, v in f.items(b"state")
                if len(k) == QID.size and len(v) == STATE.size
            }
            for key, value in f.items(b"selectors"):
                txn.put(key, value, db=dbs["selectors"])
            counts = {qid: [0, 0, 0, 0] for qid in names}  # top seq, unprocessed, history, sched.
            stamps: dict[int, list[tuple[int, int]]] = {qid: [] for qid in names}
            for key, value in f.items(b"keys"):
                if len(key) > QID.size and QID.unpack_from(key)[0] in names:
                    txn.put(key, value, db=dbs["keys"])
            for key, value in f.items(b"keyends"):
                if len(key) > 12 and QID.unpack_from(key, 8)[0] in names:
                    txn.put(key, value, db=dbs["keyends"])
            for i, name in enumerate((*SECTIONS, "scheduled"), 1):
                section = Section(name)
                prev: dict[int, int] = {}
                for key, value in f.items(name.encode()):
                    qid, seq = KEY.unpack(key) if len(key) == KEY.size else (-1, 0)
                    queue = names.get(qid, "?")
                    why = ""
                    if qid not in names:
                        why = "a key of no queue"
                    elif qid in old_next and seq >= old_next[qid]:
                        why = f"seq {seq} is not below the next seq {old_next[qid]}"
                    else:
                        try:
                            m = decode_record(record.unseal(key, value), queue, seq, section)
                        except Exception as e:  # Damaged, or a payload that does not parse
                            why = str(e) or type(e).__name__
                    if why:
                        aside.append(_aside(name, key, value, queue, prev.get(qid, 0), why))
                        continue
                    prev[qid] = seq
                    txn.put(key, value, db=dbs[name])
                    c = counts[qid]
                    c[0], c[i] = max(c[0], seq), c[i] + 1
                    stamps[qid].append((seq, m.posted_at))
                    if section is Section.UNPROCESSED:
                        for ik in message_keys(m.address, m.tuple):
                            txn.put(key[:4] + ik, key[4:], db=dbs["index"])
                    elif section is Section.SCHEDULED:
                        txn.put(DUE.pack(m.not_before, qid, seq), b"", db=dbs["due"])
            for qid, (top, unprocessed, history, scheduled) in counts.items():
                next_seq = max(old_next.get(qid, 1), top + 1)
                txn.put(QID.pack(qid), STATE.pack(next_seq, unprocessed, history), db=dbs["state"])
                if scheduled:
                    txn.put(QID.pack(qid) + SCHEDULED, U64.pack(scheduled), db=dbs["state"])
                last = -1
                for seq, posted in sorted(stamps[qid]):
                    if posted // _US != last:
                        last = posted // _US
                        txn.put(KEY.pack(qid, last), U64.pack(seq), db=dbs["times"])
                s.copied[names[qid]] = unprocessed + history + scheduled
            raw = meta.get(b"next_qid", b"")
            next_qid = U64.unpack(raw)[0] if len(raw) == U64.size else 0
            txn.put(b"next_qid", U64.pack(max(next_qid, max(names, default=0) + 1)), db=dbs["meta"])
            if len(meta.get(b"next_sid", b"")) == U64.size:
                txn.put(b"next_sid", meta[b"next_sid"], db=dbs["meta"])
            if meta.get(BOARD_ID_KEY):  # the id the links keyed with, kept
                txn.put(BOARD_ID_KEY, meta[BOARD_ID_KEY], db=dbs["meta"])
    finally:
        env.close()
    for p in found.report.problems:
        if p.tree not in (*SECTIONS, "scheduled"):  # derived, or LMDB's own: rebuilt
            s.rebuilt.append(found.place(p))
            continue
        s.lost.append(found.place(p))
        what = {"lost": found.place(p), "tree": p.tree, "page": str(p.pgno)}
        aside.append(Message(headers=what, body=b""))
    return s, aside


def _swap(path: str, new: str, s: Summary) -> None:
    """Puts the new data file in place of the damaged one (kept aside)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    old = os.path.join(path, "data.mdb")
    if os.path.exists(old):
        s.kept = f"data.mdb.damaged-{stamp}"
        os.replace(old, os.path.join(path, s.kept))
    os.replace(os.path.join(new, "data.mdb"), old)
    shutil.rmtree(new)
    for stale in ("lock.mdb", sidecar.SIDECAR):
        if os.path.exists(os.path.join(path, stale)):
            os.remove(os.path.join(path, stale))


def _aside(db: str, key: bytes, value: bytes, queue: str, after: int, why: str) -> Message:
    """A damaged entry as a ``$damaged`` message: its raw bytes, and where
    it was found (by place: the seq after which, not the one its key shows)."""
    headers = {"db": db, "key": key.hex(), "queue": queue, "after_seq": str(after), "why": why}
    return Message(headers=headers, body=bytes(value))
