"""The page scan of ``msgboard check --repair``: every page of a damaged
data file read for the records it still holds, not only the pages the
trees reach from their (possibly damaged) roots and branches.

Every record carries its own checksum over its key and payload
(``record.py``), so a record read anywhere in the file is known whole,
and its key says its queue and seq. Three kinds of page hold records:

- a leaf the current commit's walk reaches (``CURRENT``), damaged or not:
  a damaged one is read node by node, wherever a node may start;
- a leaf no tree reaches and the free list does not hold (``ORPHAN``):
  a leaf below a damaged branch or root of the current commit;
- a free page (ranked by the commit that freed it): an older version of
  a page, not yet reused.

A damaged page (and any page no tree reaches) is also read for record
values by their checksums wherever they lie among its nodes
(``_sealed``): a node whose sizes, flags or key size are damaged hides
its record from the node-by-node read, though its key and value are
whole. A value there is the format byte, a checksum, and protobuf fields
ending where another node starts (LMDB's nodes tile a leaf, 2-byte
aligned); it is tried under the 12 bytes before it (its node's key) and,
on a damaged page of the current commit where those are damaged too,
once every page is read, under the keys the page may hold that no other
current page holds (``_guess``: its parent's key range, nearest the
page's own records first, at most ``GUESSES``). The checksum covers the
key, so it proves the key; a value is kept only if it holds and the
payload decodes (``Harvest.recovered`` says which). Not done: a damaged
node of an overflow record (its value on another page).

Which version of a record wins: a current or orphan page's over a free
page's; then the later one by what the record itself proves (taken into
history over waiting, a higher delivery count); then the page freed by the
later commit. A record only a free page holds is an older copy: it is
kept only where no current page of its kind covers its key (its own page
is damaged), and reported as such (``Harvest.older``); ``repair`` keeps
such copies only where the counters show records missing. A page no tree
reaches is given its section by what its records say: ``processed_at``
makes history, a ``not_before`` scheduled (released at once when due),
else unprocessed; the damaged ranges of the trees decide first where only
one of them can hold it.

The small trees (``queues``, ``state``, ``meta``) are read by the walk;
where their tree is damaged, orphan and free pages are read for entries
that parse as theirs (the newest version wins; a next seq, the highest).
"""

from __future__ import annotations

import bisect
import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import google_crc32c

from msgboard.codec import decode_record
from msgboard.lmdbstore import record
from msgboard.lmdbstore.layout import KEY, NAMES, QID, SCHEDULED, STATE, U64
from msgboard.lmdbstore.pages import (
    F_BIGDATA,
    HEADER,
    NODE,
    NODE_HEADER,
    P_BRANCH,
    P_META,
    P_OVERFLOW,
    PAGE_HEADER,
    U32,
    Problem,
    Report,
    ovpages,
)
from msgboard.lmdbstore.pages import U64 as NATIVE_U64
from msgboard.lmdbstore.verify import DataFile
from msgboard.message import Message, Section
from msgboard.spec import QueueSpec

#: A page the current commit's walk reached.
CURRENT = 2**65
#: A page of the current commit below a damaged one: no tree reaches it,
#: the free list does not hold it.
ORPHAN = 2**64
#: Bytes left of what a page held before it was reused: older than any
#: free page's.
STALE = 1
RECORDS = ("unprocessed", "history", "scheduled")
#: Sections counted together: a released scheduled record moves, bytes
#: unchanged, to unprocessed, so a page no tree reaches may be either.
WAITING = ("unprocessed", "scheduled")
_META_KEYS = (b"schema", b"next_qid", b"next_sid", b"board_id")
#: Where a record's node header may end: flags 0 or F_BIGDATA, a 12-byte key
#: (native u16s: the scan reads a little-endian machine's files).
_RECORD_NODE = re.compile(rb"(?=[\x00\x01]\x00\x0c\x00)")
_FORMAT = bytes([record.FORMAT])
#: Keys tried for each record value a damaged page hides under a damaged
#: key: the seqs nearest the page's own records.
GUESSES = 4096


@dataclass(frozen=True, slots=True)
class Copy:
    """One whole record found: its key, raw bytes, section, where, and the
    rank of its page (``CURRENT``, ``ORPHAN``, or the freeing commit)."""

    key: bytes
    value: bytes
    section: str
    rank: int
    pgno: int
    message: Message

    def order(self) -> tuple[int, int, int, int]:
        """Newest last: current pages over free ones, then what the record
        proves (taken, delivered more often), then the later freeing commit."""
        m = self.message
        return (int(self.rank >= ORPHAN), int(m.processed_at > 0), m.delivery_count, self.rank)

    def where(self) -> str:
        if self.rank >= CURRENT:
            return f"page {self.pgno}"
        if self.rank >= ORPHAN:
            return f"page {self.pgno}, below a damaged page"
        if self.rank == STALE:
            return f"page {self.pgno}, left from before it was reused"
        return f"page {self.pgno}, freed by commit {self.rank}"


@dataclass
class Harvest:
    """What the scan found: the page report (``report``), the best copy of
    each record by key, and the small trees' entries."""

    report: Report
    copies: dict[bytes, Copy] = field(default_factory=dict)
    #: Records whose best copy is on a free page (not covered by a current one).
    older: dict[bytes, Copy] = field(default_factory=dict)
    #: Records seen on more than one page in different versions: key -> the
    #: losing copies' places (the choice, reported).
    choices: dict[bytes, list[str]] = field(default_factory=dict)
    #: Entries of ``queues``, ``state`` and ``meta``: key -> (rank, value).
    queues: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    state: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    meta: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    #: The highest next seq any version of ``state`` shows, per queue id.
    next_seq: dict[int, int] = field(default_factory=dict)
    pages_scanned: int = 0
    #: Entries of a record tree's verified leaf that are no whole record:
    #: (tree, key, raw value), set aside by ``repair``.
    damaged: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    #: Records found by their checksums on a damaged page, their node's
    #: header damaged (``"header"``) or its key too (``"key"``, then
    #: proven by the checksum): key -> (page, how).
    recovered: dict[bytes, tuple[int, str]] = field(default_factory=dict)

    def damaged_trees(self) -> set[str]:
        return {p.tree for p in self.report.problems}

    def ranges(self, tree: str) -> list[Problem]:
        """The damaged ranges of ``tree`` (a whole tree unread: one open range)."""
        if self.unread(tree):
            return [Problem(tree, -1, "its tree is unreadable")]
        return [p for p in self.report.problems if p.tree == tree]

    def unread(self, tree: str) -> bool:
        """Whether ``tree``'s root was never found (the main tree damaged:
        its record lost, or its name)."""
        return tree.encode() not in self.report.named


def harvest(path: str) -> Harvest:
    """Verifies and scans the data file of the directory ``path``; NotLmdb
    (or OSError) when it has no readable meta page."""
    with DataFile(path, deep=True) as f:
        f.trace = {}
        h = Harvest(f.verify())
        for name in h.report.named:
            if name.decode(errors="replace") not in NAMES:
                h.report.problems.append(
                    Problem("main", -1, f"a sub-database named {name!r}: no board's (damaged?)")
                )
        trace, freed = dict(f.trace), dict(f.freed)
        bad = {p.pgno for p in h.report.problems if p.pgno >= 2}
        # A tree whose counters do not match its walk may have been walked
        # from a wrong root: its pages are read as anyone's.
        doubtful = {p.tree for p in h.report.problems if p.pgno < 0}
        for name, out in ((b"queues", h.queues), (b"state", h.state), (b"meta", h.meta)):
            for key, value in f.items(name):
                out[key] = (CURRENT, value)
        for key, (_, value) in h.state.items():
            _next_seq(h, key, value)
        f.trace = None
        small = {"queues", "state", "meta"} & (h.damaged_trees() | _unread(h))
        found: dict[bytes, list[Copy]] = {}
        hidden: list[Hidden] = []
        for pgno in range(2, f.pages):
            kind = trace.get(pgno, "")
            tree = kind.split(" ")[0].removesuffix("(dups)")
            if tree not in (*NAMES, "free", "main") or pgno in bad or tree in doubtful:
                tree = ""  # a damaged name, a page out of place
            rank = freed.get(pgno, CURRENT if kind else ORPHAN)
            page = f.pread(f.psize, pgno * f.psize)
            if len(page) < PAGE_HEADER:
                continue
            flags, lower, upper = HEADER.unpack_from(page, 0)[2:]
            live = tree in RECORDS and kind.endswith("leaf")  # a record tree's verified leaf
            whole = not tree and (pgno in bad or not flags & (P_BRANCH | P_OVERFLOW | P_META))
            if not whole and not flags & P_OVERFLOW and PAGE_HEADER <= lower <= upper <= f.psize:
                # Between a page's node offsets and its nodes: bytes of what
                # the page held before it was reused (LMDB never clears them)
                for n in _nodes(f, page, False, False, (lower, upper)):
                    c = _record(n.key, n.value, "", STALE, pgno)
                    if c is not None:
                        found.setdefault(n.key, []).append(c)
            if not (live or whole):
                continue  # read whole by the walk, or no records there
            h.pages_scanned += 1
            records: list[Node] = []
            for n in _nodes(f, page, trusted=live, small=bool(small)):
                if len(n.key) == KEY.size:
                    c = _record(n.key, n.value, tree if tree in RECORDS else "", rank, pgno)
                    if c is not None:
                        found.setdefault(n.key, []).append(c)
                        records.append(n)
                        continue
                if tree in RECORDS:
                    h.damaged.append((tree, n.key, n.value))
                    continue
                if small and (rank < CURRENT or pgno in bad):
                    _small(h, n.key, n.value, rank)
            if whole:
                # A node whose header (or key) is damaged hides a record
                # whose value may be whole: found by its checksum
                sane = PAGE_HEADER <= lower <= upper <= f.psize
                left = _sealed(h, found, page, pgno, rank, records, upper if sane else PAGE_HEADER)
                if left and pgno in bad:
                    hidden.append(Hidden(pgno, rank, page, left, [n.key for n in records]))
        for p in hidden:  # once every page is read: their keys, by the checksum
            _guess(h, found, p)
        _choose(h, found, bad)
    return h


def _unread(h: Harvest) -> set[str]:
    return {t for t in ("queues", "state", "meta") if h.unread(t)}


@dataclass(frozen=True, slots=True)
class Node:
    """One leaf node read: where it starts and ends in its page (past its
    data: the value, or an overflow run's page number), its key and value."""

    start: int
    end: int
    key: bytes
    value: bytes


def _nodes(
    f: DataFile, page: bytes, trusted: bool, small: bool, span: tuple[int, int] | None = None
) -> list[Node]:
    """The (key, value) of every plain or overflow node of a leaf page that
    reads: by the header's offsets on a page that verified, else tried at
    every even offset where a record's node may start (flags 0 or 1, a
    12-byte key; any key when ``small`` trees are looked for): a record's
    checksum tells a node from noise. ``span``: only nodes starting there."""
    psize = len(page)
    if len(page) < PAGE_HEADER:
        return []
    if trusted:
        lower = HEADER.unpack_from(page, 0)[3]
        n = max(0, min((lower - PAGE_HEADER) >> 1, (psize - PAGE_HEADER) >> 1))
        offs: Sequence[int] = struct.unpack_from(f"={n}H", page, PAGE_HEADER)
    elif small:
        offs = range(PAGE_HEADER, psize - NODE_HEADER, 2)
    else:
        lo, hi = span or (PAGE_HEADER, psize)
        found = _RECORD_NODE.finditer(page, lo + 4, hi + 4)
        offs = [m.start() - 4 for m in found if not m.start() & 1]
    out = []
    for o in offs:
        if o + NODE_HEADER > psize:
            continue
        lo, hi, flags, ksize = NODE.unpack_from(page, o)
        if not trusted and ksize not in (KEY.size, QID.size, QID.size + 1) and ksize > 64:
            continue
        at, size = o + NODE_HEADER + ksize, lo | hi << 16
        if at > psize:
            continue
        key = page[o + NODE_HEADER : at]
        if flags == 0 and at + size <= psize:
            out.append(Node(o, at + size, key, page[at : at + size]))
        elif flags == F_BIGDATA and at + 8 <= psize and len(key) == KEY.size:
            value = _overflow(f, NATIVE_U64.unpack_from(page, at)[0], size)
            if value is not None:
                out.append(Node(o, at + 8, key, value))
    return out


@dataclass(frozen=True, slots=True)
class Hidden:
    """A damaged page's record values that no key before them proves: their
    keys are tried once every page is read (``_guess``)."""

    pgno: int
    rank: int
    page: bytes
    #: (where a value starts, the payload lengths its node may have)
    values: list[tuple[int, list[int]]]
    #: The keys of the records read on the page.
    keys: list[bytes]


def _sealed(
    h: Harvest,
    found: dict[bytes, list[Copy]],
    page: bytes,
    pgno: int,
    rank: int,
    records: list[Node],
    lo: int,
) -> list[tuple[int, list[int]]]:
    """Record values found by their checksums in the bytes of ``page`` from
    ``lo`` that no record read (``records``) holds: where a node's sizes or
    flags are damaged, its key and value may still be whole. A value is a
    format byte, a checksum and a payload that parses as protobuf fields,
    ending where another node starts (nodes tile a leaf, 2-byte aligned);
    tried under the 12 bytes before it (its node's key). Each record found
    is added to ``found`` and ``records``; the values no key proved yet are
    returned, with the payload lengths they may have."""
    psize = len(page)
    # Where a node may start: a node of a record's shape, a record read, a
    # value's place (its node's header and key damaged too), the page's end
    ends = {psize} | {n.start for n in _nodes_anywhere(page, lo)}
    ends |= {n.start for n in records}
    ends |= {v - NODE_HEADER - KEY.size for v in _starts(page, lo, psize)}
    left = []
    for a, b in _gaps(records, lo, psize):
        for v in _starts(page, a + NODE_HEADER + KEY.size, b - record.HEADER):
            lengths = [
                n
                for n in _fields(page, v + record.HEADER, b)
                if v + record.HEADER + n in ends or v + record.HEADER + n + 1 in ends
            ]
            if lengths:
                left.append((v, lengths))
    out = []
    for v, lengths in left:
        if any(n.start <= v < n.end for n in records):
            continue  # inside a record found just now
        key = page[v - KEY.size : v]
        if _take(h, found, page, key, v, lengths, rank, pgno, records, "header"):
            continue
        out.append((v, lengths))
    return out


def _nodes_anywhere(page: bytes, lo: int) -> list[Node]:
    """Nodes of a record's shape from ``lo`` on, whole or not: where another
    node may start (one whose value fails its check included)."""
    out = []
    for m in _RECORD_NODE.finditer(page, lo + 4):
        o = m.start() - 4
        if not o & 1:
            out.append(Node(o, o, b"", b""))
    return out


def _gaps(records: list[Node], lo: int, hi: int) -> list[tuple[int, int]]:
    """The spans of ``lo`` to ``hi`` no record in ``records`` holds."""
    out, at = [], lo
    for n in sorted(records, key=lambda n: n.start):
        if n.start > at:
            out.append((at, n.start))
        at = max(at, n.end)
    if at < hi:
        out.append((at, hi))
    return out


def _starts(page: bytes, lo: int, hi: int) -> list[int]:
    """Even offsets from ``lo`` to ``hi`` holding the record format byte."""
    out = []
    at = page.find(_FORMAT, lo, hi)
    while at >= 0:
        if not at & 1:
            out.append(at)
        at = page.find(_FORMAT, at + 1, hi)
    return out


def _fields(buf: bytes, at: int, end: int) -> list[int]:
    """The lengths from ``at`` at which a protobuf field ends, walking the
    wire format field by field until it fails or reaches ``end``."""
    out, i = [], at
    while i < end:
        tag, i = _varint(buf, i, end)
        if tag < 8:  # no field 0, or no varint
            break
        kind = tag & 7
        if kind == 0:
            n, i = _varint(buf, i, end)
            if n < 0:
                break
        elif kind == 2:
            n, i = _varint(buf, i, end)
            if n < 0:
                break
            i += n
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
        else:
            break  # groups: no field of a record
        if i > end:
            break
        out.append(i - at)
    return out


def _varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    """The varint at ``i`` and where it ends; -1 where none is."""
    value = shift = 0
    while i < end and shift < 64:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
    return -1, i


def _proven(key: bytes, page: bytes, v: int, lengths: list[int]) -> int:
    """The payload length (of ``lengths``, rising) at which the value at
    ``v`` passes its checksum under ``key``; -1 if none."""
    stored = int.from_bytes(page[v + 1 : v + record.HEADER], "big")
    base = v + record.HEADER
    crc, done = google_crc32c.value(key), 0
    for n in lengths:
        crc = google_crc32c.extend(crc, page[base + done : base + n])
        done = n
        if crc == stored:
            return n
    return -1


def _take(
    h: Harvest,
    found: dict[bytes, list[Copy]],
    page: bytes,
    key: bytes,
    v: int,
    lengths: list[int],
    rank: int,
    pgno: int,
    records: list[Node],
    how: str,
) -> bool:
    """Whether the value at ``v`` is a whole record under ``key`` (its
    checksum holds and it decodes): then kept as found, and said how."""
    n = _proven(key, page, v, lengths)
    if n < 0:
        return False
    value = page[v : v + record.HEADER + n]
    c = _record(key, value, "", rank, pgno)
    if c is None:
        return False
    found.setdefault(key, []).append(c)
    records.append(Node(v - NODE_HEADER - KEY.size, v + len(value), key, value))
    h.recovered[key] = (pgno, how)
    return True


def _guess(h: Harvest, found: dict[bytes, list[Copy]], p: Hidden) -> None:
    """The keys of a damaged page's values that the bytes before them do
    not prove (a damaged key): the seqs the page may hold that no current
    page holds, nearest to the page's own records first, at most
    ``GUESSES``; a key is kept only where the value's checksum, which
    covers the key, proves it."""
    keys = _candidates(h, found, p)
    records: list[Node] = []
    for v, lengths in p.values:
        if any(n.start <= v < n.end for n in records):
            continue
        for key in keys:
            if _take(h, found, p.page, key, v, lengths, p.rank, p.pgno, records, "key"):
                keys.remove(key)
                break


def _candidates(h: Harvest, found: dict[bytes, list[Copy]], p: Hidden) -> list[bytes]:
    """The keys a damaged page may hide: its queues' seqs within the range
    its parent gives it (else below the queue's next seq) that no current
    page holds, nearest to the page's records first."""
    problem = next((q for q in h.report.problems if q.pgno == p.pgno), None)
    low = _key(problem.low) if problem is not None else None
    high = _key(problem.high) if problem is not None else None
    near: dict[int, list[int]] = {}
    for k in p.keys:
        qid, seq = KEY.unpack(k)
        near.setdefault(qid, []).append(seq)
    qids = set(near) | {k[0] for k in (low, high) if k is not None}
    held = {k for k, cs in found.items() if any(c.rank >= ORPHAN for c in cs)}
    out: list[tuple[int, bytes]] = []
    for qid in sorted(qids or h.next_seq):
        if len(out) >= 4 * GUESSES:
            break  # a page no range bounds, on a board of many queues
        first, last = 1, h.next_seq.get(qid, 0) - 1
        around = sorted(near.get(qid, []))
        if low is not None and low[0] == qid:
            first = max(first, low[1])
        if last < 0:  # no counters: around the page's records
            last = (around[-1] if around else first) + GUESSES
        if high is not None and high[0] == qid:
            last = min(last, high[1] - 1)
        mid = around or [first]
        first, last = max(first, mid[0] - GUESSES), min(last, mid[-1] + GUESSES)
        for seq in range(first, last + 1):
            key = KEY.pack(qid, seq)
            if key not in held:
                i = bisect.bisect_left(mid, seq)
                out.append((min(abs(seq - m) for m in mid[max(0, i - 1) : i + 1]), key))
    out.sort()
    return [key for _, key in out[:GUESSES]]


def _key(raw: bytes | None) -> tuple[int, int] | None:
    """A range's bound as (qid, seq), a short bound filled with zeros."""
    if raw is None or len(raw) < QID.size:
        return None
    qid, seq = KEY.unpack(raw.ljust(KEY.size, b"\0")[: KEY.size])
    return qid, seq


def _overflow(f: DataFile, first: int, size: int) -> bytes | None:
    """The data of the overflow run at ``first`` if its head page is one."""
    n = ovpages(size, f.psize)
    if first < 2 or first + n > f.pages:
        return None
    head = f.pread(PAGE_HEADER, first * f.psize)
    stored, _pad, flags = HEADER.unpack_from(head, 0)[:3]
    if stored != first or flags != P_OVERFLOW or U32.unpack_from(head, 12)[0] != n:
        return None
    return f.pread(size, first * f.psize + PAGE_HEADER)


def _record(key: bytes, value: bytes, tree: str, rank: int, pgno: int) -> Copy | None:
    """The record ``value`` under ``key`` if whole (None if not a record)."""
    try:
        payload = record.unseal(key, value)
        m = decode_record(payload, "", KEY.unpack(key)[1], Section.HISTORY)
    except Exception:  # Damaged, or a payload that does not parse: not one
        return None
    section = tree or ("history" if m.processed_at else "scheduled" if m.not_before else "")
    return Copy(key, bytes(value), section, rank, pgno, m)


def _small(h: Harvest, key: bytes, value: bytes, rank: int) -> None:
    """An entry of a page no walk read, taken for ``queues``, ``state`` or
    ``meta`` where it parses as theirs and no newer version is known."""
    out = None
    if len(key) == QID.size and len(value) == STATE.size:
        out = h.state
        _next_seq(h, key, value)
    elif len(key) == QID.size + 1 and key.endswith(SCHEDULED) and len(value) == U64.size:
        out = h.state
    elif key in _META_KEYS:
        out = h.meta
    else:
        try:
            d = json.loads(value)
            QueueSpec.from_json(d["spec"])
            int(d["id"])
            key.decode()
        except Exception:  # not a queue entry
            return
        out = h.queues
    old = out.get(key)
    if old is None or old[0] < rank:
        out[key] = (rank, bytes(value))


def _next_seq(h: Harvest, key: bytes, value: bytes) -> None:
    if len(key) == QID.size and len(value) == STATE.size:
        qid = QID.unpack(key)[0]
        h.next_seq[qid] = max(h.next_seq.get(qid, 0), STATE.unpack(value)[0])


def _choose(h: Harvest, found: dict[bytes, list[Copy]], bad: set[int]) -> None:
    """The best copy of each record; an older copy (a free page's) only
    where no current page of its kind covers its key (a damaged page
    covers none: what it no longer shows may be hidden by its damage)."""
    # Sections of pages no tree reaches: where one tree's damage alone may
    # hold the key, that tree.
    ranges = {t: h.ranges(t) for t in RECORDS}
    cover: dict[str, list[tuple[bytes, bytes]]] = {"waiting": [], "history": []}
    pages: dict[tuple[int, int], list[Copy]] = {}
    for copies in found.values():
        for c in copies:
            pages.setdefault((c.pgno, c.rank), []).append(c)
    for copies in pages.values():
        if copies[0].rank >= ORPHAN and copies[0].pgno not in bad:
            keys = sorted(c.key for c in copies)
            section = copies[0].section or "unprocessed"
            cover["history" if section == "history" else "waiting"].append((keys[0], keys[-1]))
    gone = {key for _, key, _ in h.damaged}  # a current copy that fails its check
    for key, copies in found.items():
        fixed = [_placed(c, ranges) for c in copies]
        fixed.sort(key=Copy.order)
        best = fixed[-1]
        others = {(c.section, c.value) for c in fixed[:-1]} - {(best.section, best.value)}
        if others:
            h.choices[key] = [f"{c.section} on {c.where()}" for c in fixed[:-1]]
        if best.rank >= ORPHAN:
            h.copies[key] = best
            continue
        kind = "history" if best.section == "history" else "waiting"
        if key in gone or not any(lo <= key <= hi for lo, hi in cover[kind]):
            h.older[key] = best


def _placed(c: Copy, ranges: dict[str, list[Problem]]) -> Copy:
    """``c`` with its section, when its page's tree is unknown."""
    if c.section in ("history", "unprocessed") or (c.section and c.rank >= CURRENT):
        return c
    hits = [t for t in WAITING if any(_holds(p, c.key) for p in ranges[t])]
    section = hits[0] if len(hits) == 1 else (c.section or "unprocessed")
    return Copy(c.key, c.value, section, c.rank, c.pgno, c.message)


def _holds(p: Problem, key: bytes) -> bool:
    return (p.low is None or p.low <= key) and (p.high is None or key < p.high)
