"""What a data directory knows about its board outside ``data.mdb``: the
board marker and the commit sidecar, and the decision a store makes from
them before LMDB maps anything (``startup``).

``msgboard.board`` (the marker, JSON ``{"board": id, "created_at": µs,
"format": 1}``) is written once, when a board is created (a board made by
an older version gets one on its first open): it says a board lives here,
so a missing or empty ``data.mdb`` beside it is a lost file, never a new,
empty board. ``lock.mdb`` or the sidecar count as such a sign too (a board
older than the marker).

``msgboard.commit`` (the sidecar) holds the last LMDB transaction id the
board committed, and so answered for; the store rewrites it in place after
every commit, before any caller is answered. A data file whose meta page,
the one LMDB will serve, says an older commit (an older copy put back,
swapped or damaged meta pages) is refused at start, saying by how many
commits, instead of served as if nothing had happened.

Sidecar format, 64 bytes, native byte order as LMDB's: magic ``b"MBCT"``,
version u32 (1), txn id u64, board id u64 (the marker's), commit time µs
u64, then ``data.mdb``'s inode, size and ctime (ns) u64 as ``fstat`` gave
them just after that commit, CRC-32 u32 of the 56 bytes before it, 4 bytes
zero. One 64-byte ``pwrite`` at offset 0 lies within one sector, so a
process crash cannot tear it; the CRC catches a damaged one (then it counts
as no sidecar, with a warning). The write is not fsynced per commit (LMDB's
fsync already made the commit durable): after kill -9 the page cache holds
it, after a power loss it can only lag the data file, and a lagging sidecar
never refuses a good file. It is fsynced when the store closes.

The stat triple lets start-up skip the page verification when nothing but
this board wrote ``data.mdb`` since its last commit: any other write (a copy
put back, a tool, a damage harness) moves its ctime, which user space cannot
set back. Damage below the file system (a disk's bit rot) does not move it:
``msgboard check`` finds that.
"""

from __future__ import annotations

import json
import logging
import os
import random
import struct
import time
import zlib
from dataclasses import dataclass

from msgboard.errors import DataFileDamaged
from msgboard.lmdbstore.verify import DataFile

log = logging.getLogger("msgboard.store")

MARKER = "msgboard.board"
SIDECAR = "msgboard.commit"
DATA = "data.mdb"
_FORMAT = struct.Struct("=4sIQQQQQQI4x")
_HEAD = struct.Struct("=4sIQQQQQQ")
_MAGIC = b"MBCT"


@dataclass(frozen=True, slots=True)
class Commit:
    """What the sidecar says: the last committed txn id, of which board,
    when, and ``data.mdb``'s (inode, size, ctime ns) just after it."""

    txnid: int
    board: int
    at: int = 0
    stat: tuple[int, int, int] = (0, 0, 0)


def pack(c: Commit) -> bytes:
    head = _HEAD.pack(_MAGIC, 1, c.txnid, c.board, c.at, *c.stat)
    return head + struct.pack("=I4x", zlib.crc32(head))


def unpack(raw: bytes) -> Commit | None:
    """The sidecar's content; None if it is not a whole, valid one."""
    if len(raw) < _FORMAT.size:
        return None
    magic, version, txnid, board, at, ino, size, ctime, crc = _FORMAT.unpack_from(raw)
    if magic != _MAGIC or version != 1 or zlib.crc32(raw[: _HEAD.size]) != crc:
        return None
    return Commit(txnid, board, at, (ino, size, ctime))


def read(directory: str) -> Commit | None:
    """The sidecar of ``directory``; None if there is none (or it is damaged)."""
    try:
        with open(os.path.join(directory, SIDECAR), "rb") as f:
            return unpack(f.read(_FORMAT.size))
    except FileNotFoundError:
        return None


def data_stat(path: str) -> tuple[int, int, int]:
    """The (inode, size, ctime ns) of the file at ``path``."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_ctime_ns


class Sidecar:
    """The open sidecar of a data directory, for the store's life: ``write``
    after each commit (one ``pwrite``), ``close`` fsyncs it."""

    __slots__ = ("_data", "_failed", "_fd", "board", "path")

    def __init__(self, directory: str, board: int) -> None:
        self.path = os.path.join(directory, SIDECAR)
        self.board = board
        self._data = os.open(os.path.join(directory, DATA), os.O_RDONLY)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._failed = False

    def write(self, txnid: int) -> None:
        """Records commit ``txnid`` and the data file's stat after it. The
        commit is made: a sidecar the disk refuses is logged, never raised
        (the next start then finds it behind, and catches up)."""
        try:
            st = os.fstat(self._data)
            stat = (st.st_ino, st.st_size, st.st_ctime_ns)
            os.pwrite(self._fd, pack(Commit(txnid, self.board, time.time_ns() // 1000, stat)), 0)
        except OSError as e:
            if not self._failed:
                log.error("%s: the commit sidecar could not be written: %s", self.path, e)
            self._failed = True

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            os.close(self._data)


def write_marker(directory: str, board: int, created_at: int) -> None:
    """Writes the marker, durably (the file, then the directory, fsynced)."""
    path = os.path.join(directory, MARKER)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"board": board, "created_at": created_at, "format": 1}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_marker(directory: str) -> int | None:
    """The board id of the marker; None if there is none, 0 if it does not
    parse (a board lived here all the same)."""
    path = os.path.join(directory, MARKER)
    try:
        with open(path) as f:
            return int(json.load(f)["board"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def new_board_id() -> int:
    return random.SystemRandom().getrandbits(63) or 1


@dataclass(frozen=True, slots=True)
class Verdict:
    """What start-up does: ``new`` (make a board and its marker) or serve;
    ``note``: a line to log; ``verify``: whether the pages need verifying
    (False: unchanged since this board's last commit)."""

    new: bool = False
    note: str = ""
    verify: bool = True
    #: How the pages were verified (empty: they were not).
    checked: str = ""


def startup(
    directory: str, *, init: bool = False, synced: bool = True, accept_rollback: bool = False
) -> Verdict:
    """Decides, before LMDB maps anything, whether ``directory`` may be
    served; raises DataFileDamaged with one line when it may not: a board
    lived here but its data file is missing or empty (unless ``init``), or
    the meta page LMDB would serve is out of place or behind the sidecar
    (unless ``accept_rollback``). ``synced``: the board commits with fsync;
    without it a machine crash may lose the last commits, so behind is a
    warning, not a refusal. Call ``datafile.check`` first (a file that is
    not LMDB's is refused there)."""
    data = os.path.join(directory, DATA)
    size = os.path.getsize(data) if os.path.exists(data) else -1
    if size <= 0:
        what = "missing" if size < 0 else "empty (0 bytes)"
        signs = [f for f in (MARKER, SIDECAR, "lock.mdb") if os.path.exists(f"{directory}/{f}")]
        if signs and not init:
            raise DataFileDamaged(
                f"{directory} held a board ({', '.join(signs)} are there), but its {DATA} is "
                f"{what}: restore it from a snapshot, or start with --init to make a new, "
                "empty board here"
            )
        return Verdict(new=True)
    with DataFile(directory) as f:
        metas = f.report.metas
        misplaced = [p for p in f.report.problems if p.tree == "meta"]
    newest = max((m for m in metas if m.valid), key=lambda m: m.txnid)
    # LMDB opened with its lock file reads slot `newest txnid % 2`
    # (mdb_txn_renew0): a meta page out of its slot serves another commit.
    used = metas[newest.txnid % 2] if len(metas) == 2 else newest
    side = read(directory)
    last = f"the board's last commit is {side.txnid}" if side else "no commit sidecar"
    if misplaced and not accept_rollback:
        raise DataFileDamaged(
            f"{data}: its meta pages are damaged or out of place ({misplaced[0].what}): LMDB "
            f"would serve commit {used.txnid}, {last}; msgboard check {directory} tells more"
        )
    if side is None:
        return Verdict(note=f"{directory}: no commit sidecar yet: written from the next commit")
    marker = read_marker(directory)
    if marker and side.board != marker and not accept_rollback:
        raise DataFileDamaged(f"{directory}: {SIDECAR} belongs to another board than {MARKER}")
    if used.txnid < side.txnid:
        behind = side.txnid - used.txnid
        line = (
            f"{data} is {behind:,} commit(s) behind the last commit this board answered for "
            f"(LMDB txn {used.txnid}, the board's last {side.txnid}): an older copy, or "
            "damaged meta pages; restore the right file, or start with --accept-rollback"
        )
        if synced and not accept_rollback:
            raise DataFileDamaged(line)
        return Verdict(note=line + ("; accepted" if accept_rollback else "; weaker-no-fsync"))
    note = ""
    if used.txnid > side.txnid:
        note = f"{directory}: commit sidecar at txn {side.txnid}, {DATA} at {used.txnid}: caught up"
    unchanged = used.txnid == side.txnid and side.stat == data_stat(data)
    return Verdict(note=note, verify=not unchanged)
