"""LMDB's pages checked by hand, before LMDB reads them: ``DataFile`` walks
every B-tree of ``data.mdb`` with ``os.pread`` (never a map, so a damaged
or short file is a finding here, never a signal) and records each page
LMDB could not walk safely as a ``pages.Problem`` with its place (tree,
page, and the key range the parent gives the damaged subtree). The format
it reads, and why LMDB dies on such pages, is in ``pages.py``.

``verify(path)`` checks the whole file (``msgboard check``: ``deep``; the
server's start: shallow); ``DataFile(path).items(name)`` yields the
readable entries of one named database in key order and skips damaged
subtrees: the salvage walk ``check`` and ``check --repair`` read with.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from itertools import pairwise

from msgboard.lmdbstore.pages import (
    DATA_VERSION,
    DB,
    DB_FLAGS,
    F_BIGDATA,
    F_DUPDATA,
    F_SUBDATA,
    HEADER,
    MAGIC,
    MAX_DEPTH,
    MDB_DUPFIXED,
    MDB_DUPSORT,
    MDB_INTEGERKEY,
    META,
    NODE,
    NODE_HEADER,
    NUM_METAS,
    P_BRANCH,
    P_DIRTY,
    P_INVALID,
    P_LEAF,
    P_LEAF2,
    P_META,
    P_OVERFLOW,
    P_SUBP,
    PAGE_HEADER,
    U16,
    U32,
    U64,
    Bad,
    Meta,
    NotLmdb,
    Problem,
    Report,
    Tree,
    Walk,
    dup_order,
    order,
    ovpages,
    plain_subpage,
    uniform,
)


class DataFile:
    """An LMDB data file opened for reading by hand (``os.pread``).

    Shallow (``deep=False``) checks what LMDB relies on not to crash: every
    page reached is in the file, reached once, stores its own number, has
    the type its place needs (branch above, leaf at the tree's depth,
    overflow where a node says), sane bounds; every node lies in its page
    with its key and data; a branch has two children or more and its
    separators are in order; a leaf's first and last keys are in the range
    its parent gives it; duplicates sub-pages and sub-trees likewise.
    ``deep`` adds what ``msgboard check`` wants: every key in order, each
    tree's counters, and the free list against the pages in use."""

    def __init__(self, path: str, *, deep: bool = True, txnid: int | None = None) -> None:
        """``txnid``: walk the commit of that id (a reader pinned by the
        caller keeps its pages), LookupError if neither meta page holds it."""
        self.path = os.path.join(path, "data.mdb") if os.path.isdir(path) else path
        self.deep = deep
        self._txnid = txnid
        self.report = Report(self.path)
        #: When a dict: each page read, with its tree and kind (the sweep's map).
        self.trace: dict[int, str] | None = None
        #: Each free page, with the commit that freed it (a deep ``verify``).
        self.freed: dict[int, int] = {}
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            self._size = os.fstat(self._fd).st_size
            self._read_metas()
        except BaseException:
            os.close(self._fd)
            raise
        meta = self.report.meta
        assert meta is not None
        self.psize = meta.psize
        #: Pages LMDB may read: below the committed last page, and in the file.
        self.pages = min(meta.last_pgno + 1, self._size // self.psize)
        self._seen = bytearray(meta.last_pgno + 1)

    def close(self) -> None:
        os.close(self._fd)

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes of the file from ``offset`` (fewer past its end)."""
        return os.pread(self._fd, size, offset)

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta pages ---------------------------------------------------

    def _read_metas(self) -> None:
        head = os.pread(self._fd, PAGE_HEADER + META.size + 2 * DB.size + 16, 0)
        first = self._meta(0, head)
        # The second meta page sits one page in: at the first's page size,
        # or (first damaged) at the first common size where one is found.
        psizes = [first.psize] if first.valid else [4096, 8192, 16384, 32768, 65536, 512, 1024]
        second = None
        for psize in psizes:
            second = self._meta(1, os.pread(self._fd, len(head), psize))
            if second.valid and second.psize == psize:
                break
        metas = [first] if second is None else [first, second]
        self.report.metas = metas
        valid = [m for m in metas if m.valid]
        if not valid:
            raise NotLmdb(f"{self.path}: no valid LMDB meta page ({self._size} bytes)")
        meta = max(valid, key=lambda m: m.txnid)
        if self._txnid is not None:
            pinned = [m for m in valid if m.txnid == self._txnid]
            if not pinned:
                raise LookupError(f"commit {self._txnid} is no longer on a meta page")
            meta = pinned[0]
        self.report.meta = meta
        self.report.psize = meta.psize
        for m in metas:
            if not m.valid:
                self._problem("meta", m.slot, "not a valid meta page: LMDB refuses to open it")
            elif m.pgno != m.slot:
                self._problem("meta", m.slot, f"meta page stores page number {m.pgno}")
            elif m.txnid and m.txnid % 2 != m.slot:
                self._problem(
                    "meta",
                    m.slot,
                    f"txn {m.txnid} in slot {m.slot}: the meta pages are swapped or "
                    "copied (readers would see another commit than the writer)",
                )
        if len(valid) == 2 and valid[0].txnid == valid[1].txnid and valid[0].txnid:
            self._problem("meta", -1, f"both meta pages hold txn {valid[0].txnid}")
        # A file may end a few (free, never written) pages before its last
        # page; far more is a damaged meta page, and would make the page
        # map below huge.
        in_file = self._size // meta.psize
        if not NUM_METAS <= meta.last_pgno < in_file + max(in_file, 1 << 20):
            raise NotLmdb(
                f"{self.path}: its meta page says {meta.last_pgno + 1} pages, "
                f"the file holds {in_file}"
            )

    def _meta(self, slot: int, buf: bytes) -> Meta:
        if len(buf) < PAGE_HEADER + META.size + 2 * DB.size + 16:  # a file cut short
            empty = Tree(0, 0, 0, 0, 0, 0, P_INVALID)
            return Meta(slot, -1, False, 0, empty, empty, 0, 0)
        pgno, _pad, flags, _lo, _up = HEADER.unpack_from(buf, 0)
        magic, version, _addr, _mapsize = META.unpack_from(buf, PAGE_HEADER)
        at = PAGE_HEADER + META.size
        free, main = Tree.parse(buf, at), Tree.parse(buf, at + DB.size)
        last, txnid = struct.unpack_from("=QQ", buf, at + 2 * DB.size)
        psize = free.pad  # mm_psize is the free list's md_pad
        valid = (
            bool(flags & P_META)
            and magic == MAGIC
            and version == DATA_VERSION
            and 512 <= psize <= 65536
            and not psize & (psize - 1)
        )
        return Meta(slot, pgno, valid, psize, free, main, last, txnid)

    # -- problems and pages -------------------------------------------

    def _problem(
        self, tree: str, pgno: int, what: str, low: bytes | None = None, high: bytes | None = None
    ) -> None:
        p = Problem(tree, pgno, what, low, high)
        if p not in self.report.problems:  # a second walk meets the same damage
            self.report.problems.append(p)

    def _page(self, pgno: int, what: str) -> bytes:
        """Page ``pgno``, once per walk; Bad if LMDB may not read it."""
        if pgno < NUM_METAS or pgno >= len(self._seen):
            raise Bad(f"{what} points at page {pgno}, outside 2..{len(self._seen) - 1}")
        if pgno >= self.pages:
            raise Bad(f"{what} points at page {pgno}, past the end of the file")
        if self._seen[pgno]:
            raise Bad(f"{what} points at page {pgno}, which is reached twice")
        self._seen[pgno] = 1
        self.report.pages_read += 1
        return os.pread(self._fd, self.psize, pgno * self.psize)

    # -- the walk -----------------------------------------------------

    def verify(self, names: Iterable[bytes] | None = None) -> Report:
        """Walks the free list, the main tree and the named databases
        (``names``: only those; None: all), recording every problem."""
        meta = self.report.meta
        assert meta is not None
        free = Walk("free", meta.free, order(MDB_INTEGERKEY), self.deep, is_free=True)
        entries = [(k, v) for k, v in self._tree(free) if isinstance(v, bytes)]
        lists = [v for _, v in entries]
        for key, value in entries:  # txn id (native u64) -> an ID list: count, pages
            count = U64.unpack_from(value)[0] if len(key) == 8 and len(value) >= 8 else 0
            if len(value) == 8 + 8 * count:
                txnid = U64.unpack(key)[0]
                self.freed.update(dict.fromkeys(struct.unpack_from(f"={count}Q", value, 8), txnid))
        named = self.named()
        for name in named if names is None else [n for n in names if n in named]:
            for _ in self._entries(name, keep=False):
                pass
        if self.deep and names is None and not self.report.problems:
            self._cover(lists)
        if self.deep and names is None:
            self._metas_deep()
        return self.report

    def _metas_deep(self) -> None:
        """Both meta pages, beyond what LMDB checks (issue 42): nothing but
        zeros past the meta record; the other one holds the commit before
        (same page size, no more pages), and its free list and main tree
        walk whole (LMDB reuses no page of the commit before the last)."""
        meta = self.report.meta
        assert meta is not None
        end = PAGE_HEADER + META.size + 2 * DB.size + 16
        sizes = {}
        for m in self.report.metas:
            if not m.valid:
                continue
            at = m.slot * self.psize
            if self.pread(self.psize - end, at + end).strip(b"\0"):
                self._problem("meta", m.slot, "bytes past its meta record are not zero")
            address, sizes[m.slot] = META.unpack(self.pread(META.size, at + PAGE_HEADER))[2:]
            if address or m.free.flags != MDB_INTEGERKEY or m.main.pad or m.main.flags:
                self._problem(
                    "meta",
                    m.slot,
                    f"address {address:#x}, free list flags {m.free.flags:#x}, main tree flags "
                    f"{m.main.flags:#x} and pad {m.main.pad}: not LMDB's 0, 0x8, 0 and 0",
                )
        for m in self.report.metas:
            if not m.valid or m is meta or m.txnid == meta.txnid:
                continue
            if (
                m.txnid != meta.txnid - 1
                or m.psize != meta.psize
                or m.last_pgno > meta.last_pgno
                or sizes[m.slot] > sizes[meta.slot]
            ):
                self._problem(
                    "meta",
                    m.slot,
                    f"txn {m.txnid}, {m.last_pgno + 1} pages, page size {m.psize}, map size "
                    f"{sizes[m.slot]}: not the commit before txn {meta.txnid} "
                    f"({meta.last_pgno + 1} pages, map size {sizes[meta.slot]})",
                )
                continue
            if m.txnid == 0:  # the first meta page of a new file or a compacting copy
                if m.free.root != P_INVALID or m.main.root != P_INVALID:
                    self._problem("meta", m.slot, "txn 0 with trees: not LMDB's first meta page")
                continue
            try:
                older = DataFile(self.path, deep=True, txnid=m.txnid)
            except (LookupError, NotLmdb):
                continue  # a live board committed since: that commit is gone, nothing to check
            with older:
                for p in older.verify(names=()).problems:
                    if p.tree in ("free", "main"):
                        what = f"the {p.tree} tree of the older meta page (txn {m.txnid}): {p.what}"
                        self._problem("meta", m.slot, what)

    def named(self) -> dict[bytes, Tree]:
        """The named databases' records, from the main tree (read once).
        A damaged main tree of one page (a board's: fourteen records) is
        read node by node: every record that still reads is used (its
        tree's own pages are checked as they are walked)."""
        if not self.report.named and not any(p.tree == "main" for p in self.report.problems):
            meta = self.report.meta
            assert meta is not None
            main = Walk("main", meta.main, order(meta.main.flags), True)
            for key, value in self._tree(main):
                if isinstance(value, Tree):
                    self.report.named[key] = value
            if any(p.tree == "main" for p in self.report.problems) and meta.main.depth == 1:
                self.report.named = self._named_leniently(meta.main.root)
        return self.report.named

    def _named_leniently(self, pgno: int) -> dict[bytes, Tree]:
        """The named-database records that still read on the damaged main
        leaf ``pgno``: nodes found where a node may start, whatever the page
        header says, each a printable name and a sane ``MDB_db``."""
        if not NUM_METAS <= pgno < self.pages:
            return {}
        page = os.pread(self._fd, self.psize, pgno * self.psize)
        found: dict[bytes, Tree] = {}
        for o in range(PAGE_HEADER, len(page) - NODE_HEADER - DB.size, 2):
            lo, hi, flags, ksize = NODE.unpack_from(page, o)
            at = o + NODE_HEADER + ksize
            if flags != F_SUBDATA or (lo | hi << 16) != DB.size or not 0 < ksize <= 64:
                continue
            if at + DB.size > len(page):
                continue
            name = page[o + NODE_HEADER : at]
            if not name.isascii() or not name.isalpha() or name in found:
                continue
            sub = Tree.parse(page, at)
            ok_root = sub.root == P_INVALID or NUM_METAS <= sub.root < self.pages
            if ok_root and not sub.flags & ~DB_FLAGS and sub.depth <= MAX_DEPTH:
                found[name] = sub
        return found

    def items(self, name: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The readable entries of the named database ``name`` in key order
        (a dupsort database: one per value); damaged subtrees are skipped
        and recorded in ``report.problems``: the salvage walk. Each call
        walks the tree afresh."""
        self.named()
        self._seen = bytearray(len(self._seen))
        yield from self._entries(name, keep=True)

    def _entries(self, name: bytes, keep: bool) -> Iterator[tuple[bytes, bytes]]:
        t = self.named().get(name)
        if t is None:
            return
        w = Walk(name.decode(errors="replace"), t, order(t.flags), keep)
        for key, value in self._tree(w):
            if isinstance(value, bytes):
                yield key, value

    def _tree(self, w: Walk) -> Iterator[tuple[bytes, bytes | Tree]]:
        """Walks one tree depth first, in key order; yields the entries of
        its leaves when ``w.keep``."""
        t = w.tree
        if t.root == P_INVALID:
            if t.depth or t.entries or t.leaf_pages or t.branch_pages:
                self._problem(w.name, -1, "empty (no root) but its counters are not 0")
            return
        if not 1 <= t.depth <= MAX_DEPTH:
            self._problem(w.name, -1, f"depth {t.depth} is not 1..{MAX_DEPTH}")
            return
        # (pgno, depth, low, high): the keys its subtree may hold, from low
        # up to, not including, high (None: open).
        stack: list[tuple[int, int, bytes | None, bytes | None]] = [(t.root, 1, None, None)]
        while stack:
            pgno, depth, low, high = stack.pop()
            try:
                page = self._page(pgno, "the root" if depth == 1 else "a branch node")
                if self.trace is not None:
                    kind = "branch" if depth < t.depth else "leaf"
                    self.trace[pgno] = f"{w.name}{'(dups)' if w.dupkey else ''} {kind}"
                if depth < t.depth:
                    children = self._branch(w, page, pgno, low, high)
                    stack += [(c, depth + 1, lo, hi) for c, lo, hi in reversed(children)]
                    w.branch += 1
                    continue
                w.leaf += 1
                yield from self._leaf(w, page, pgno, low, high)
            except Bad as e:
                self._problem(w.name, pgno, str(e), low, high)
                w.last = None  # the next page's keys are compared afresh
            except struct.error as e:  # a field past the page: never expected
                self._problem(w.name, pgno, f"unreadable ({e})", low, high)
                w.last = None
        if self.deep and not any(p.tree == w.name for p in self.report.problems):
            self._counters(w)

    def _header(self, page: bytes, pgno: int, want: int) -> tuple[int, int]:
        """Checks a tree page's header; its (upper, number of nodes)."""
        stored, _pad, flags, lower, upper = HEADER.unpack_from(page, 0)
        if stored != pgno:
            raise Bad(f"stores page number {stored} (flags {flags:#x}): overwritten")
        if flags & ~P_DIRTY != want:
            raise Bad(f"flags {flags:#x}, its parent needs {want:#x}")
        if flags & P_DIRTY:
            raise Bad("marked dirty at rest")
        if lower < PAGE_HEADER or upper > len(page) or lower > upper or lower & 1 or upper & 1:
            raise Bad(f"bounds lower {lower}, upper {upper}")
        return upper, (lower - PAGE_HEADER) >> 1

    def _offsets(self, page: bytes, at: int, upper: int, n: int, size: int) -> tuple[int, ...]:
        """The ``n`` node offsets of the (sub-)page of ``size`` bytes at
        ``at``, checked to lie between ``upper`` and its end less a node
        header."""
        offs = struct.unpack_from(f"={n}H", page, at + PAGE_HEADER)
        if min(offs) < upper or max(offs) > size - NODE_HEADER:
            raise Bad(f"node offsets outside {upper}..{size}")
        return offs

    def _branch(
        self, w: Walk, page: bytes, pgno: int, low: bytes | None, high: bytes | None
    ) -> list[tuple[int, bytes | None, bytes | None]]:
        """A branch page's children with their key ranges: child i holds
        the keys from separator i (the first: the page's own low bound) up
        to separator i + 1."""
        upper, n = self._header(page, pgno, P_BRANCH)
        if n < (1 if w.is_free else 2):  # LMDB asserts NUMKEYS > 1 (but in the free list)
            raise Bad(f"a branch page of {n} node(s)")
        children: list[int] = []
        bounds: list[bytes | None] = [low]
        for o in self._offsets(page, 0, upper, n, len(page)):
            lo, hi, flags, ksize = NODE.unpack_from(page, o)
            if o + NODE_HEADER + ksize > len(page):
                raise Bad(f"a separator key past the page, at {o}")
            children.append(lo | hi << 16 | flags << 32)
            if len(children) > 1:
                bounds.append(page[o + NODE_HEADER : o + NODE_HEADER + ksize])
        bounds.append(high)
        order = [w.order(k) for k in bounds if k is not None]
        if any(a >= b for a, b in pairwise(order)):
            raise Bad("separator keys out of order or outside the page's range")
        return [(c, bounds[i], bounds[i + 1]) for i, c in enumerate(children)]

    def _leaf(
        self, w: Walk, page: bytes, pgno: int, low: bytes | None, high: bytes | None
    ) -> list[tuple[bytes, bytes | Tree]]:
        """Checks a leaf page; its entries when ``w.keep`` (checked whole
        before any is returned: a damaged page gives none)."""
        dupfixed = w.dupkey is not None and w.tree.flags & MDB_DUPFIXED
        upper, n = self._header(page, pgno, P_LEAF | P_LEAF2 if dupfixed else P_LEAF)
        if n < 1:
            raise Bad("an empty leaf page")
        if dupfixed:
            return self._leaf2(w, page, n, low, high)
        psize = len(page)
        offs = self._offsets(page, 0, upper, n, psize)
        if any(o & 1 for o in (offs[0], offs[-1])) or psize & 1:
            raise Bad("a node at an odd offset")
        h = memoryview(page).cast("H")  # node fields are 2-byte aligned
        for o in {offs[0], offs[-1]}:
            end = o + NODE_HEADER + h[(o >> 1) + 3]
            if end > psize:
                raise Bad(f"a node's key past the page, at {o}")
            self._bounded(w, page[o + NODE_HEADER : end], low, high)
        w.entries += n
        keep = w.keep or self.deep
        if not keep and uniform(page, h, offs, upper):
            return []
        if not keep:
            # One pass for aligned nodes whose data (or duplicates sub-page)
            # ends in the page; any other node (other flags, an odd offset,
            # too long) makes the worst end past the page, and the pass
            # below says which.
            worst = max(
                o
                + NODE_HEADER
                + h[(i := o >> 1) + 3]
                + (h[i] | h[i + 1] << 16 | (h[i + 2] & ~F_DUPDATA) << 32)
                + ((o & 1) << 48)
                for o in offs
            )
            if worst <= psize:
                dups = [
                    plain_subpage(
                        page, o + NODE_HEADER + h[(i := o >> 1) + 3], h[i] | h[i + 1] << 16
                    )
                    for o in offs
                    if h[(o >> 1) + 2]
                ]
                if all(dups):
                    w.entries += sum(dups) - len(dups)
                    return []
        out: list[tuple[bytes, bytes | Tree]] = []
        for o in offs:
            if o & 1:
                raise Bad(f"a node at odd offset {o}")
            i = o >> 1
            size, flags, at = h[i] | h[i + 1] << 16, h[i + 2], o + NODE_HEADER + h[i + 3]
            if at > psize:
                raise Bad(f"a node's key past the page, at {o}")
            key = page[o + NODE_HEADER : at] if keep else b""
            if self.deep:
                self._in_order(w, w.order(key))
            if flags == 0:
                if at + size > psize:
                    raise Bad(f"node data of {size} bytes past the page")
                if w.keep:
                    out.append((key, page[at : at + size]))
                continue
            if flags & ~(F_BIGDATA | F_SUBDATA | F_DUPDATA) or (
                flags & F_BIGDATA and flags & (F_SUBDATA | F_DUPDATA)
            ):
                raise Bad(f"node flags {flags:#x}")
            if flags & F_BIGDATA:
                if at + 8 > psize:
                    raise Bad("an overflow node past the page")
                value = self._overflow(w, U64.unpack_from(page, at)[0], size)
                if w.keep:
                    out.append((key, value))
                continue
            if at + size > psize:
                raise Bad(f"node data of {size} bytes past the page")
            if flags == F_DUPDATA:
                out += [(key, v) for v in self._subpage(w, page, at, size)]
                continue
            if size != DB.size:
                raise Bad(f"a sub-database record of {size} bytes")
            sub = Tree.parse(page, at)
            if sub.flags & ~DB_FLAGS or (
                sub.root != P_INVALID and not NUM_METAS <= sub.root < len(self._seen)
            ):
                raise Bad(f"sub-database record: flags {sub.flags:#x}, root {sub.root}")
            if flags & F_DUPDATA:
                out += [(key, v) for v in self._dups(w, key or page[o + 8 : at], sub)]
            else:
                out.append((page[o + NODE_HEADER : at], sub))  # a named database
        return out if w.keep else []

    def _leaf2(
        self, w: Walk, page: bytes, n: int, low: bytes | None, high: bytes | None
    ) -> list[tuple[bytes, bytes | Tree]]:
        """A LEAF2 page (a DUPFIXED duplicates tree): keys of ``mp_pad``
        bytes packed after the header, no nodes."""
        size = HEADER.unpack_from(page, 0)[1]
        if not size or PAGE_HEADER + n * size > len(page):
            raise Bad(f"LEAF2 keys of {size} bytes x {n}")
        keys = [page[PAGE_HEADER + i * size : PAGE_HEADER + (i + 1) * size] for i in range(n)]
        self._bounded(w, keys[0], low, high)
        self._bounded(w, keys[-1], low, high)
        if self.deep:
            for key in keys:
                self._in_order(w, w.order(key))
        w.entries += n
        return [(k, b"") for k in keys] if w.keep else []

    def _bounded(self, w: Walk, key: bytes, low: bytes | None, high: bytes | None) -> None:
        """Bad if ``key`` is outside the range the parent gives its page."""
        o = w.order(key)
        if (low is not None and o < w.order(low)) or (high is not None and o >= w.order(high)):
            raise Bad(f"key {key[:16].hex()} outside the range its parent gives")

    def _in_order(self, w: Walk, o: bytes) -> None:
        """Deep: Bad if the key (its sort key ``o``) is not past the last."""
        if w.last is not None and o <= w.last:
            raise Bad("keys out of order")
        w.last = o

    def _overflow(self, w: Walk, first: int, size: int) -> bytes:
        """The data of an overflow run (when ``w.keep``); Bad if its first
        page is not one, or the run is not all in the file."""
        n = ovpages(size, self.psize)
        if first + n > len(self._seen) or first + n > self.pages:
            raise Bad(f"an overflow run {first}+{n} past the last page")
        page = self._page(first, "an overflow node")
        stored, _pad, flags = HEADER.unpack_from(page, 0)[:3]
        pages = U32.unpack_from(page, 12)[0]
        if stored != first or flags != P_OVERFLOW or pages != n:
            raise Bad(f"overflow page {first}: number {stored}, flags {flags:#x}, {pages} pages")
        for p in range(first, first + n):
            if self.trace is not None:
                self.trace[p] = f"{w.name} overflow"
            if p != first and self._seen[p]:
                raise Bad(f"overflow page {p} is reached twice")
            self._seen[p] = 1
        w.overflow += n
        if not w.keep:
            return b""
        return os.pread(self._fd, size, first * self.psize + PAGE_HEADER)

    def _subpage(self, w: Walk, page: bytes, at: int, size: int) -> list[bytes]:
        """Checks the inline duplicates sub-page of ``size`` bytes at ``at``
        (a P_LEAF|P_SUBP page whose nodes' keys are the values); its values
        when ``w.keep``."""
        if size < PAGE_HEADER:
            raise Bad(f"a duplicates sub-page of {size} bytes")
        _pgno, pad, flags, lower, upper = HEADER.unpack_from(page, at)
        if not flags & P_SUBP or not flags & P_LEAF:
            raise Bad(f"a duplicates sub-page with flags {flags:#x}")
        if lower < PAGE_HEADER or upper > size or lower > upper:
            raise Bad(f"a duplicates sub-page with bounds {lower}/{upper} of {size}")
        n = (lower - PAGE_HEADER) >> 1
        if n < 1:
            raise Bad("an empty duplicates sub-page")
        w.entries += n - 1
        if flags & P_LEAF2:
            if not pad or PAGE_HEADER + n * pad > size:
                raise Bad(f"a LEAF2 sub-page of {n} x {pad} bytes")
            base = at + PAGE_HEADER
            values = [page[base + i * pad : base + (i + 1) * pad] for i in range(n)]
        else:
            offs = self._offsets(page, at, upper, n, size)
            ends = [o + NODE_HEADER + U16.unpack_from(page, at + o + 6)[0] for o in offs]
            if max(ends) > size:
                raise Bad("a value past its duplicates sub-page")
            if not (w.keep or self.deep):
                return []
            values = [page[at + o + NODE_HEADER : at + e] for o, e in zip(offs, ends, strict=True)]
        if self.deep:
            order = [dup_order(w.tree.flags)(v) for v in values]
            if any(a >= b for a, b in pairwise(order)):
                raise Bad("duplicates out of order in a sub-page")
        return values if w.keep else []

    def _dups(self, w: Walk, key: bytes, sub: Tree) -> list[bytes]:
        """The values of a duplicates sub-tree (its pages count as the
        parent's); its damage is reported under the parent's name, at the
        key whose duplicates it held."""
        d = Walk(w.name, sub, dup_order(w.tree.flags), w.keep, dupkey=key)
        before = len(self.report.problems)
        values = [v for v, _ in self._tree(d)]
        for i in range(before, len(self.report.problems)):
            p = self.report.problems[i]
            what = f"duplicates of key {key[:24].hex()}: {p.what}"
            self.report.problems[i] = Problem(w.name, p.pgno, what, key, key + b"\0")
        self.report.problems[before:] = list(dict.fromkeys(self.report.problems[before:]))
        w.entries += d.entries - 1
        w.dup_pages += d.branch + d.leaf
        w.overflow += d.overflow
        return values

    # -- deep checks --------------------------------------------------

    def _counters(self, w: Walk) -> None:
        """The tree's counters against the walk. A dupsort tree's page
        counts are only a lower bound: older writers count its own pages
        only, LMDB 0.9.36 adds its duplicates' sub-trees' pages as they are
        made but does not take them off when a key's sub-tree is dropped
        (its last value deleted, or the key with all its values:
        ``mdb_drop0`` on the sub-cursor), so they drift up as index keys
        come and go. Its entries and overflow pages are exact."""
        t = w.tree
        if w.dupkey is not None:
            return  # counted in the parent's
        if t.flags & MDB_DUPSORT:
            pages_ok = t.branch_pages >= w.branch and t.leaf_pages >= w.leaf
        else:
            pages_ok = (t.branch_pages, t.leaf_pages) == (w.branch, w.leaf)
        if not pages_ok or (t.overflow_pages, t.entries) != (w.overflow, w.entries):
            self._problem(
                w.name,
                -1,
                f"counters say {t.branch_pages} branch, {t.leaf_pages} leaf, "
                f"{t.overflow_pages} overflow pages and {t.entries} entries; the walk found "
                f"{w.branch}, {w.leaf} (+{w.dup_pages} in duplicates), {w.overflow}, {w.entries}",
            )

    def _cover(self, lists: list[bytes]) -> None:
        """Every page below the last is in use or free (in one of the free
        list's page ``lists``), never both. Only on a file with no other
        problem: a damaged tree leaves pages unseen."""
        free = bytearray(len(self._seen))
        for value in lists:
            count = U64.unpack_from(value)[0] if len(value) >= 8 else -1
            if len(value) != 8 + 8 * count:
                self._problem("free", -1, f"a free-list entry of {len(value)} bytes")
                continue
            for p in struct.unpack_from(f"={count}Q", value, 8):
                if p < len(free):
                    free[p] += 1
        seen = self._seen
        both = [p for p in range(NUM_METAS, len(seen)) if seen[p] and free[p]]
        leaked = [p for p in range(NUM_METAS, len(seen)) if not seen[p] and not free[p]]
        if both:
            self._problem("free", both[0], f"{len(both)} page(s) both in use and free")
        if leaked:
            self._problem("free", leaked[0], f"{len(leaked)} page(s) neither in use nor free")


def verify(
    path: str, *, deep: bool = True, names: Iterable[bytes] | None = None, txnid: int | None = None
) -> Report:
    """Checks the data file at ``path`` (a directory: its ``data.mdb``):
    every page of the free list, the main tree and the named databases
    (``names``: only those); ``deep=False`` checks only what LMDB needs to
    walk the trees without crashing; ``txnid``: the commit to walk (see
    ``DataFile``). Raises NotLmdb (and OSError) only when nothing can be
    checked."""
    with DataFile(path, deep=deep, txnid=txnid) as f:
        return f.verify(names)
