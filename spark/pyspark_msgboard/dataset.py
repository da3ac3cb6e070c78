"""An export directory as a dataset that accumulates, changed only by whole
versions swapped in atomically. No Spark here: ``export.py`` writes the rows,
this module keeps the books and makes the change.

Layout (plain hive-partitioned Parquet, readable by ``spark.read.parquet``
and ``pyarrow.dataset.dataset(OUT, partitioning="hive")``)::

    OUT/_msgboard.json                                the books (below)
    OUT/_msgboard/waiting/QID.bin                     last night's waiting index (changes.py)
    OUT/queue=NAME/section=history/day=YYYY-MM-DD/part-*.parquet
    OUT/queue=NAME/section=unprocessed/day=YYYY-MM-DD/part-*.parquet

Readers skip names that start with ``_`` or ``.``, so the books are not
data. ``_msgboard.json`` holds the last snapshot read (``taken_at_us``,
``source``) and, per queue, its id, its ``next_seq`` at that snapshot (the
high-water mark: every seq below it has been seen) and its properties (the
snapshot manifest's ``spec``: which queues are dead-letter queues), and one
line per run.

A change is a new version: a directory ``OUT.partial-XXXX`` beside ``OUT``
with the new files, hard links to the files it keeps and new books;
it then takes ``OUT``'s place by one ``renameat2(RENAME_EXCHANGE)`` (Linux
3.15+; where the file system refuses it, two renames, and a run that dies
between them is repaired by the next, which finds ``OUT`` missing and
``OUT.previous-XXXX`` there). The old version is deleted after the swap. A
run that fails before the swap leaves ``OUT`` as it was and removes its
partial directory; one killed outright leaves it behind, and the next run
removes it. One run at a time: each holds ``OUT.lock`` (flock).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import glob
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from msgboard.errors import FailedPrecondition

FILE = "_msgboard.json"
FORMAT = "msgboard-dataset"


class DatasetError(FailedPrecondition):
    """The directory is not a dataset this export may change as asked."""


@dataclass
class Books:
    """The dataset's bookkeeping (``_msgboard.json``)."""

    #: The last snapshot read: ``taken_at_us``, ``taken_at``, ``source``, ``path``.
    snapshot: dict[str, Any] = field(default_factory=dict)
    #: Per queue: ``id``, ``next_seq`` (the high-water mark), ``spec``,
    #: ``unprocessed`` and ``history`` (rows in the dataset), ``gone`` (no
    #: longer on the board; its history is kept).
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: One entry per run that changed the dataset.
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: Earlier generations of queues made again under their name (``NAME#ID``:
    #: ``queue``, ``id``, ``history``), kept apart from ``queues``.
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        every = [*self.queues.values(), *self.earlier.values()]
        return sum(q.get("unprocessed", 0) + q.get("history", 0) for q in every)

    def dead_letter_queues(self) -> dict[str, list[str]]:
        """Each queue that some queue names as its ``dead_letter``, with the
        queues that name it."""
        out: dict[str, list[str]] = {}
        for name, q in sorted(self.queues.items()):
            dlq = (q.get("spec") or {}).get("dead_letter")
            if dlq:
                out.setdefault(dlq, []).append(name)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "snapshot": self.snapshot,
            "queues": dict(sorted(self.queues.items())),
            "earlier": dict(sorted(self.earlier.items())),
            "runs": self.runs,
        }


def load(out: str) -> Books | None:
    """The books of the dataset at ``out``; None if there is no directory
    (or an empty one). DatasetError if ``out`` holds something else."""
    path = os.path.join(out, FILE)
    if not os.path.exists(path):
        if os.path.isdir(out) and not os.listdir(out):
            return None
        if os.path.lexists(out):
            raise DatasetError(
                f"{out} exists and is not a msgboard dataset (no {FILE}); "
                "--full replaces it with one"
            )
        return None
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: {e}") from None
    if d.get("format") != FORMAT:
        raise DatasetError(f"{path}: format is {d.get('format')!r}, not {FORMAT!r}")
    return Books(d["snapshot"], d["queues"], d["runs"], d.get("earlier", {}))


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@contextlib.contextmanager
def locked(out: str) -> Iterator[None]:
    """Holds ``OUT.lock`` for one run; DatasetError if another run has it."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    fd = os.open(f"{os.path.abspath(out)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(f"another export is changing {out} (it holds {out}.lock)") from None
        repair(out)
        yield
    finally:
        os.close(fd)


def repair(out: str) -> None:
    """Undoes what a run killed mid-way left: a missing ``OUT`` comes back
    from ``OUT.previous-*``; partial and previous versions are removed."""
    base = os.path.abspath(out)
    previous = sorted(glob.glob(f"{glob.escape(base)}.previous-*"))
    if not os.path.lexists(base) and previous:
        os.rename(previous.pop(), base)
    for stale in [*previous, *glob.glob(f"{glob.escape(base)}.partial-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def partial(out: str) -> str:
    """A fresh name for a new version, beside ``out`` (same file system)."""
    return f"{os.path.abspath(out)}.partial-{uuid.uuid4().hex[:8]}"


def files(out: str, section: str) -> Iterator[str]:
    """The data files of ``section`` in the dataset, relative to ``out``."""
    for root, dirs, names in os.walk(out):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        rel = os.path.relpath(root, out)
        parts = rel.split(os.sep)
        if len(parts) < 2 or parts[1] != f"section={section}":
            continue
        for name in sorted(names):
            if not name.startswith(("_", ".")):
                yield os.path.join(rel, name)


def queue_of(rel: str) -> str:
    """The queue of a data file, from its path relative to the dataset."""
    return unquote(rel.split(os.sep)[0].removeprefix("queue="))


def link(old: str, new: str, section: str) -> int:
    """Hard-links every data file of ``section`` in ``old`` into ``new``;
    returns how many."""
    n = 0
    for rel in files(old, section):
        target = os.path.join(new, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(os.path.join(old, rel), target)
        n += 1
    return n


def write_books(new: str, books: Books) -> None:
    path = os.path.join(new, FILE)
    with open(path, "w") as f:
        json.dump(books.to_json(), f, indent=1, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swaps two paths atomically (Linux renameat2); False if the system or
    the file system cannot."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def swap(new: str, out: str) -> None:
    """Puts the version ``new`` in ``out``'s place, atomically where the
    system can, and deletes the old version."""
    out = os.path.abspath(out)
    if not os.path.lexists(out):
        os.rename(new, out)
    elif _exchange(new, out):
        shutil.rmtree(new)  # now the old version
    else:
        previous = f"{out}.previous-{uuid.uuid4().hex[:8]}"
        os.rename(out, previous)
        os.rename(new, out)
        shutil.rmtree(previous)
    with contextlib.suppress(OSError):
        fd = os.open(os.path.dirname(out), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
