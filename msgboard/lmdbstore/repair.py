"""``msgboard check --repair DIR``: a damaged board made servable again,
offline. What is readable is copied into a fresh data file; what can be
derived is rebuilt; what is damaged is set aside in the board's own queue
``$damaged``, raw bytes and all, so the rest of the board serves.

LMDB never reads the damaged file: the page walk (``verify.DataFile``)
reads each tree by hand and skips damaged subtrees, and the page scan
(``harvest.py``) reads every page of the file for the records it still
holds: a record is kept wherever it is found whole (its checksum holds),
under a damaged branch too; of two versions, the newest the data proves
(issue 42). Into the new file (LMDB's own, fresh, so safe to write through
LMDB):

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
- every loss becomes a ``lost:`` line and one ``$damaged`` message naming
  it (queue, section, seq range, count): records its counters say it had
  that are nowhere whole in the file, records of a queue whose entry is
  lost, selectors, links or ended idempotency keys on damaged pages, and a
  rollback. Older copies (on free pages) are restored only where the
  counters show records missing, and said so (``restored:``).

A rollback (the data file older than the last commit the board answered
for: an older copy, a damaged newer meta page) is refused unless
``accept_rollback``; then it is a loss, named with its number of commits.
Then the files are swapped: ``data.mdb`` is kept as
``data.mdb.damaged-<UTC time>``, the commit sidecar as
``msgboard.commit.damaged-<UTC time>`` (the evidence of the last commit),
the new file takes its place, ``lock.mdb`` goes (the new file starts its
own commits), the marker stays. A board holding the directory (its lock)
is refused. On any failure the temporary ``repair.tmp`` is removed and the
board left as it was. ``Summary.whole`` is True only when the repaired
board holds everything the damaged one held.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import lmdb

from msgboard.associative.keys import message_keys
from msgboard.errors import FailedPrecondition
from msgboard.lmdbstore import sidecar
from msgboard.lmdbstore.durable import DurableStore
from msgboard.lmdbstore.harvest import ORPHAN, RECORDS, STALE, WAITING, Copy, Harvest, harvest
from msgboard.lmdbstore.layout import (
    BOARD_ID_KEY,
    DAMAGED,
    DUE,
    HOLD,
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
from msgboard.lmdbstore.salvage import qids, seq_range
from msgboard.lmdbstore.verify import DataFile
from msgboard.message import Message, now_us
from msgboard.spec import QueueSpec

#: The seqs of one second share a ``times`` entry (µs per second).
_US = 1_000_000
#: Trees whose loss is a loss of what users wrote (the rest are rebuilt).
_KEPT = {
    "selectors": "durable selectors",
    "links": "links",
    "keys": "idempotency keys of messages that left (a repost within its window is stored again)",
}


@dataclass
class Summary:
    """What the repair copied, restored, set aside and lost."""

    copied: dict[str, int] = field(default_factory=dict)
    #: The damage found, one line a page.
    found: list[str] = field(default_factory=list)
    set_aside: int = 0
    lost: list[str] = field(default_factory=list)
    #: Older copies restored, and choices between versions.
    restored: list[str] = field(default_factory=list)
    chose: list[str] = field(default_factory=list)
    #: Records read by their checksums where their nodes are damaged.
    recovered: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    kept: str = ""

    @property
    def whole(self) -> bool:
        """Whether the repaired board holds everything the damaged one held
        (and nothing older in its place)."""
        return not (self.lost or self.restored or self.set_aside)

    def lines(self) -> list[str]:
        out = [f"damaged: {p}" for p in self.found[:20]]
        if len(self.found) > 20:
            out.append(f"damaged: ... and {len(self.found) - 20} more page(s)")
        out += [f"queue {n!r}: {c:,} records copied" for n, c in sorted(self.copied.items())]
        out += [f"restored: {r}" for r in self.restored]
        out += [f"chose: {r}" for r in self.chose]
        out += [f"recovered: {r}" for r in self.recovered]
        out.append(f"{self.set_aside} damaged record(s) or loss(es) moved to {DAMAGED!r}")
        out += [f"lost: {r}" for r in self.lost]
        out += [f"rebuilt: {r}" for r in self.rebuilt]
        if self.kept:
            out.append(f"the damaged file is kept as {self.kept}")
        return out


def repair(path: str, *, accept_rollback: bool = False) -> Summary:
    """Repairs the stopped board at ``path`` in place (see the module's
    docstring); DirectoryLocked if a board holds it, FailedPrecondition for
    a rollback not accepted, NotLmdb or OSError for a file with nothing
    readable. Leaves no ``repair.tmp`` behind."""
    lock = DirectoryLock(path)
    new = os.path.join(path, "repair.tmp")
    try:
        shutil.rmtree(new, ignore_errors=True)
        h = harvest(path)
        s = Summary(found=[str(p) for p in h.report.problems])
        _rollback(path, h, s, accept_rollback)
        os.makedirs(new, mode=0o700)
        try:
            aside = _copy(h, new, s)
            _swap(path, new, s)
        finally:
            shutil.rmtree(new, ignore_errors=True)
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


def _rollback(path: str, h: Harvest, s: Summary, accept: bool) -> None:
    """A data file older than the board's last commit: refused, or (accepted)
    a loss named with its number of commits."""
    meta = h.report.meta
    assert meta is not None
    side = sidecar.read(path)
    if side is not None and side.txnid > meta.txnid:
        n = side.txnid - meta.txnid
        line = (
            f"a rollback of {n:,} commit(s): the board answered for LMDB txn {side.txnid}, "
            f"data.mdb holds txn {meta.txnid} (an older copy, or a damaged newer meta page)"
        )
        if not accept:
            raise FailedPrecondition(
                f"{path}: not repaired: it would be {line}; restore the right data.mdb, or "
                "repair with --accept-rollback to keep the older commit"
            )
        s.lost.append(f"{line}: what those commits wrote is gone")
    elif side is None and any(not m.valid for m in h.report.metas):
        bad = [m.slot for m in h.report.metas if not m.valid]
        s.lost.append(
            f"meta page {bad[0]} is damaged and no commit sidecar says which commit is the "
            f"last: if it held a newer commit than txn {meta.txnid}, that commit is gone"
        )


def _names(h: Harvest, s: Summary, found: set[int]) -> dict[int, str]:
    """Queue id -> name, from the walk or (its tree damaged) from other pages."""
    names: dict[int, str] = {}
    for key, (rank, value) in sorted(h.queues.items(), key=lambda kv: kv[1][0]):
        try:
            d = json.loads(value)
            QueueSpec.from_json(d["spec"])
            qid, name = int(d["id"]), key.decode()
        except (ValueError, KeyError, TypeError):
            continue  # set aside below, when the walk read it
        if rank < ORPHAN and qid not in found:
            continue  # an older page's queue with no record left: deleted since
        if rank < ORPHAN:
            s.restored.append(f"queue {name!r}: its entry, from an older page")
        names[qid] = name
    return names


def _copy(h: Harvest, dst: str, s: Summary) -> list[Message]:
    """Writes what ``h`` found into a new environment at ``dst``."""
    aside: list[Message] = []
    kept: dict[bytes, Copy] = {**h.copies}
    found = {QID.unpack_from(k)[0] for k in (*h.copies, *h.older)}
    names = _names(h, s, found)
    for qid in sorted(found - names.keys()):  # records whose queue entry is lost: kept apart
        name = f"recovered.{qid}"
        spec = {"id": qid, "spec": QueueSpec(name).to_json(), "created_at": now_us()}
        h.queues[name.encode()] = (ORPHAN, json.dumps(spec).encode())
        names[qid] = name
        s.lost.append(
            f"queue id {qid}: its name and settings (its entry in queues is lost): its "
            f"records are kept in the new queue {name!r}"
        )
    for key, (rank, value) in h.queues.items():
        lost = rank > ORPHAN and key.decode(errors="replace") not in names.values()
        if lost and len(key) != KEY.size:  # else a record read through a bad root: kept apart
            aside.append(_aside("queues", key, value, "?", 0, "does not parse"))
    counters = {
        QID.unpack(k)[0]: STATE.unpack(v)
        for k, (rank, v) in h.state.items()
        if rank >= ORPHAN and len(k) == QID.size and len(v) == STATE.size
    }
    sched = {
        QID.unpack_from(k)[0]: U64.unpack(v)[0]
        for k, (rank, v) in h.state.items()
        if rank >= ORPHAN and len(k) == QID.size + 1 and len(v) == U64.size
    }
    for qid, name in sorted(names.items()):
        _account(h, s, qid, name, counters.get(qid), sched.get(qid, 0), kept)
    _choices(h, s, names)
    _recovered(h, s, names, kept)
    env = lmdb.open(dst, map_size=1 << 36, max_dbs=MAX_DBS, subdir=True)
    try:
        dbs = {n: env.open_db(n.encode(), dupsort=dupsort(n)) for n in NAMES}
        with env.begin(write=True) as txn:
            _write(h, s, txn, dbs, names, kept, aside)
    finally:
        env.close()
    damaged = h.damaged_trees()
    if "main" in damaged:  # trees whose root was not found are lost too, where not recovered
        damaged |= {t for t in NAMES if h.unread(t)}
    for tree in sorted(damaged):
        where = "; ".join(str(p) for p in h.report.problems if p.tree == tree)[:300]
        where = where or f"{tree}: its root is not found (the main tree is damaged)"
        if tree in _KEPT:
            s.lost.append(f"{_KEPT[tree]}: {where}")
        elif tree == "queues":
            s.lost.append(
                f"queues: the list of queues is damaged ({where}): a queue found nowhere "
                "else in the file is lost with its records"
            )
        elif tree not in RECORDS:
            s.rebuilt.append(where)
    aside += [Message(headers={"lost": line}, body=b"") for line in s.lost]
    return aside


def _account(
    h: Harvest,
    s: Summary,
    qid: int,
    name: str,
    state: tuple[int, int, int] | None,
    scheduled: int,
    kept: dict[bytes, Copy],
) -> None:
    """Queue ``qid``'s records found against its counters: older copies
    kept only where records are missing, every loss named."""
    prefix = QID.pack(qid)
    for label, trees in (("waiting", WAITING), ("history", ("history",))):
        proven = sum(1 for k, c in h.copies.items() if k[:4] == prefix and c.section in trees)
        older = {k: c for k, c in h.older.items() if k[:4] == prefix and c.section in trees}
        want = None if state is None else (state[1] + scheduled if label == "waiting" else state[2])
        where = _where(h, qid, trees)
        bad = sum(1 for t, k, _ in h.damaged if k[:4] == prefix and t in trees)
        if bad:
            where = f"{where}; " if where else ""
            where += f"{bad} damaged record(s) set aside in {DAMAGED!r}"
        if want is not None and proven >= want:
            if older:
                s.chose.append(
                    f"queue {name!r} {label}: {len(older)} older copies on free pages not "
                    f"restored: the counters ({want:,}) show none missing"
                )
            continue
        if older:
            seqs = sorted(KEY.unpack(k)[1] for k in older)
            commits = sorted({c.rank for c in older.values() if c.rank != STALE})
            freed = f"freed by commits {commits[0]} to {commits[-1]}" if commits else ""
            stale = sum(1 for c in older.values() if c.rank == STALE)
            left = f"{stale} left in reused pages" if stale else ""
            s.restored.append(
                f"queue {name!r} {label}: {len(older)} older copies of seqs {seqs[0]} to "
                f"{seqs[-1]}, from pages no tree holds ({', '.join(filter(None, (freed, left)))})"
                ": their own page is damaged; some may have left the queue since"
            )
            kept.update(older)
        if want is None:
            if where:
                s.lost.append(
                    f"queue {name!r} {label}: an unknown number of records (its counters "
                    f"are unreadable), {where}"
                )
            continue
        missing = want - proven - len(older)
        if missing > 0:
            s.lost.append(
                f"queue {name!r} {label}: {missing:,} of the {want:,} records its counters "
                f"say are nowhere whole in the file, {where or 'seqs unknown'}"
            )


def _where(h: Harvest, qid: int, trees: tuple[str, ...]) -> str:
    """The damaged ranges of queue ``qid`` in ``trees``, as seq ranges."""
    known = {qid: ""}
    parts = []
    for tree in trees:
        for p in h.ranges(tree):
            if qid in qids(p, known):
                page = f" (page {p.pgno})" if p.pgno >= 0 else " (its tree is unreadable)"
                parts.append(f"{tree} {seq_range(p, qid)}{page}")
    return "; ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")


def _choices(h: Harvest, s: Summary, names: dict[int, str]) -> None:
    """One line per queue: records found in more than one version."""
    by: dict[int, list[bytes]] = {}
    for key in h.choices:
        by.setdefault(QID.unpack_from(key)[0], []).append(key)
    for qid, keys in sorted(by.items()):
        first = min(keys)
        best = h.copies.get(first) or h.older.get(first)
        if best is None:
            continue
        s.chose.append(
            f"queue {names.get(qid, qid)!r}: {len(keys)} record(s) found in two versions or "
            f"more, the newest kept; e.g. seq {KEY.unpack(first)[1]}: {best.section} on "
            f"{best.where()} over {', '.join(h.choices[first][:2])}"
        )


def _recovered(h: Harvest, s: Summary, names: dict[int, str], kept: dict[bytes, Copy]) -> None:
    """One line per queue and class: records kept that were read by their
    checksums, their nodes' headers (or keys) damaged."""
    by: dict[tuple[int, str], list[tuple[int, int, str]]] = {}
    for key, (pgno, how) in h.recovered.items():
        c = kept.get(key)
        if c is not None and c.pgno == pgno:
            qid, seq = KEY.unpack(key)
            label = "history" if c.section == "history" else "waiting"
            by.setdefault((qid, label), []).append((seq, pgno, how))
    for (qid, label), got in sorted(by.items()):
        got.sort()
        pages = ", ".join(str(p) for p in sorted({p for _, p, _ in got}))
        guessed = sum(1 for *_, how in got if how == "key")
        keys = f"; the keys of {guessed} damaged too, proven by the checksums" if guessed else ""
        s.recovered.append(
            f"queue {names.get(qid, qid)!r} {label}: {len(got)} record(s) read by their "
            f"checksums on damaged page(s) {pages} (seqs {_seqs([q for q, _, _ in got])}), "
            f"their nodes' headers unreadable{keys}"
        )


def _seqs(seqs: list[int]) -> str:
    """A few seqs, listed."""
    more = f" and {len(seqs) - 5} more" if len(seqs) > 5 else ""
    return ", ".join(str(q) for q in seqs[:5]) + more


def _write(
    h: Harvest,
    s: Summary,
    txn: lmdb.Transaction[bytes],
    dbs: dict[str, Any],
    names: dict[int, str],
    kept: dict[bytes, Copy],
    aside: list[Message],
) -> None:
    """The new file's entries."""
    txn.put(b"schema", SCHEMA, db=dbs["meta"])
    live = set(names.values())
    for key, (_rank, value) in h.queues.items():
        if key.decode(errors="replace") in live:
            txn.put(key, value, db=dbs["queues"])
    for key, value in _walked(h, b"selectors"):
        txn.put(key, value, db=dbs["selectors"])
    for key, value in _walked(h, b"links"):
        txn.put(key, value, db=dbs["links"])
    ended: set[bytes] = set()
    for key, value in _walked(h, b"keys"):
        if len(key) > QID.size and QID.unpack_from(key)[0] in names and len(value) == HOLD.size:
            until = HOLD.unpack(value)[1]
            if until:  # a held key (until 0) is filed again from its record below
                txn.put(key, value, db=dbs["keys"])
                txn.put(U64.pack(until) + key, b"", db=dbs["keyends"])
                ended.add(key)
    counts = {qid: [0, 0, 0, 0] for qid in names}  # top seq, unprocessed, history, sched.
    stamps: dict[int, list[tuple[int, int]]] = {qid: [] for qid in names}
    prev: dict[int, int] = {}
    column = {"unprocessed": 1, "history": 2, "scheduled": 3}
    for key in sorted(kept):
        c = kept[key]
        qid, seq = KEY.unpack(key)
        old_next = h.next_seq.get(qid)
        why = ""
        if qid not in names:
            why = "a key of no known queue (its queue entry is lost)"
        elif old_next is not None and seq >= old_next and c.rank < ORPHAN:
            why = f"seq {seq} is not below the next seq {old_next}"
        if why:
            place = prev.get(qid, 0)
            aside.append(_aside(c.section, key, c.value, names.get(qid, "?"), place, why))
            if qid not in names:
                s.lost.append(f"queue id {qid} seq {seq} ({c.section}): {why}; set aside")
            continue
        prev[qid] = seq
        txn.put(key, c.value, db=dbs[c.section])
        m = c.message
        n = counts[qid]
        n[0], n[column[c.section]] = max(n[0], seq), n[column[c.section]] + 1
        stamps[qid].append((seq, m.posted_at))
        if c.section == "unprocessed":
            for ik in message_keys(m.address, m.tuple):
                txn.put(key[:4] + ik, key[4:], db=dbs["index"])
        elif c.section == "scheduled":
            txn.put(DUE.pack(m.not_before, qid, seq), b"", db=dbs["due"])
        if m.key:
            held = key[:4] + m.key.encode()
            if held not in ended:
                txn.put(held, HOLD.pack(seq, 0), db=dbs["keys"])
    by_tree: dict[str, list[bytes]] = {}
    for key, c in kept.items():
        by_tree.setdefault(c.section, []).append(key)
    for keys in by_tree.values():
        keys.sort()
    for tree, key, value in h.damaged:  # placed after the good record before its key
        qid = QID.unpack_from(key)[0] if len(key) >= QID.size else -1
        keys = by_tree.get(tree, [])
        i = bisect.bisect_left(keys, key)
        after = KEY.unpack(keys[i - 1])[1] if i and keys[i - 1][:4] == key[:4] else 0
        aside.append(_aside(tree, key, value, names.get(qid, "?"), after, "damaged"))
    for qid, (top, unprocessed, history, scheduled) in counts.items():
        next_seq = max(h.next_seq.get(qid, 1), top + 1)
        txn.put(QID.pack(qid), STATE.pack(next_seq, unprocessed, history), db=dbs["state"])
        if scheduled:
            txn.put(QID.pack(qid) + SCHEDULED, U64.pack(scheduled), db=dbs["state"])
        last = -1
        for seq, posted in sorted(stamps[qid]):
            if posted // _US != last:
                last = posted // _US
                txn.put(KEY.pack(qid, last), U64.pack(seq), db=dbs["times"])
        s.copied[names[qid]] = unprocessed + history + scheduled
    meta = {k: v for k, (_rank, v) in h.meta.items()}
    raw = meta.get(b"next_qid", b"")
    next_qid = U64.unpack(raw)[0] if len(raw) == U64.size else 0
    seen = max((QID.unpack_from(k)[0] for k in kept), default=0)
    next_qid = max(next_qid, max(names, default=0) + 1, seen + 1)
    txn.put(b"next_qid", U64.pack(next_qid), db=dbs["meta"])
    if len(meta.get(b"next_sid", b"")) == U64.size:
        txn.put(b"next_sid", meta[b"next_sid"], db=dbs["meta"])
    if meta.get(BOARD_ID_KEY):  # the id the links keyed with, kept
        txn.put(BOARD_ID_KEY, meta[BOARD_ID_KEY], db=dbs["meta"])


def _walked(h: Harvest, name: bytes) -> list[tuple[bytes, bytes]]:
    """The readable entries of tree ``name``, by the page walk."""
    with DataFile(h.report.path, deep=False) as f:
        return list(f.items(name))


def _swap(path: str, new: str, s: Summary) -> None:
    """Puts the new data file in place of the damaged one (kept aside, with
    the commit sidecar: the evidence of the last commit)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    old = os.path.join(path, "data.mdb")
    if os.path.exists(old):
        s.kept = f"data.mdb.damaged-{stamp}"
        os.replace(old, os.path.join(path, s.kept))
    os.replace(os.path.join(new, "data.mdb"), old)
    side = os.path.join(path, sidecar.SIDECAR)
    if os.path.exists(side):
        os.replace(side, f"{side}.damaged-{stamp}")
    if os.path.exists(os.path.join(path, "lock.mdb")):
        os.remove(os.path.join(path, "lock.mdb"))


def _aside(db: str, key: bytes, value: bytes, queue: str, after: int, why: str) -> Message:
    """A damaged entry as a ``$damaged`` message: its raw bytes, and where
    it was found (by place: the seq after which, not the one its key shows)."""
    headers = {"db": db, "key": key.hex(), "queue": queue, "after_seq": str(after), "why": why}
    return Message(headers=headers, body=bytes(value))
