"""LMDB 0.9's data file, page by page: the format ``verify.py`` reads by
hand, and the records of what it finds (``Problem``, ``Report``).

LMDB trusts its data file. A page that is not what its parent says (zeroed,
overwritten, a flipped byte in a child's page number) reaches an assertion
(``IS_LEAF(mp)`` in ``mdb_cursor_next`` on a zeroed page, ``IS_BRANCH`` in
``mdb_cursor_sibling``) and the process dies by SIGABRT, or a node offset past
its page makes LMDB read outside the map (SIGSEGV, SIGBUS). py-lmdb's patches
turn some of this into MDB_CORRUPTED, not a page's type against its place,
node offsets or key sizes. So the store and ``msgboard check`` verify the
pages first (``verify.py``) and let LMDB read only a file that passed.

The layout read here is LMDB 0.9's (data version 1) on a 64-bit machine, in
native byte order (``libraries/liblmdb/mdb.c``: ``MDB_page``, ``MDB_node``,
``MDB_db``, ``MDB_meta``):

- Page header, 16 bytes: ``mp_pgno`` u64 (its own number), ``mp_pad`` u16
  (key size on a LEAF2 page), ``mp_flags`` u16 (P_BRANCH 0x01, P_LEAF 0x02,
  P_OVERFLOW 0x04, P_META 0x08, P_DIRTY 0x10, P_LEAF2 0x20, P_SUBP 0x40),
  ``mp_lower`` u16, ``mp_upper`` u16 (an overflow page has instead
  ``mp_pages`` u32 there: the length of its run). Then ``(lower - 16) / 2``
  u16 offsets of the nodes, from the page's start; the nodes sit between
  ``upper`` and the end of the page.
- Node: ``mn_lo`` u16, ``mn_hi`` u16, ``mn_flags`` u16, ``mn_ksize`` u16,
  the key, then (leaf) the data. A branch node's child page is
  ``lo | hi << 16 | flags << 32`` (its first key is empty: the lower bound is
  the parent's). A leaf node's data size is ``lo | hi << 16``; flags
  F_BIGDATA 0x01 (the data is the u64 first page of an overflow run of
  ``OVPAGES(size) = (16 - 1 + size) // psize + 1`` pages, the data after the
  first page's header), F_SUBDATA 0x02 (the data is an ``MDB_db``: a named
  database in the main tree), F_DUPDATA 0x04 (the key's duplicates: with
  F_SUBDATA an ``MDB_db`` of a sub-tree, without it an inline sub-page,
  P_LEAF|P_SUBP, whose nodes' keys are the values).
- ``MDB_db``, 48 bytes: pad u32, flags u16, depth u16, branch, leaf and
  overflow page counts and entries u64, root pgno u64 (P_INVALID: empty).
- Meta page (pages 0 and 1): the header, then magic u32 0xBEEFC0DE, version
  u32, address u64, map size u64, the free list's ``MDB_db`` (its pad holds
  the page size) and the main one's, last page u64, txn id u64. Commit N
  writes slot N % 2, and an environment opened with its lock file reads and
  writes on slot ``newest txnid % 2`` (``mdb_txn_renew0``): swapped meta
  pages serve the older commit, and the next commit overwrites the newer.

Two depths. ``deep=False`` (the server's start) checks what LMDB relies on
not to crash; ``deep=True`` (``msgboard check``) adds every key's order,
the trees' counters and the free list against the pages in use. Costs on
the development VM, in CPU seconds: 0.37 (shallow) and 0.55 (deep) for a
100 MB file, 1.3 and 3.3 for a board of 100,000 queues (99 MB), 3.4 and 5.6
for 1 GB.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

PAGE_HEADER = 16
NODE_HEADER = 8
NUM_METAS = 2
MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
#: LMDB's cursor stack (CURSOR_STACK): no tree is deeper.
MAX_DEPTH = 32
P_INVALID = 2**64 - 1

P_BRANCH, P_LEAF, P_OVERFLOW, P_META = 0x01, 0x02, 0x04, 0x08
P_DIRTY, P_LEAF2, P_SUBP = 0x10, 0x20, 0x40
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
MDB_REVERSEKEY, MDB_DUPSORT, MDB_INTEGERKEY = 0x02, 0x04, 0x08
MDB_DUPFIXED, MDB_INTEGERDUP, MDB_REVERSEDUP = 0x10, 0x20, 0x40
#: Flags a stored MDB_db may carry (mdb.c's PERSISTENT_FLAGS).
DB_FLAGS = 0x7E

HEADER = struct.Struct("=QHHHH")  # pgno, pad, flags, lower, upper
NODE = struct.Struct("=HHHH")  # lo, hi, flags, ksize
DB = struct.Struct("=IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow, entries, root
META = struct.Struct("=IIQQ")  # magic, version, address, map size
U64 = struct.Struct("=Q")
U32 = struct.Struct("=I")
U16 = struct.Struct("=H")
SUBHEAD = struct.Struct("=HHH")  # a sub-page's flags, lower, upper (at +10)
#: The node offsets of a page of n nodes, for small n.
OFFSETS = [struct.Struct(f"={n}H") for n in range(16)]
_LITTLE = sys.byteorder == "little"


class NotLmdb(Exception):
    """The file cannot be read as an LMDB 0.9 data file at all (no valid meta
    page, a foreign layout): nothing past this can be checked."""


@dataclass(frozen=True, slots=True)
class Tree:
    """An ``MDB_db`` record: one B-tree's root and counters."""

    flags: int
    depth: int
    branch_pages: int
    leaf_pages: int
    overflow_pages: int
    entries: int
    root: int
    pad: int = 0

    @classmethod
    def parse(cls, buf: bytes, at: int) -> Tree:
        pad, flags, depth, branch, leaf, overflow, entries, root = DB.unpack_from(buf, at)
        return cls(flags, depth, branch, leaf, overflow, entries, root, pad)


@dataclass(frozen=True, slots=True)
class Meta:
    """One meta page (slot 0 or 1), as read; ``valid`` False when it is not
    one LMDB would accept (flags, magic, version)."""

    slot: int
    pgno: int
    valid: bool
    psize: int
    free: Tree
    main: Tree
    last_pgno: int
    txnid: int


@dataclass(frozen=True, slots=True)
class Problem:
    """One damage found: in which tree (``"main"``, ``"free"``, a named
    database, or ``"meta"``), on which page (-1: none in particular), what,
    and the keys the damaged subtree held: from ``low`` (None: the tree's
    start) up to, not including, ``high`` (None: its end)."""

    tree: str
    pgno: int
    what: str
    low: bytes | None = None
    high: bytes | None = None

    def __str__(self) -> str:
        where = f"page {self.pgno}: " if self.pgno >= 0 else ""
        keys = ""
        if self.low is not None and self.high == self.low + b"\0":
            keys = f" (key {self.low.hex()})"
        elif self.low is not None or self.high is not None:
            lo = "start" if self.low is None else self.low.hex()
            hi = "end" if self.high is None else self.high.hex()
            keys = f" (keys {lo} .. {hi})"
        return f"{self.tree}: {where}{self.what}{keys}"


@dataclass
class Report:
    """What ``verify`` found: the meta pages, the named databases, the
    damage, and how many pages were read."""

    path: str
    psize: int = 0
    metas: list[Meta] = field(default_factory=list)
    #: The meta page LMDB's writer would take (the higher valid txn id).
    meta: Meta | None = None
    named: dict[bytes, Tree] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    pages_read: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def ovpages(size: int, psize: int) -> int:
    return (PAGE_HEADER - 1 + size) // psize + 1


def order(flags: int) -> Callable[[bytes], bytes]:
    """The sort key of LMDB's built-in key comparator for these DB flags, as
    bytes compared lexically: reverse keys compare as their bytes reversed,
    and so do integer keys (native order, one size per database) on a
    little-endian machine."""
    if flags & MDB_REVERSEKEY or (flags & MDB_INTEGERKEY and _LITTLE):
        return reverse_key
    return same


def dup_order(flags: int) -> Callable[[bytes], bytes]:
    """The same for a dupsort database's values."""
    if flags & MDB_REVERSEDUP or (flags & MDB_INTEGERDUP and _LITTLE):
        return reverse_key
    return same


def same(key: bytes) -> bytes:
    return key


def reverse_key(key: bytes) -> bytes:
    return key[::-1]


class Bad(Exception):
    """A page (or node) that fails a check: its subtree is skipped."""


@dataclass(slots=True)
class Walk:
    """The state of one tree's walk, and what it counted."""

    name: str
    tree: Tree
    order: Callable[[bytes], bytes]
    #: Keep the leaf entries (key, value): a salvage walk, the main tree's
    #: named databases, the free list's page lists.
    keep: bool
    #: A duplicates sub-tree: its leaf keys are the values of ``dupkey``.
    dupkey: bytes | None = None
    is_free: bool = False
    branch: int = 0
    leaf: int = 0
    overflow: int = 0
    entries: int = 0
    dup_pages: int = 0
    #: The last key met (its sort key), for the deep order check.
    last: bytes | None = None


def uniform(page: bytes, h: memoryview, offs: tuple[int, ...], upper: int) -> bool:
    """True for a leaf whose nodes are all alike, with no flags, and
    tile the page from ``upper`` (a duplicates sub-tree of 8-byte seqs:
    hundreds of nodes): checked in a few C-speed steps, not node by
    node. False: not such a page (check it the long way)."""
    o = offs[0]
    i = o >> 1
    if o & 1 or h[i + 2]:
        return False
    size = NODE_HEADER + h[i + 3] + (h[i] | h[i + 1] << 16)
    size += size & 1  # LMDB keeps nodes 2-byte aligned (EVEN)
    psize = len(page)
    if size & 7 or len(offs) * size != psize - upper:
        return False
    heads = memoryview(page)[upper:].cast("Q")[:: size >> 3].tolist()
    return heads.count(heads[0]) == len(offs) and sorted(offs) == list(range(upper, psize, size))


def plain_subpage(page: bytes, at: int, size: int) -> int:
    """The shallow check of a duplicates sub-page in as few steps as it
    takes (an index of many small keys has one per key): the number of
    its values if it is sound; 0 sends it to the long check (``DataFile._subpage``), which says
    what is wrong (or checks one of more than 15 values)."""
    if size < PAGE_HEADER:
        return 0
    flags, lower, upper = SUBHEAD.unpack_from(page, at + 10)
    n: int = (lower - PAGE_HEADER) >> 1
    if flags | P_DIRTY != P_LEAF | P_SUBP | P_DIRTY or not 0 < n < 16:
        return 0
    if lower > upper or upper > size:
        return 0
    offs = OFFSETS[n].unpack_from(page, at + PAGE_HEADER)
    if min(offs) < upper or max(offs) > size - NODE_HEADER:
        return 0
    u16 = U16.unpack_from
    for o in offs:
        if o + NODE_HEADER + u16(page, at + o + 6)[0] > size:
            return 0
    return n
