"""``msgboard check DIR``: an offline, read-only check of a data directory or
a snapshot.

It reads everything once, in one LMDB read transaction, and reports per
queue:

- every record (``unprocessed``, ``history``): its checksum
  (``record.py``, schema 3 on) and that its payload decodes; that its queue
  id belongs to a queue and its seq is below the queue's next seq;
- ``index``: every unprocessed record filed under each of its keys, and no
  entry beyond those (an entry pointing at a record that is not there, or a
  stale one);
- ``keys`` and ``keyends`` (schema 4 on): every keyed record on the board
  filed under its key, no key held for a message that is not there or
  has another key, and each ended key filed under its end (and no end
  beyond those);
- ``scheduled`` and ``due`` (schema 4 on): every scheduled record whole
  and filed in ``due`` under its not_before, every ``due`` entry pointing
  at one, and the queue's scheduled count;
- ``state``: the counters against the records counted;
- ``queues`` and ``selectors``: each value parses (a selector's pattern
  too), and a selector's source queue exists;
- the data file against its meta pages (``datafile.py``), before LMDB maps
  it.

It takes no lock of ours (``lock.py``) and writes nothing: it opens LMDB
read-only, registering as a reader in LMDB's ``lock.mdb`` when the
directory has a writable one (so it may run beside a live board and sees one
commit), and with no lock at all otherwise (a snapshot on read-only
storage). The keys, records and values it reads are those of
``layout.py``; it decodes them as the store does (``layout.decode_selector``,
``codec.decode_record``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lmdb

from msgboard import codec
from msgboard.associative.keys import message_keys
from msgboard.errors import MsgboardError
from msgboard.lmdbstore import child, datafile, record, salvage, sidecar
from msgboard.lmdbstore.layout import (
    DUE,
    HOLD,
    INDEXED,
    KEY,
    MAX_DBS,
    NAMES,
    QID,
    SCHEDULED,
    SCHEMAS,
    STATE,
    U64,
    decode_selector,
    dupsort,
    is_sealed,
    key_end,
)
from msgboard.lmdbstore.pages import NotLmdb
from msgboard.lmdbstore.pages import Report as PageReport
from msgboard.lmdbstore.sidecar import MARKER, SIDECAR
from msgboard.lmdbstore.verify import verify
from msgboard.message import Section
from msgboard.spec import QueueSpec

_SECTIONS = ((b"unprocessed", Section.UNPROCESSED), (b"history", Section.HISTORY))
#: Problems listed per queue before the rest are only counted.
MAX_LISTED = 20


@dataclass
class QueueReport:
    """What the check found for one queue (or for records of no queue)."""

    name: str
    qid: int
    #: Counted records per section; the state entry's counters.
    unprocessed: int = 0
    history: int = 0
    state: tuple[int, int, int] | None = None
    damaged: int = 0
    problems: list[str] = field(default_factory=list)
    #: Problems past MAX_LISTED, counted only.
    more: int = 0

    def add(self, problem: str) -> None:
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)
        else:
            self.more += 1

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        next_seq = self.state[0] if self.state else "?"
        head = (
            f"queue {self.name!r}: {self.unprocessed:,} unprocessed, {self.history:,} history, "
            f"next seq {next_seq}: "
        )
        if self.ok:
            return head + "ok"
        n = len(self.problems) + self.more
        return head + f"{n} problem{'s' if n != 1 else ''}"


@dataclass
class Report:
    """Everything the check found."""

    path: str
    schema: str = ""
    queues: list[QueueReport] = field(default_factory=list)
    selectors: int = 0
    #: Problems of the directory as a whole (data file, meta, selectors).
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(q.ok for q in self.queues)

    def lines(self) -> Iterator[str]:
        """The report as text, one finding a line."""
        yield f"{self.path}: schema {self.schema or '?'}, {len(self.queues)} queue(s), " + (
            f"{self.selectors} durable selector(s)"
        )
        yield from (f"note: {n}" for n in self.notes)
        yield from (f"problem: {p}" for p in self.problems)
        for q in self.queues:
            yield q.line()
            yield from (f"  problem: {p}" for p in q.problems)
            if q.more:
                yield f"  ... and {q.more} more"
        bad = len(self.problems) + sum(len(q.problems) + q.more for q in self.queues)
        yield "clean" if self.ok else f"{bad} problem(s) found"


def check(path: str | os.PathLike[str]) -> Report:
    """Checks the data directory or snapshot at ``path``; never raises for
    what it finds (it is in the report), only for a path that is not a
    directory (NotADirectoryError / FileNotFoundError). Never dies by a
    signal either: the pages are verified by hand first (``verify.py``), a
    damaged file is reported from the salvage walk (``salvage.py``) with no
    LMDB at all, and LMDB reads a verified file in a forked child
    (``child.py``), so that a damage the verifier missed costs one line."""
    path = os.fspath(path)
    report = Report(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: not a directory")
    data = os.path.join(path, datafile.FILE)
    if not os.path.isfile(data) or os.path.getsize(data) == 0:
        what = "no" if not os.path.isfile(data) else "an empty (0 bytes)"
        lived = [f for f in (MARKER, SIDECAR, "lock.mdb") if os.path.exists(f"{path}/{f}")]
        report.problems.append(
            f"{what} {datafile.FILE} here: "
            + (
                f"a board lived here ({', '.join(lived)}): its data file is lost; restore it "
                "from a snapshot"
                if lived
                else "not a board's data directory"
            )
        )
        return report
    try:
        datafile.check(path)
        side = sidecar.read(path)  # before the meta pages: never newer than they are
        pages = _verify(path)
        if not pages.ok:  # name the damage by queue: the salvage walk
            _damaged(report, salvage.salvage(path, deep=True))
            report.problems += _behind(side, pages)
            return report
    except (MsgboardError, NotLmdb, OSError) as e:
        report.problems.append(str(e))
        return report
    behind = _behind(side, pages)
    out = child.run(lambda: _logical(path, Report(path)))
    if out.result is not None:
        report = out.result
    elif out.signal:
        report.problems.append(f"LMDB died by {out.signal} while reading it (the pages verified)")
    else:
        report.problems.append(f"the check failed: {out.error}")
    report.problems += behind
    return report


def _verify(path: str) -> PageReport:
    """The deep page verification of the commit a reader pins: beside a live
    board, the pages of that commit stay as they are while they are walked
    (LMDB reuses no page a reader may see). Opening LMDB and beginning a
    reader read the meta pages only, never a tree page. A snapshot on
    read-only storage (no writable lock file) is walked as it is."""
    if not os.access(os.path.join(path, "lock.mdb"), os.W_OK):
        return verify(path, deep=True)
    try:
        env = lmdb.open(path, readonly=True, lock=True, max_dbs=MAX_DBS, subdir=True)
    except lmdb.Error:
        return verify(path, deep=True)  # meta pages LMDB refuses: the walk says which
    try:
        for _ in range(10):  # the board may commit between begin and the walk
            with env.begin() as txn:
                try:
                    return verify(path, deep=True, txnid=txn.id())
                except LookupError:
                    continue
        return verify(path, deep=True)
    finally:
        env.close()


def _behind(side: sidecar.Commit | None, pages: PageReport) -> list[str]:
    """The commit sidecar against the newest meta page: a rollback."""
    metas = [m for m in pages.metas if m.valid]
    if side is None or not metas:
        return []
    txnid = max(m.txnid for m in metas)
    if txnid >= side.txnid:
        return []
    return [
        f"data.mdb is {side.txnid - txnid:,} commit(s) behind the last commit the board "
        f"answered for (LMDB txn {txnid}, the board's last {side.txnid}): an older copy, "
        "or a damaged newer meta page; msgboard check --repair refuses it unless "
        "--accept-rollback"
    ]


def _damaged(report: Report, found: salvage.Salvage) -> None:
    """Fills ``report`` from the salvage walk of a file with damaged pages."""
    report.schema = found.schema
    report.selectors = found.selectors
    for qid, gap in found.gaps.items():
        q = QueueReport(gap.name, qid, state=gap.counters)
        q.unprocessed, q.history = gap.readable["unprocessed"], gap.readable["history"]
        q.damaged = len(gap.damaged)
        for p in found.report.problems:
            if p.tree in salvage.BY_QID and qid in salvage.qids(p, found.names):
                q.add(f"{found.held(p, qid)} unreadable (page {p.pgno}: {p.what})")
        for section, want, have in gap.lost():
            q.add(
                f"counters say {want:,} {section}, the walk reaches {have:,}: {want - have:,} lost"
            )
        for d in gap.damaged:
            q.add(d)
        report.queues.append(q)
    named = set(found.names)
    for p in found.report.problems:
        if not (p.tree in salvage.BY_QID and set(salvage.qids(p, found.names)) & named):
            report.problems.append(f"damaged page: {p}")
    report.problems += found.other
    report.notes.append(
        "LMDB did not read this file (it could abort on these pages); "
        f"msgboard check --repair {report.path} sets the damage aside"
    )


def _logical(path: str, report: Report) -> Report:
    """The check of a file whose pages verified: LMDB reads it."""
    lockfile = os.path.join(path, "lock.mdb")
    shared = os.access(lockfile, os.W_OK)
    try:
        env = lmdb.open(path, readonly=True, lock=shared, max_dbs=MAX_DBS, subdir=True)
    except lmdb.Error as e:
        report.problems.append(f"LMDB cannot open it: {e}")
        return report
    try:
        with env.begin() as txn:
            _check(env, txn, report)
    except lmdb.Error as e:
        report.problems.append(f"LMDB failed while reading it: {e}")
    finally:
        env.close()
    return report


def _open(env: lmdb.Environment, txn: lmdb.Transaction[bytes], name: bytes) -> Any:
    try:
        return env.open_db(name, txn=txn, create=False, dupsort=dupsort(name.decode()))
    except lmdb.NotFoundError:
        return None


def _check(env: lmdb.Environment, txn: lmdb.Transaction[bytes], report: Report) -> None:
    dbs = {n.encode(): _open(env, txn, n.encode()) for n in NAMES}
    if dbs[b"meta"] is None:
        report.problems.append("no meta sub-database: not a msgboard board")
        return
    schema = txn.get(b"schema", db=dbs[b"meta"])
    report.schema = "" if schema is None else schema.decode(errors="replace")
    if schema not in SCHEMAS:
        first, last = SCHEMAS[0].decode(), SCHEMAS[-1].decode()
        report.problems.append(f"schema {schema!r}: this version reads {first} to {last}")
        return
    sealed = is_sealed(schema)
    indexed = int(schema) >= int(INDEXED)
    if not sealed:
        report.notes.append(
            f"schema {report.schema} has no checksums; opening it as a board upgrades it"
        )
    by_qid: dict[int, QueueReport] = {}
    for key, value in _items(txn, dbs[b"queues"]):
        name = key.decode(errors="replace")
        try:
            d = json.loads(value)
            QueueSpec.from_json(d["spec"])
            qid = int(d["id"])
        except (ValueError, KeyError, TypeError) as e:
            report.problems.append(f"queue {name!r}: its entry in queues does not parse ({e})")
            continue
        q = QueueReport(name, qid)
        raw = txn.get(QID.pack(qid), db=dbs[b"state"]) if dbs[b"state"] is not None else None
        if raw is not None and len(raw) == STATE.size:
            q.state = STATE.unpack(raw)
        elif raw is not None:
            q.add(f"its state entry is {len(raw)} bytes, not {STATE.size}")
        by_qid[qid] = q
    orphans: dict[int, QueueReport] = {}

    def of(qid: int) -> QueueReport:
        q = by_qid.get(qid) or orphans.get(qid)
        if q is None:
            q = orphans[qid] = QueueReport(f"(no queue: id {qid})", qid)
            q.add(f"records of queue id {qid}, which no queue has")
        return q

    #: Per queue id: the index entries its unprocessed records call for.
    filed: dict[int, int] = {}
    #: (queue prefix + key) -> seq: the keys of the records on the board.
    keyed: dict[bytes, int] = {}
    index = dbs[b"index"]
    for dbname, section in _SECTIONS:
        for k, v in _items(txn, dbs[dbname]):
            if len(k) != KEY.size:
                report.problems.append(f"{dbname.decode()}: a key of {len(k)} bytes")
                continue
            qid, seq = KEY.unpack(k)
            q = of(qid)
            if section is Section.UNPROCESSED:
                q.unprocessed += 1
            else:
                q.history += 1
            if q.state is not None and seq >= q.state[0]:
                q.add(f"seq {seq} ({section.value}) is not below next seq {q.state[0]}")
            try:
                payload = record.unseal(k, v) if sealed else v
                m = codec.decode_record(payload, q.name, seq, section)
            except (record.Damaged, MsgboardError, ValueError) as e:
                q.damaged += 1
                if section is Section.UNPROCESSED:
                    filed[qid] = -1  # its index keys are unknown: not counted
                q.add(f"seq {seq} ({section.value}): damaged record ({e or 'undecodable'})")
                continue
            if m.key:
                keyed[k[:4] + m.key.encode()] = seq
            if section is Section.UNPROCESSED and index is not None and indexed:
                keys = list(message_keys(m.address, m.tuple))
                if filed.get(qid, 0) >= 0:
                    filed[qid] = filed.get(qid, 0) + len(keys)
                cur = txn.cursor(db=index)
                for ik in keys:
                    if not cur.set_key_dup(k[:4] + ik, k[4:]):
                        q.add(f"seq {seq} (unprocessed) is missing from the index")
                        break
    qids = by_qid.keys()
    for dbname in (b"state", b"times"):
        for k, _ in _items(txn, dbs[dbname]):
            qid = QID.unpack_from(k)[0] if len(k) >= 4 else -1
            if qid not in qids:
                report.problems.append(f"{dbname.decode()}: an entry of queue id {qid}, no queue's")
                break
    if index is not None and indexed:
        _check_index(txn, index, dbs[b"unprocessed"], of, filed)
    if dbs[b"scheduled"] is not None:
        _check_scheduled(txn, dbs, of, keyed)
    if dbs[b"keys"] is not None:
        _check_keys(txn, dbs[b"keys"], dbs[b"keyends"], of, keyed)
    for q in by_qid.values():
        if q.state is None:
            if q.unprocessed or q.history:
                q.add("no state entry (its counters), yet it has records")
            continue
        _next, unprocessed, history = q.state
        if (unprocessed, history) != (q.unprocessed, q.history):
            q.add(
                f"counters say {unprocessed} unprocessed and {history} history; "
                f"the records are {q.unprocessed} and {q.history}"
            )
    report.queues = sorted(by_qid.values(), key=lambda q: q.name) + list(orphans.values())
    names = {q.name for q in by_qid.values()}
    for key, value in _items(txn, dbs[b"selectors"]):
        report.selectors += 1
        sid = key.decode(errors="replace")
        try:
            spec = decode_selector(value)
        except Exception as e:  # a protobuf DecodeError or InvalidArgument
            report.problems.append(f"selector {sid}: does not parse ({e})")
            continue
        if spec.source not in names:
            report.problems.append(f"selector {sid}: its source queue {spec.source!r} is gone")


def _check_index(
    txn: lmdb.Transaction[bytes],
    index: Any,
    unprocessed: Any,
    of: Callable[[int], QueueReport],
    filed: dict[int, int],
) -> None:
    """Every index entry points at an unprocessed record; per queue, as many
    entries as its records call for (-1 in ``filed``: unknown)."""
    entries: dict[int, int] = {}
    cur = txn.cursor(db=index)
    for k, v in cur.iternext(keys=True, values=True):
        qid = QID.unpack_from(k)[0]
        entries[qid] = entries.get(qid, 0) + 1
        if len(v) != U64.size:
            of(qid).add(f"an index entry of {len(v)} bytes")
            continue
        if unprocessed is None or txn.get(k[:4] + v, db=unprocessed) is None:
            seq = U64.unpack(v)[0]
            of(qid).add(f"the index points at seq {seq}, which is not an unprocessed record")
    for qid in entries.keys() | filed.keys():
        have, want = entries.get(qid, 0), filed.get(qid, 0)
        if want >= 0 and have > want:
            of(qid).add(f"{have} index entries where its records call for {want}")


def _check_scheduled(
    txn: lmdb.Transaction[bytes],
    dbs: dict[bytes, Any],
    of: Callable[[int], QueueReport],
    keyed: dict[bytes, int],
) -> None:
    """Each scheduled record whole and filed in ``due``; each ``due``
    entry pointing at a scheduled record; the scheduled counts."""
    counted: dict[int, int] = {}
    due = dbs[b"due"]
    for k, v in _items(txn, dbs[b"scheduled"]):
        if len(k) != KEY.size:
            of(-1).add(f"scheduled: a key of {len(k)} bytes")
            continue
        qid, seq = KEY.unpack(k)
        q = of(qid)
        counted[qid] = counted.get(qid, 0) + 1
        try:
            m = codec.decode_record(record.unseal(k, v), q.name, seq, Section.SCHEDULED)
        except (record.Damaged, MsgboardError, ValueError) as e:
            q.damaged += 1
            q.add(f"seq {seq} (scheduled): damaged record ({e or 'undecodable'})")
            continue
        if m.key:
            keyed[k[:4] + m.key.encode()] = seq
        if due is None or txn.get(U64.pack(m.not_before) + k, db=due) is None:
            q.add(f"seq {seq} (scheduled) is not filed in due under its not_before")
    for k, _ in _items(txn, due):
        if len(k) != DUE.size:
            of(-1).add(f"due: a key of {len(k)} bytes")
            continue
        _, qid, seq = DUE.unpack(k)
        if txn.get(k[8:], db=dbs[b"scheduled"]) is None:
            of(qid).add(f"due points at seq {seq}, which is not a scheduled record")
    state = dbs[b"state"]
    for k, _ in _items(txn, state):
        if len(k) == QID.size + len(SCHEDULED):
            counted.setdefault(QID.unpack_from(k)[0], 0)
    for qid, n in counted.items():
        raw = None if state is None else txn.get(QID.pack(qid) + SCHEDULED, db=state)
        have = 0 if raw is None or len(raw) != U64.size else U64.unpack(raw)[0]
        if have != n:
            of(qid).add(f"its scheduled count says {have}; the scheduled records are {n}")


def _check_keys(
    txn: lmdb.Transaction[bytes],
    keys: Any,
    ends: Any,
    of: Callable[[int], QueueReport],
    keyed: dict[bytes, int],
) -> None:
    """Each keyed record is filed under its key (until 0); a key held with
    until 0 points at such a record; an ended key is not on the board and
    has its ``keyends`` entry; every ``keyends`` entry has its key."""
    for k, v in _items(txn, keys):
        qid = QID.unpack_from(k)[0] if len(k) >= 4 else -1
        name = k[4:].decode(errors="replace")
        if len(v) != HOLD.size:
            of(qid).add(f"key {name!r}: its entry is {len(v)} bytes, not {HOLD.size}")
            continue
        seq, until = HOLD.unpack(v)
        on_board = keyed.pop(k, None)
        if until == 0 and on_board != seq:
            where = "no message on the board has it"
            if on_board is not None:
                where = f"seq {on_board} has it"
            of(qid).add(f"key {name!r} is held by seq {seq}, but {where}")
        elif until and on_board is not None:
            of(qid).add(f"key {name!r} has ended (seq {seq} left), yet seq {on_board} has it")
        elif until and (ends is None or txn.get(key_end(until, k[:4], k[4:]), db=ends) is None):
            of(qid).add(f"key {name!r} has ended but is not filed under its end in keyends")
    for k, seq in keyed.items():
        name = k[4:].decode(errors="replace")
        of(QID.unpack_from(k)[0]).add(f"seq {seq} has key {name!r}, which keys does not hold")
    for k, _ in _items(txn, ends):
        held = txn.get(k[8:], db=keys) if len(k) > 12 else None
        if held is None or len(held) != HOLD.size or HOLD.unpack(held)[1] != U64.unpack_from(k)[0]:
            qid = QID.unpack_from(k, 8)[0] if len(k) >= 12 else -1
            of(qid).add(f"keyends has an entry for key {k[12:]!r}, which keys does not end then")


def _items(txn: lmdb.Transaction[bytes], db: Any) -> Iterator[tuple[bytes, bytes]]:
    if db is None:
        return iter(())
    return iter(txn.cursor(db=db))
