"""One writer per data directory: an OS lock on ``msgboard.lock`` inside it.

LMDB lets several processes open one environment for writing, but a board
keeps each queue's counters in memory: two boards on one directory hand out
the same seqs and overwrite each other's messages. So a ``DurableStore``
takes an exclusive, non-blocking ``flock`` on the lock file for its whole
life and writes its PID there for the error message of the next one. The
kernel releases the lock when the process dies, however it dies (kill -9
included), so a stale lock file never blocks a restart: only a live holder
does.

Read-only openers (a snapshot's reader, the Spark data source,
``msgboard check``) open LMDB with ``readonly=True, lock=False`` and take no
lock. The lock is tied to the open file, so it is not meant to cross
``fork()`` (no environment is, either).
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from msgboard.errors import DirectoryLocked, StoreError

#: The lock file's name inside the data directory.
FILE = "msgboard.lock"


class DirectoryLock:
    """The exclusive lock on a data directory, held until ``release``."""

    def __init__(self, directory: str) -> None:
        """Takes the lock; DirectoryLocked, naming the directory and the
        holder's PID where the lock file has it, if another open file (this
        process or another) holds it; StoreError if the lock file cannot be
        opened (a read-only directory)."""
        self.path = os.path.join(directory, FILE)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise StoreError(f"{self.path}: cannot open the lock file: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            by = f"process {holder}" if holder else "another process"
            raise DirectoryLocked(
                f"{directory} is in use by {by} (it holds {FILE}): "
                "one board per data directory; stop it first, or use another --data"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Releases the lock (closing the file does); idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _read_pid(fd: int) -> int:
    """The PID the holder wrote, or 0 if there is none to read."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    return 0
