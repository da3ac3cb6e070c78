"""The data file checked before LMDB maps it: its meta pages, read by hand.

LMDB maps ``data.mdb`` and trusts it: a file shorter than its meta page says
(cut by a full disk, a bad copy, a truncating tool) kills the process with
SIGBUS at the first read of a page past its end, at start or at the first
Take. So every opener calls ``check`` first, which reads the two meta pages
(pages 0 and 1) as LMDB 0.9 writes them on a 64-bit machine, takes the one
with the higher transaction id (LMDB's choice too), and refuses the file,
with one line, when it is not an LMDB file or is cut short.

Short is not simply "smaller than ``(last page + 1) * page size``": LMDB
never writes a page that a transaction allocated and freed again (a
"loose" page), so a healthy file may end a few dozen pages early; such
pages are in the free list. When the file ends early, ``check`` reads the
free list's B-tree by hand (``pread``, never past the end) and refuses the
file only if a missing page is not free, that is, if a page LMDB may read
is not there.

A meta page: a 16-byte page header (pgno u64, pad u16, flags u16,
lower u16, upper u16), then ``MDB_meta``: magic u32 (0xBEEFC0DE), version
u32, address u64, map size u64, two ``MDB_db`` of 48 bytes (the free
list's, then the main one's: pad u32, the free list's holding the page
size, flags u16, depth u16, four u64 counts, root page u64), last page
number u64, txn id u64. A tree page: the header, then ``(lower - 16) / 2``
u16 node offsets; a node is lo u16, hi u16, flags u16, key size u16, key,
data (a branch node's child page is lo | hi << 16 | flags << 32; a leaf
node's data size is lo | hi << 16, and with flag 1 its data is the u64
number of an overflow page run). A free-list entry is an ID list: a u64
count, then that many u64 page numbers. Native byte order.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from msgboard.errors import DataFileDamaged

FILE = "data.mdb"
MAGIC = 0xBEEFC0DE
#: MDB_meta after the page header: magic, version, address, mapsize, then
#: FREE_DBI's md_pad (the page size) and md_root, MAIN_DBI, last_pg, txnid.
_META = struct.Struct("=IIQQI36xQ48xQQ")
_HEADER = 16
_NODE = struct.Struct("=HHHH")
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_P_BRANCH, _P_LEAF, _P_OVERFLOW, _P_META = 0x01, 0x02, 0x04, 0x08
_F_BIGDATA = 0x01
_P_INVALID = 2**64 - 1
#: Pages read from the free list at most (a loop guard).
_MAX_PAGES = 1 << 20


class _Short(Exception):
    """A page needed is past the end of the file."""


@dataclass(frozen=True, slots=True)
class _MetaPage:
    psize: int
    free_root: int
    last: int
    txnid: int


def _meta(data: bytes, at: int) -> _MetaPage | None:
    """The meta page at ``at``; None if it is not one."""
    if len(data) < at + _HEADER + _META.size:
        return None
    flags = _U16.unpack_from(data, at + 10)[0]
    magic, _version, _addr, _mapsize, psize, root, last, txnid = _META.unpack_from(
        data, at + _HEADER
    )
    if magic != MAGIC or not flags & _P_META or psize < 512 or psize & (psize - 1):
        return None
    return _MetaPage(psize, root, last, txnid)


def _metas(path: str) -> tuple[_MetaPage, int]:
    """The newer valid meta page and the file's size; DataFileDamaged if
    there is none."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_HEADER + _META.size)
        first = _meta(head, 0)
        metas = [first] if first else []
        # The second meta page sits one page in: at the first's page size,
        # or (first page damaged) at a common one.
        for psize in [first.psize] if first else [4096, 8192, 16384, 65536]:
            f.seek(psize)
            other = _meta(f.read(_HEADER + _META.size), 0)
            if other is not None:
                metas.append(other)
                break
    if not metas:
        raise DataFileDamaged(f"{path}: not an LMDB data file (no valid meta page); {size} bytes")
    return max(metas, key=lambda m: m.txnid), size


def _free(f: BinaryIO, psize: int, pages: int, root: int, lowest: int) -> set[int]:
    """The free pages numbered ``lowest`` or more, from the free list whose
    B-tree root is ``root``, reading only the file's first ``pages`` pages;
    _Short if the tree reaches past them."""

    def read(pgno: int, n: int = 1) -> bytes:
        if pgno + n > pages:
            raise _Short(pgno)
        f.seek(pgno * psize)
        return f.read(n * psize)

    found: set[int] = set()
    todo = [] if root == _P_INVALID else [root]
    visited = 0
    while todo:
        visited += 1
        if visited > _MAX_PAGES:
            raise _Short(-1)
        page = read(todo.pop())
        flags, lower = _U16.unpack_from(page, 10)[0], _U16.unpack_from(page, 12)[0]
        for i in range((lower - _HEADER) // 2):
            off = _U16.unpack_from(page, _HEADER + 2 * i)[0]
            lo, hi, nflags, ksize = _NODE.unpack_from(page, off)
            if flags & _P_BRANCH:
                todo.append(lo | hi << 16 | nflags << 32)
                continue
            if not flags & _P_LEAF:
                raise _Short(-1)  # not a tree page: damaged
            dsize, at = lo | hi << 16, off + _NODE.size + ksize
            if nflags & _F_BIGDATA:
                first = _U64.unpack_from(page, at)[0]
                n = _U32.unpack_from(read(first), 12)[0]
                data = read(first, n)[_HEADER : _HEADER + dsize]
            else:
                data = page[at : at + dsize]
            count = _U64.unpack_from(data)[0]
            found.update(p for p in struct.unpack_from(f"={count}Q", data, 8) if p >= lowest)
    return found


def expected_size(path: str) -> tuple[int, int]:
    """(the size the meta pages call for, the file's size) of the data file
    at ``path``; DataFileDamaged if it is not an LMDB data file."""
    meta, size = _metas(path)
    return (meta.last + 1) * meta.psize, size


def check(directory: str) -> None:
    """Refuses, with one line (DataFileDamaged), a data file in
    ``directory`` that LMDB could not map safely. No file: nothing to
    check (LMDB creates it). An empty file: LMDB initializes it."""
    path = os.path.join(directory, FILE)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    meta, size = _metas(path)
    need = (meta.last + 1) * meta.psize
    if size >= need:
        return
    pages = size // meta.psize
    missing = set(range(pages, meta.last + 1))
    try:
        with open(path, "rb") as f:
            if missing <= _free(f, meta.psize, pages, meta.free_root, pages):
                return  # only never-written free pages are missing
    except (_Short, struct.error):
        pass  # the free list itself is cut short: the file is truncated
    raise DataFileDamaged(
        f"{path} is truncated: {size} bytes, its meta page says at least {need}; "
        "restore it from a snapshot (msgboard check DIR tells what a copy holds)"
    )
