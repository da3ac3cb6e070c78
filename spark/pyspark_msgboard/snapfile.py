"""A snapshot's LMDB file opened for reading: checked against its meta
pages, read-only with no lock file, its sub-databases by name. No Spark and
no Arrow here, so that a night can decide what to do (``changes.py``) before
any JVM starts; ``snapshot.py`` reads the messages through it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lmdb

from msgboard.errors import FailedPrecondition
from msgboard.lmdbstore import datafile
from msgboard.lmdbstore.layout import KEY, QID, SCHEMAS

SECTIONS = ("unprocessed", "history")


@dataclass(frozen=True, slots=True)
class Range:
    """The keys of one queue section from seq ``lo`` (inclusive) to ``hi``
    (exclusive; None: to the queue's end)."""

    section: str
    queue: str
    qid: int
    lo: int
    hi: int | None
    #: Rows expected (exact for whole sections, planned for cuts).
    rows: int

    def bounds(self) -> tuple[bytes, bytes | None]:
        """First key and the key past the last (None: no key is past it)."""
        if self.hi is not None:
            return KEY.pack(self.qid, self.lo), KEY.pack(self.qid, self.hi)
        end = QID.pack(self.qid + 1) if self.qid < 0xFFFFFFFF else None
        return KEY.pack(self.qid, self.lo), end


class SnapshotError(FailedPrecondition):
    """The path is not a snapshot this reader can read."""


@contextlib.contextmanager
def opened(path: str) -> Iterator[tuple[lmdb.Environment, dict[str, Any]]]:
    """The snapshot's environment, read-only with no lock file, and its
    sub-databases by name."""
    if not os.path.isfile(os.path.join(path, "data.mdb")):
        raise SnapshotError(f"{path}: no data.mdb here; is it a msgboard snapshot?")
    datafile.check(path)
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
    try:
        dbs = {
            name: env.open_db(name.encode(), create=False)
            for name in ("meta", "queues", "state", *SECTIONS)
        }
        with env.begin() as txn:
            schema = txn.get(b"schema", db=dbs["meta"])
        if schema not in SCHEMAS:
            raise SnapshotError(f"{path}: storage schema {schema!r}; this reader reads {SCHEMAS}")
        yield env, dbs
    except lmdb.Error as e:
        raise SnapshotError(f"{path}: {e}") from e
    finally:
        env.close()


def check(path: str) -> None:
    """Raises SnapshotError, saying what is wrong, unless ``path`` is a
    snapshot this reader reads."""
    with opened(path):
        return
