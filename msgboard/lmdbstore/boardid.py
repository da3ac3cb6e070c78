"""A board's stable id: who the board is, across restarts, ports and
seeds. The replication names a standby by it (``msgboard.cluster``). The
links key with another id, the data's (``meta/board_id``, layout.py,
``Board.board_id``), the same on every board of a cluster; a board's
first open takes this one as its value."""

from __future__ import annotations

import contextlib
import os
import secrets

#: The file in a board's data directory that holds its stable id.
ID_FILE = "board-id"


def stable_id(path: str) -> str:
    """The stable id of the board whose data directory is ``path``: a
    random id written to ``path/board-id`` (fsynced) the first time it is
    asked for, the same across restarts, ports and seeds (a seed replaces
    data.mdb, not the directory)."""
    where = os.path.join(path, ID_FILE)
    with contextlib.suppress(FileNotFoundError):
        with open(where, encoding="ascii") as f:
            found = f.read().strip()
        if found:
            return found
    made = secrets.token_hex(8)
    part = f"{where}.part"
    with open(part, "w", encoding="ascii") as f:
        f.write(made + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, where)
    fsync_dir(path)
    return made


def fsync_dir(path: str) -> None:
    """Makes the renames in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
