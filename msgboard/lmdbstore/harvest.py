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

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

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
                for key, value in _nodes(f, page, False, False, (lower, upper)):
                    c = _record(key, value, "", STALE, pgno)
                    if c is not None:
                        found.setdefault(key, []).append(c)
            if not (live or whole):
                continue  # read whole by the walk, or no records there
            h.pages_scanned += 1
            nodes = _nodes(f, page, trusted=live, small=bool(small))
            for key, value in nodes:
                if len(key) == KEY.size:
                    c = _record(key, value, tree if tree in RECORDS else "", rank, pgno)
                    if c is not None:
                        found.setdefault(key, []).append(c)
                        continue
                if tree in RECORDS:
                    h.damaged.append((tree, key, value))
                    continue
                if small and (rank < CURRENT or pgno in bad):
                    _small(h, key, value, rank)
        _choose(h, found)
    return h


def _unread(h: Harvest) -> set[str]:
    return {t for t in ("queues", "state", "meta") if h.unread(t)}


def _nodes(
    f: DataFile, page: bytes, trusted: bool, small: bool, span: tuple[int, int] | None = None
) -> list[tuple[bytes, bytes]]:
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
            out.append((key, page[at : at + size]))
        elif flags == F_BIGDATA and at + 8 <= psize and len(key) == KEY.size:
            value = _overflow(f, NATIVE_U64.unpack_from(page, at)[0], size)
            if value is not None:
                out.append((key, value))
    return out


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


def _choose(h: Harvest, found: dict[bytes, list[Copy]]) -> None:
    """The best copy of each record; an older copy (a free page's) only
    where no current page of its kind covers its key."""
    # Sections of pages no tree reaches: where one tree's damage alone may
    # hold the key, that tree.
    ranges = {t: h.ranges(t) for t in RECORDS}
    cover: dict[str, list[tuple[bytes, bytes]]] = {"waiting": [], "history": []}
    pages: dict[tuple[int, int], list[Copy]] = {}
    for copies in found.values():
        for c in copies:
            pages.setdefault((c.pgno, c.rank), []).append(c)
    for copies in pages.values():
        if copies[0].rank >= ORPHAN:
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
