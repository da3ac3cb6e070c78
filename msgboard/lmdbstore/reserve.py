"""The disk reserve: the last of the disk, kept for what makes room.

On a full disk, deleting a queue, taking or acking still writes (LMDB copies
the pages it changes and records the pages it frees), so a board that let
posts fill the disk to the last byte could not be emptied through itself.
Two things keep room for them:

- ``msgboard.reserve``, a file of ``size`` bytes in the data directory.
  Before each write transaction the store calls ``tend``, which allocates
  it (``posix_fallocate``) once the disk's free space falls below ``LOW``
  times the reserve (so a roomy disk, and every test's board, holds no
  such file) while there is still room for it three times over; and
  deletes it when the free space has fallen below half the reserve (posts,
  or something else, filled the disk), so its space is there for the
  transaction. It is allocated again once the disk has room.
- ``room``: the space posts may use is the disk's free space plus the file,
  less the reserve. A post that does not fit is refused before it writes
  (``Txn.admit``); what makes room is never refused by the store.

``size`` defaults to a sixteenth of the file system, at least 256 KiB and
at most 64 MiB.
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

FILE = "msgboard.reserve"
MiB = 1 << 20
MIN = MiB // 4
MAX = 64 * MiB
#: The file is allocated once the free space is below LOW reserves.
LOW = 16


class DiskReserve:
    """The reserve of the file system holding ``directory``."""

    def __init__(self, directory: str, size: int | None = None) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE)
        if size is None:
            fs = os.statvfs(directory)
            size = min(max(fs.f_blocks * fs.f_frsize // 16, MIN), MAX)
        self.size = size
        try:
            self.held = os.path.getsize(self.path)
        except OSError:
            self.held = 0
        self.tend()

    def free(self) -> int:
        """The disk's free space for this process, in bytes."""
        fs = os.statvfs(self.directory)
        return fs.f_bavail * fs.f_frsize

    def room(self, free: int) -> int:
        """What posts may still use, given the disk's ``free`` bytes."""
        return free + self.held - self.size

    def tend(self) -> int:
        """Releases the reserve file if the disk is nearly full, or
        allocates it if there is room; returns the disk's free space after."""
        free = self.free()
        if self.held and free < self.size // 2:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            log.warning(
                "%s: the disk is nearly full (%d bytes free): released the %d-byte reserve "
                "so that deletes, takes and acks can make room; posts are refused until then",
                self.directory,
                free,
                self.held,
            )
            self.held = 0
            return self.free()
        if self.held < self.size and 3 * self.size <= free < LOW * self.size:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.posix_fallocate(fd, 0, self.size)
                finally:
                    os.close(fd)
            except OSError as e:
                log.warning("%s: could not allocate the disk reserve: %s", self.directory, e)
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                self.held = 0
                return self.free()
            self.held = self.size
            return self.free()
        return free
