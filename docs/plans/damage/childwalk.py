"""LMDB's own walk of a data file, in a child process that may die.

Where ``pageverify`` reads pages by hand, this lets LMDB read them, in a
child process: if a damaged page makes LMDB abort (``IS_LEAF(mp)``), or read
outside its map (SIGSEGV, SIGBUS), the child dies and the parent reports how,
in one line, with the database and the last key the child had read. The
child writes that key into a page of memory it shares with the parent (a
``memfd``) after every entry, which costs far less than a pipe write; the
pipe carries only the outcome of each database.

``walk`` runs a fresh interpreter (``subprocess``, not ``fork``), so a
server with threads may use it too; it opens the environment read-only,
with no lock when it may not write the lock file. ``in_child`` runs any
function in a forked child and hands back its result or how it died: for
``msgboard check``, a single-threaded command, to run its LMDB part behind
the verifier at the cost of a fork.

    python childwalk.py DIR       # prints the outcome, exit 1 on damage
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: The shared page: database number u32, key length u32, then the key.
_SHARED = 4096
_HEAD = struct.Struct("=II")
#: Named databases the child walks when none are given (msgboard's).
DBS = (b"meta", b"queues", b"state", b"selectors", b"times", b"unprocessed", b"history", b"index")


@dataclass
class Outcome:
    """How the child's walk ended: ``signal`` (its name) or ``error`` (an
    lmdb exception) or neither (clean); the database and last key read;
    entries per database walked to the end."""

    path: str
    signal: str = ""
    error: str = ""
    db: str = ""
    last_key: bytes | None = None
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return not self.signal and not self.error

    def line(self) -> str:
        """The outcome in one line."""
        if self.ok:
            return f"{self.path}: LMDB walked {sum(self.counts.values()):,} entries: clean"
        after = (
            "before its first entry"
            if self.last_key is None
            else f"after key {self.last_key.hex()}"
        )
        how = f"LMDB died by {self.signal}" if self.signal else f"LMDB failed: {self.error}"
        assertion = next((ln for ln in self.stderr.splitlines() if "Assertion" in ln), "")
        tail = f" ({assertion.strip()})" if assertion else ""
        return f"{self.path}: {how} in database {self.db!r} {after}{tail}"


def walk(path: str, dbs: tuple[bytes, ...] = DBS, timeout: float = 600.0) -> Outcome:
    """Walks every entry of ``dbs`` in the environment at ``path`` in a
    child process; never raises for what the child meets."""
    fd = os.memfd_create("childwalk", 0)
    os.ftruncate(fd, _SHARED)
    shared = mmap.mmap(fd, _SHARED)
    t = time.perf_counter()
    out = Outcome(path)
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", path, str(fd)]
            + [d.decode() for d in dbs],
            pass_fds=(fd,),
            capture_output=True,
            timeout=timeout,
        )
        for line in proc.stdout.decode(errors="replace").splitlines():
            msg = json.loads(line)
            if "count" in msg:
                out.counts[msg["db"]] = msg["count"]
            if "error" in msg:
                out.error = msg["error"]
        out.stderr = proc.stderr.decode(errors="replace")[-2000:]
        if proc.returncode < 0:
            out.signal = signal.Signals(-proc.returncode).name
        elif proc.returncode and not out.error:
            out.error = f"exit {proc.returncode}: {out.stderr.strip()[-200:]}"
    except subprocess.TimeoutExpired:
        out.error = f"no answer in {timeout} s"
    finally:
        index, size = _HEAD.unpack_from(shared, 0)
        if 0 < index <= len(dbs):
            out.db = dbs[index - 1].decode()
            key = bytes(shared[_HEAD.size : _HEAD.size + min(size, _SHARED - _HEAD.size)])
            out.last_key = key if size != 0xFFFFFFFF else None
        shared.close()
        os.close(fd)
    out.seconds = time.perf_counter() - t
    return out


@dataclass
class Died(Generic[T]):
    """What ``in_child`` got back: the function's ``result``, or the
    ``signal`` (its name) or ``error`` (its text) that ended the child."""

    result: T | None = None
    signal: str = ""
    error: str = ""


def in_child(fn: Callable[[], T]) -> Died[T]:
    """Runs ``fn`` in a forked child; its result comes back pickled through
    a pipe. Only for a process with no other threads (fork copies one)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        try:
            out: Died[T] = Died(result=fn())
        except BaseException as e:
            out = Died(error=f"{type(e).__name__}: {e}")
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return Died(signal=signal.Signals(os.WTERMSIG(status)).name)
    got: Died[T] = pickle.loads(data) if data else Died(error="no answer")
    return got


def _child(path: str, fd: int, names: list[str]) -> None:
    """The child: walks each database, keys and values, noting each key in
    the shared page; one JSON line per database walked to its end."""
    import lmdb

    shared = mmap.mmap(fd, _SHARED)
    room = _SHARED - _HEAD.size
    lock = os.access(os.path.join(path, "lock.mdb"), os.W_OK)
    env = lmdb.open(path, readonly=True, lock=lock, max_dbs=16, subdir=True)
    try:
        with env.begin(buffers=True) as txn:
            for index, name in enumerate(names, 1):
                _HEAD.pack_into(shared, 0, index, 0xFFFFFFFF)
                try:
                    db = env.open_db(name.encode(), txn=txn, create=False)
                except lmdb.NotFoundError:
                    continue
                n = 0
                for key, _value in txn.cursor(db=db).iternext(keys=True, values=True):
                    size = len(key)
                    shared[_HEAD.size : _HEAD.size + min(size, room)] = key[:room]
                    _HEAD.pack_into(shared, 0, index, size)
                    n += 1
                print(json.dumps({"db": name, "count": n}), flush=True)
    except lmdb.Error as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        raise SystemExit(3) from None
    finally:
        env.close()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]), argv[3:])
        return 0
    out = walk(argv[0])
    print(out.line(), f"({out.seconds:.2f} s)")
    return 0 if out.ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
