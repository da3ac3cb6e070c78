"""The data file checked before LMDB maps it: its meta pages, read by hand.

LMDB maps ``data.mdb`` and trusts it: a file shorter than its meta page says
(cut by a full disk, a bad copy, a truncating tool) kills the process with
SIGBUS at the first read of a page past its end, at start or at the first
Take. So every opener calls ``check`` first, which reads the two meta pages
(pages 0 and 1) as LMDB 0.9 writes them on a 64-bit machine, takes the one
with the higher transaction id (LMDB's choice too), and refuses the file,
with one line, when it is not an LMDB file or is shorter than
``(last page + 1) * page size``.

A meta page: a 16-byte page header (pgno u64, pad u16, flags u16,
lower u16, upper u16), then ``MDB_meta``: magic u32 (0xBEEFC0DE), version
u32, address u64, map size u64, two ``MDB_db`` of 48 bytes (the first's
leading u32 is the page size), last page number u64, txn id u64.
Native byte order.
"""

from __future__ import annotations

import os
import struct

from msgboard.errors import DataFileDamaged

FILE = "data.mdb"
MAGIC = 0xBEEFC0DE
#: MDB_meta after the page header: magic, version, address, mapsize, then
#: FREE_DBI's md_pad (the page size) ... up to last_pg and txnid.
_META = struct.Struct("=IIQQI44x48xQQ")
_HEADER = 16
_P_META = 0x08


def _meta(data: bytes, at: int) -> tuple[int, int, int] | None:
    """(page size, last page, txn id) of the meta page at ``at``; None if
    it is not one."""
    if len(data) < at + _HEADER + _META.size:
        return None
    flags = struct.unpack_from("=H", data, at + 10)[0]
    magic, _version, _addr, _mapsize, psize, last, txnid = _META.unpack_from(data, at + _HEADER)
    if magic != MAGIC or not flags & _P_META or psize < 512 or psize & (psize - 1):
        return None
    return psize, last, txnid


def expected_size(path: str) -> tuple[int, int]:
    """(the size the meta pages call for, the file's size) of the data file
    at ``path``; DataFileDamaged if it is not an LMDB data file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_HEADER + _META.size)
        first = _meta(head, 0)
        metas = [first] if first else []
        # The second meta page sits one page in: at the first's page size,
        # or (first page damaged) at a common one.
        for psize in [first[0]] if first else [4096, 8192, 16384, 65536]:
            f.seek(psize)
            other = _meta(f.read(_HEADER + _META.size), 0)
            if other is not None:
                metas.append(other)
                break
    if not metas:
        raise DataFileDamaged(f"{path}: not an LMDB data file (no valid meta page); {size} bytes")
    psize, last, _ = max(metas, key=lambda m: m[2])
    return (last + 1) * psize, size


def check(directory: str) -> None:
    """Refuses, with one line (DataFileDamaged), a data file in
    ``directory`` that LMDB could not map safely. No file: nothing to
    check (LMDB creates it). An empty file: LMDB initializes it."""
    path = os.path.join(directory, FILE)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    need, size = expected_size(path)
    if size < need:
        raise DataFileDamaged(
            f"{path} is truncated: {size} bytes, its meta page says at least {need}; "
            "restore it from a snapshot (msgboard check DIR tells what a copy holds)"
        )
