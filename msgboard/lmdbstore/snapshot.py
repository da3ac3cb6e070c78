"""Snapshots: consistent, compacted hot copies of a board's LMDB environment.

A snapshot is a directory holding ``data.mdb`` (LMDB's compacting copy, made
from one read transaction, so it is the board exactly as one commit left it)
and ``snapshot.json``, its manifest::

    {"format": "msgboard-snapshot", "schema": "3",
     "taken_at": "2026-11-21T06:00:00.123456Z", "taken_at_us": 1795…,
     "source": "/var/lib/msgboard", "bytes": 228814848, "messages": 1000000,
     "queues": {"jobs": {"next_seq": 1001, "unprocessed": 10, "history": 990,
                         "id": 1, "spec": {"name": "jobs", "dead_letter": "", …}}}}

``schema`` is the board's ``meta/schema``; ``taken_at`` is when the read
transaction began (UTC); the counts are the ``state`` counters of that
transaction, and ``id`` and ``spec`` each queue's id and properties as stored
(``QueueSpec.to_json``: its dead-letter queue, limits and policies), so that
readers of the snapshot know, say, which queues are dead-letter queues. The
copy is written beside the target under a ``.partial`` name, fsynced, and
renamed into place last, so a directory with that name is always a whole
snapshot. A snapshot opens read-only with no lock file (as
the Spark reader does), or as a board (``msgboard serve --data DIR``).
Transient queues live in memory and are not part of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any

import lmdb

from msgboard.errors import FailedPrecondition, InvalidArgument
from msgboard.lmdbstore.layout import QID, STATE, Dbs
from msgboard.lmdbstore.store import Counts
from msgboard.message import now_us, to_datetime

FILE = "snapshot.json"
FORMAT = "msgboard-snapshot"


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A snapshot's manifest."""

    path: str
    schema: str
    #: When its read transaction began, µs since the epoch (UTC).
    taken_at: int
    #: Size of data.mdb.
    bytes: int
    #: Each durable queue's counters, as its ``state`` entry had them.
    queues: dict[str, Counts]
    #: Each durable queue's stored ``{"id": …, "spec": QueueSpec.to_json()}``.
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        return sum(q.unprocessed + q.history for q in self.queues.values())

    def to_json(self, source: str) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "schema": self.schema,
            "taken_at": to_datetime(self.taken_at).isoformat().replace("+00:00", "Z"),
            "taken_at_us": self.taken_at,
            "source": source,
            "bytes": self.bytes,
            "messages": self.messages,
            "queues": {
                name: {
                    "next_seq": q.next_seq,
                    "unprocessed": q.unprocessed,
                    "history": q.history,
                    **self.specs.get(name, {}),
                }
                for name, q in self.queues.items()
            },
        }


def load(path: str | os.PathLike[str]) -> SnapshotInfo:
    """The manifest of the snapshot at ``path``; FailedPrecondition if
    ``path`` is not a whole snapshot."""
    path = os.fspath(path)
    try:
        with open(os.path.join(path, FILE)) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise FailedPrecondition(f"{path} is not a msgboard snapshot ({FILE}: {e})") from None
    if d.get("format") != FORMAT:
        raise FailedPrecondition(f"{path}/{FILE}: format is {d.get('format')!r}, not {FORMAT!r}")
    counts = ("unprocessed", "history", "next_seq")
    queues = {name: Counts(**{k: q[k] for k in counts}) for name, q in d["queues"].items()}
    specs = {name: {k: q[k] for k in ("id", "spec") if k in q} for name, q in d["queues"].items()}
    return SnapshotInfo(path, d["schema"], d["taken_at_us"], d["bytes"], queues, specs)


def _target(path: str) -> None:
    """Checks that ``path`` can receive a snapshot: absolute, and not there
    yet or an empty directory."""
    if not os.path.isabs(path):
        raise InvalidArgument(f"path: must be absolute (got {path!r})")
    if os.path.lexists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise FailedPrecondition(f"{path} exists and is not an empty directory")


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(dbs: Dbs, txn: lmdb.Transaction[bytes], path: str, *, source: str) -> SnapshotInfo:
    """Copies the environment of ``dbs`` as ``txn`` sees it into the
    directory ``path``.

    ``txn`` is a read transaction, begun just before. Raises InvalidArgument
    for a relative path, FailedPrecondition if ``path`` is taken, lmdb.Error
    or OSError if the copy fails (nothing is left behind then)."""
    taken_at = now_us()
    _target(path)
    schema = (txn.get(b"schema", db=dbs.meta) or b"").decode()
    queues = {}
    specs = {}
    with txn.cursor(db=dbs.queues) as cur:
        for key, value in cur:
            stored = json.loads(value)
            qid = stored["id"]
            specs[key.decode()] = {"id": qid, "spec": stored["spec"]}
            state = txn.get(QID.pack(qid), db=dbs.state)
            next_seq, unprocessed, history = (1, 0, 0) if state is None else STATE.unpack(state)
            queues[key.decode()] = Counts(unprocessed, history, next_seq)
    parent = os.path.dirname(path.rstrip(os.sep)) or os.sep
    os.makedirs(parent, exist_ok=True)
    partial = f"{path.rstrip(os.sep)}.partial-{uuid.uuid4().hex[:8]}"
    os.mkdir(partial)
    try:
        dbs.env.copy(partial, compact=True, txn=txn)
        data = os.path.join(partial, "data.mdb")
        info = SnapshotInfo(path, schema, taken_at, os.path.getsize(data), queues, specs)
        manifest = os.path.join(partial, FILE)
        with open(manifest, "w") as f:
            json.dump(info.to_json(source), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync(data)
        _fsync(partial)
        _target(path)  # again: another snapshot may have taken the name meanwhile
        os.rename(partial, path)  # replaces an empty directory, atomically
        _fsync(parent)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(partial)
        raise
    return info
