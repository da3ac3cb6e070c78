"""The commit sidecar and the board marker: what a data directory knows
about its board outside ``data.mdb``.

``msgboard.board`` (the marker) is written once, when a board is created:
it says a board lives here, so a missing or empty ``data.mdb`` beside it is
a lost file, not a new board. ``msgboard.commit`` (the sidecar) holds the
last LMDB transaction id the board committed (and so answered for); it is
rewritten in place after every commit, so a data file whose meta pages say
an older commit (an old copy put back, a damaged or swapped meta page) is
found at start instead of served.

Sidecar format, 64 bytes, native byte order like LMDB's: magic ``b"MBCT"``,
version u32 (1), txn id u64, board id u64 (the marker's), commit time u64
(µs since the epoch), then ``data.mdb``'s inode, size and ctime (ns) u64
each as ``fstat`` gave them just after that commit, CRC32 u32 of the 56
bytes before it, 4 bytes zero. One 64-byte write at offset 0 lies within
one sector and one page, so it is not torn by a process crash; the CRC
catches a damaged one, which then counts as "no sidecar" with a warning.

The stat triple lets start-up skip the page verification when nothing but
this board wrote ``data.mdb`` since its last commit: any other write (a
copy put back, a tool, the corruption harness) changes its ctime, which
user space cannot set back. Damage below the file system (a disk's bit
rot) does not show in ctime: ``--verify`` (or a periodic check) covers it.

``startup`` is the decision a store makes before LMDB opens the directory
(items 3 and 4 of issue 23): new board, serve, or refuse with one line.

    python sidecar.py bench DIR [N]   # cost per commit: LMDB alone, + pwrite, + fdatasync
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass

MARKER = "msgboard.board"
SIDECAR = "msgboard.commit"
_FORMAT = struct.Struct("=4sIQQQQQQI4x")
_HEAD = struct.Struct("=4sIQQQQQQ")
_MAGIC = b"MBCT"


@dataclass(frozen=True, slots=True)
class Commit:
    """What the sidecar says: the last committed txn id, of which board."""

    txnid: int
    board: int
    at: int = 0
    #: data.mdb's (inode, size, ctime ns) just after the commit.
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


def data_stat(fd: int) -> tuple[int, int, int]:
    """The (inode, size, ctime ns) of the open data file ``fd``."""
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_ctime_ns


class Sidecar:
    """The open sidecar of a data directory: ``write`` after each commit
    (a ``pwrite``; ``sync`` adds an ``fdatasync``), ``close`` syncs."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, SIDECAR)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def read(self) -> Commit | None:
        return unpack(os.pread(self._fd, _FORMAT.size, 0))

    def write(self, c: Commit, sync: bool = False) -> None:
        os.pwrite(self._fd, pack(c), 0)
        if sync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        os.fdatasync(self._fd)
        os.close(self._fd)


def write_marker(directory: str, board: int, created_at: int) -> None:
    """Writes the marker once, durably (file and directory fsynced)."""
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


def read_marker(directory: str) -> dict[str, int] | None:
    """The marker's content; None if there is none (an unreadable one is
    still a marker: a board lived here)."""
    path = os.path.join(directory, MARKER)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            d = json.load(f)
        return {"board": int(d["board"]), "created_at": int(d["created_at"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {"board": 0, "created_at": 0}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What start-up does: ``new`` (make a board and its marker), ``serve``,
    or ``refuse`` with ``line``; ``note``: a line to log when serving."""

    action: str
    line: str = ""
    note: str = ""
    #: Whether the pages need verifying (False: unchanged since our commit).
    verify: bool = True


def startup(directory: str, *, init: bool = False, synced: bool = True) -> Verdict:
    """Decides, before LMDB maps anything, whether ``directory`` may be
    served: a marker with no data is a lost file (unless ``init``); meta
    pages out of their slots, or a data file behind the sidecar, is a
    rollback. ``synced``: the board commits with fsync (without, a machine
    crash may legitimately lose the last commits: behind is a warning)."""
    import pageverify

    data = os.path.join(directory, "data.mdb")
    size = os.path.getsize(data) if os.path.exists(data) else -1
    marker = read_marker(directory)
    if size <= 0:
        what = "missing" if size < 0 else "empty (0 bytes)"
        lived = marker is not None or any(
            os.path.exists(os.path.join(directory, f)) for f in ("lock.mdb", "msgboard.commit")
        )
        if lived and not init:
            return Verdict(
                "refuse",
                f"{directory} held a board, but its data.mdb is {what}: restore it from a "
                "snapshot, or start with --init to make a new, empty board here",
            )
        return Verdict("new")
    with pageverify.DataFile(directory) as f:  # NotLmdb: not a data file
        metas = f.report.metas
        meta_problems = [p for p in f.report.problems if p.tree == "meta"]
    newest = max((m for m in metas if m.valid), key=lambda m: m.txnid)
    # LMDB with a lock file (the server) reads slot `txnid % 2` of the
    # newest id: a meta page in the wrong slot serves another commit.
    used = metas[newest.txnid % 2] if len(metas) == 2 else newest
    side_path = os.path.join(directory, SIDECAR)
    side = None
    if os.path.exists(side_path):
        with open(side_path, "rb") as sf:
            side = unpack(sf.read(64))
    last = f"the board's last commit is {side.txnid}" if side else "no commit sidecar"
    if meta_problems:
        return Verdict(
            "refuse",
            f"{data}: its meta pages are damaged or out of place ({meta_problems[0].what}): "
            f"LMDB would serve commit {used.txnid}, {last}; msgboard check --repair "
            f"{directory} tells what can be put back",
        )
    if side is None:
        return Verdict("serve", note="no commit sidecar yet: written from the first commit")
    if marker is not None and marker["board"] and side.board != marker["board"]:
        return Verdict("refuse", f"{directory}: {SIDECAR} belongs to another board")
    if used.txnid < side.txnid:
        behind = side.txnid - used.txnid
        line = (
            f"{data} is {behind:,} commit(s) behind the last commit this board answered for "
            f"(LMDB txn {used.txnid}, the board's last {side.txnid}): an older copy, or "
            "damaged meta pages. Restore the right file, or start with --accept-rollback"
        )
        return (
            Verdict("serve", note="weaker-no-fsync: " + line)
            if not synced
            else Verdict("refuse", line)
        )
    note = ""
    if used.txnid > side.txnid:
        note = f"commit sidecar at txn {side.txnid}, data.mdb at {used.txnid}: sidecar caught up"
    st = os.stat(data)
    unchanged = used.txnid == side.txnid and side.stat == (st.st_ino, st.st_size, st.st_ctime_ns)
    return Verdict("serve", note=note, verify=not unchanged)


def bench(directory: str, n: int) -> None:
    """Times small LMDB commits (sync on): alone, each followed by the
    sidecar's pwrite, or by pwrite + fdatasync; interleaved in rounds of
    ``n`` commits (the disk's speed drifts), medians per mode. Then the
    sidecar's pwrite and pwrite + fdatasync alone, and the fstat that would
    record data.mdb's ctime."""
    import statistics

    import lmdb

    os.makedirs(directory, exist_ok=True)
    env = lmdb.open(directory, map_size=1 << 26, sync=True, metasync=True)
    side = Sidecar(directory)
    value = b"x" * 200
    modes = ("lmdb", "pwrite", "fdatasync")
    times: dict[str, list[float]] = {m: [] for m in modes}
    key = 0
    for _ in range(5):
        for mode in modes:
            t = time.perf_counter()
            for _ in range(n):
                key += 1
                with env.begin(write=True) as txn:
                    txn.put(b"%010d" % key, value)
                    txnid = txn.id()
                if mode != "lmdb":
                    side.write(Commit(txnid, 1), sync=mode == "fdatasync")
            times[mode].append((time.perf_counter() - t) / n * 1e3)
    for mode in modes:
        print(
            f"commit + {mode:9s}: median {statistics.median(times[mode]):.3f} ms "
            f"(rounds: {', '.join(f'{x:.3f}' for x in times[mode])})"
        )
    for sync in (False, True):
        t = time.perf_counter()
        for i in range(n):
            side.write(Commit(i, 1), sync=sync)
        per = (time.perf_counter() - t) / n * 1e6
        print(f"sidecar {'pwrite + fdatasync' if sync else 'pwrite'} alone: {per:.1f} us")
    data = os.open(os.path.join(directory, "data.mdb"), os.O_RDONLY)
    t = time.perf_counter()
    for _ in range(n):
        data_stat(data)
    print(f"fstat of data.mdb: {(time.perf_counter() - t) / n * 1e6:.1f} us")
    os.close(data)
    side.close()
    env.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["bench"]:
        bench(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 300)
