"""Where Snapshot may write: confined to the configured snapshot directory.

With a snapshot directory, a Snapshot request names a directory relative to
it; an absolute path, a ``..`` part, or a symlink that leads outside it is
INVALID_ARGUMENT. A board with a users file and no snapshot directory
answers Snapshot FAILED_PRECONDITION: a caller must never choose where the
server writes. The open development board (loopback, no users file, no
snapshot directory) keeps absolute paths anywhere the server may write.
"""

from __future__ import annotations

import os
from pathlib import Path

from msgboard.errors import FailedPrecondition, InvalidArgument, RelativePath


class SnapshotDir:
    """Turns a Snapshot request's path into the directory to write."""

    def __init__(self, root: str | os.PathLike[str] = "", *, required: bool = False) -> None:
        """``root``: the snapshot directory (created 0700 if missing), or
        empty for none. ``required``: with no root, refuse every Snapshot
        (a board with a users file)."""
        self.root = Path(root).resolve() if root else None
        self.required = required
        if self.root is not None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def resolve(self, name: str) -> str:
        """The path to write for a request naming ``name``."""
        if self.root is None:
            if self.required:
                raise FailedPrecondition(
                    "Snapshot is off: this board has a users file and no snapshot_dir "
                    "(start it with --snapshot-dir DIR)"
                )
            if not os.path.isabs(name):
                raise RelativePath(
                    f"path: {name!r} is relative and this board has no snapshot dir: "
                    "give an absolute path"
                )
            return name
        if not name:
            raise InvalidArgument("path: give a directory name relative to the snapshot dir")
        if os.path.isabs(name):
            raise InvalidArgument(
                f"path: {name!r} is absolute; name a directory relative to the snapshot dir"
            )
        if ".." in Path(name).parts:
            raise InvalidArgument(f"path: {name!r} has a '..' part; it must stay inside")
        target = (self.root / name).resolve()  # follows symlinks that exist
        if target == self.root or not target.is_relative_to(self.root):
            raise InvalidArgument(f"path: {name!r} leads outside the snapshot dir")
        return str(target)
