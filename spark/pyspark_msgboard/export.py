"""Snapshot -> a Parquet dataset that accumulates, night after night.

::

    msgboard export /shared/snapshots/2026-11-21 /shared/history

``OUT`` is a dataset (``dataset.py``): hive-partitioned Parquet laid out as
``queue=NAME/section=SECTION/day=YYYY-MM-DD/part-*.parquet``, with every
column of the data source (``snapshot.SCHEMA``; ``queue`` and ``section``
carried by the directory names) and the books in ``_msgboard.json``. Each
run adds the history the dataset has not seen, replaces the unprocessed
section as of the snapshot and keeps the history the board has trimmed
since; the same snapshot twice changes nothing; ``full`` rebuilds from the
snapshot alone. Every change is a whole new version swapped in at once: a
run that fails leaves the dataset as it was. Timestamps are Parquet's
standard INT64 microseconds adjusted to UTC. Read it back with
``load(spark, OUT)``, which types the partition columns as they were written
(a queue named "2024" stays a string): each message once, in the section it
was in at the last snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import unquote

from msgboard.lmdbstore import snapshot as snapshots
from msgboard.message import to_datetime
from pyspark_msgboard import dataset, snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Job group of the export's Spark jobs, which the progress bar follows.
GROUP = "msgboard-export"


def load(spark: SparkSession, path: str) -> DataFrame:
    """An export read back: the data source's columns, plus ``day``."""
    from pyspark.sql.types import DateType, StructField, StructType

    fields = [*snapshot.SCHEMA.fields, StructField("day", DateType())]
    return spark.read.schema(StructType(fields)).parquet(path)


class Progress:
    """A progress bar on the terminal for the Spark jobs of one job group:
    tasks done out of tasks known, polled from the status tracker. Silent
    when ``out`` is not a terminal (cron mails stay short)."""

    def __init__(self, spark: SparkSession, group: str, desc: str, out: TextIO | None = None):
        from tqdm import tqdm

        self._tracker = spark.sparkContext.statusTracker()
        self._group = group
        self._bar: Any = tqdm(total=0, desc=desc, unit="task", file=out or sys.stderr, disable=None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._update()
        self._bar.close()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            self._update()

    def _update(self) -> None:
        total = done = 0
        for job in self._tracker.getJobIdsForGroup(self._group):
            info = self._tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                s = self._tracker.getStageInfo(stage)
                if s is not None:
                    total += s.numTasks
                    done += s.numCompletedTasks
        if total != self._bar.total:
            self._bar.total = total
        self._bar.n = done
        self._bar.refresh()


@dataclass(frozen=True)
class Exported:
    """What one export run did."""

    out: str
    #: History rows added by this run (all rows on a first or full run).
    added: int
    #: Rows in the unprocessed section now (replaced by every run).
    unprocessed: int
    #: Rows in the dataset now.
    rows: int
    #: The dataset had this snapshot already: nothing was changed.
    unchanged: bool = False
    #: "created", "rebuilt" (--full) or "updated".
    how: str = "updated"

    def line(self) -> str:
        if self.unchanged:
            return f"{self.out} already holds this snapshot: nothing to do ({self.rows:,} rows)"
        return (
            f"{self.out} {self.how}: {self.added:,} history rows added, "
            f"{self.unprocessed:,} unprocessed, {self.rows:,} rows in all"
        )


def _rows(path: str) -> dict[tuple[str, str], int]:
    """Rows per (queue, section) of the Parquet files under ``path``, from
    their footers (no data read)."""
    import pyarrow.parquet as pq

    out: dict[tuple[str, str], int] = {}
    for section in snapshot.SECTIONS:
        for rel in dataset.files(path, section):
            queue = unquote(rel.split(os.sep)[0].removeprefix("queue="))
            n = pq.read_metadata(os.path.join(path, rel)).num_rows
            out[queue, section] = out.get((queue, section), 0) + n
    return out


def export(
    spark: SparkSession,
    snap: str,
    out: str,
    *,
    full: bool = False,
    progress: TextIO | None = None,
    options: dict[str, str] | None = None,
) -> Exported:
    """Adds the snapshot at ``snap`` to the dataset at ``out`` (see
    ``dataset.py``): the history rows it has not seen (seq at or past a
    queue's high-water mark, or waiting at the last run), the unprocessed
    section replaced, the history it holds kept. With ``full``, or when
    ``out`` does not exist, writes the snapshot alone. Nothing changes
    unless the whole run succeeds. ``options`` go to the data source."""
    from pyspark.sql import functions as F

    snapshot.check(snap)  # says here, not deep in a Spark stack, what is wrong
    manifest = snapshots.load(snap)
    with dataset.locked(out):
        books = None if full else dataset.load(out)
        if not full and books is None and os.path.lexists(out) and os.listdir(out):
            raise dataset.DatasetError(f"{out} is not a msgboard dataset")
        last = books.snapshot.get("taken_at_us", 0) if books else 0
        if books is not None and manifest.taken_at == last:
            return Exported(out, 0, _count(books, "unprocessed"), books.rows, unchanged=True)
        if books is not None and manifest.taken_at < last:
            raise dataset.DatasetError(
                f"{snap} was taken before the snapshot {out} holds "
                f"({books.snapshot.get('taken_at')}); --full rebuilds from it alone"
            )
        opts = dict(options or {})
        if books is not None:
            # Only the history it may add is decoded: from the oldest of the
            # high-water mark and the first message waiting at the last run.
            marks = _marks(books, manifest)
            since = {
                q: min(mark, books.queues[q].get("first_waiting") or mark)
                for q, mark in marks.items()
            }
            opts["historySince"] = json.dumps(since)
        df = spark.read.format("msgboard").options(**opts).load(snap)
        if books is not None:
            df = _new_rows(spark, df, marks, out)
        rows = df.withColumn("day", F.to_date("posted_at"))
        new = dataset.partial(out)
        try:
            spark.sparkContext.setJobGroup(GROUP, f"msgboard export {snap}")
            try:
                # No shuffle: a partition is a key range of one queue, in seq
                # order, so its rows already come grouped by queue and day.
                with Progress(spark, GROUP, "export", progress):
                    write = rows.write.mode("errorifexists")
                    write.partitionBy("queue", "section", "day").parquet(new)
            finally:
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            written = _rows(new)
            if books is not None:
                dataset.link(out, new, "history")
            if not any(next(dataset.files(new, s), None) for s in snapshot.SECTIONS):
                _write_empty(new)
            result = _books(books, manifest, snap, written, full)
            for name, seq in snapshot.first_waiting(snap).items():
                result.queues[name]["first_waiting"] = seq
            dataset.write_books(new, result)
            dataset.swap(new, out)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
    added = sum(n for (_, section), n in written.items() if section == "history")
    how = "rebuilt" if full else "created" if books is None else "updated"
    return Exported(out, added, _count(result, "unprocessed"), result.rows, how=how)


#: The one data file of a dataset with no rows (below).
EMPTY = "part-empty.parquet"


def _write_empty(new: str) -> None:
    """An empty Parquet file with every column (``queue``, ``section`` and
    ``day`` too), at the top of a dataset that has no rows: plain readers
    (``spark.read.parquet``, ``pyarrow.dataset``) then see the columns, and
    no partition is made up. A dataset with rows has no such file (its
    partitions say the columns; a file beside them would confuse Spark's
    partition discovery)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = snapshot.ARROW.append(pa.field("day", pa.date32()))
    pq.write_table(schema.empty_table(), os.path.join(new, EMPTY))


def _count(books: dataset.Books, key: str) -> int:
    return sum(q.get(key, 0) for q in books.queues.values())


def _marks(books: dataset.Books, manifest: snapshots.SnapshotInfo) -> dict[str, int]:
    """Each queue's high-water mark: its ``next_seq`` at the last run, for
    the queues still there with the same id (one deleted and created again
    starts afresh)."""
    marks = {}
    for name, q in books.queues.items():
        now = manifest.specs.get(name, {})
        if not q.get("gone") and name in manifest.queues and now.get("id") == q.get("id"):
            marks[name] = int(q["next_seq"])
    return marks


def _new_rows(spark: SparkSession, df: DataFrame, marks: dict[str, int], out: str) -> DataFrame:
    """The rows of ``df`` the dataset lacks: every unprocessed one (that
    section is replaced), and the history rows at or past their queue's
    high-water mark or waiting at the last run (a take need not be in seq
    order)."""
    from pyspark.sql import functions as F

    pairs = sorted(marks.items()) or [("", 0)]
    mark = spark.createDataFrame(pairs, "queue string, _mark long")
    waiting = (
        load(spark, out)
        .where(F.col("section") == "unprocessed")
        .select("queue", "seq", F.lit(True).alias("_waiting"))
    )
    joined = df.join(F.broadcast(mark), "queue", "left").join(
        F.broadcast(waiting), ["queue", "seq"], "left"
    )
    keep = (
        (F.col("section") == "unprocessed")
        | (F.col("seq") >= F.coalesce(F.col("_mark"), F.lit(0)))
        | F.col("_waiting").isNotNull()
    )
    return joined.where(keep).select(*snapshot.SCHEMA.names)


def _books(
    old: dataset.Books | None,
    manifest: snapshots.SnapshotInfo,
    snap: str,
    written: dict[tuple[str, str], int],
    full: bool,
) -> dataset.Books:
    """The books after this run."""
    queues: dict[str, dict[str, Any]] = {}
    for name, q in (old.queues if old else {}).items():
        queues[name] = {**q, "unprocessed": 0, "gone": True}
    for name, counts in manifest.queues.items():
        prev = queues.get(name, {})
        spec = manifest.specs.get(name, {})
        same = prev.get("id") == spec.get("id")
        queues[name] = {
            "id": spec.get("id"),
            "next_seq": counts.next_seq,
            "spec": spec.get("spec"),
            "unprocessed": written.get((name, "unprocessed"), 0),
            "history": (prev.get("history", 0) if same else 0) + written.get((name, "history"), 0),
        }
    for name in queues:
        queues[name].setdefault("gone", False)
        if name in manifest.queues:
            queues[name]["gone"] = False
    taken_at = to_datetime(manifest.taken_at).isoformat().replace("+00:00", "Z")
    books = dataset.Books(
        {
            "taken_at": taken_at,
            "taken_at_us": manifest.taken_at,
            "path": os.path.abspath(snap),
        },
        queues,
        [*(old.runs if old else [])],
    )
    books.runs.append(
        {
            "at": dataset.now(),
            "snapshot": taken_at,
            "full": full or old is None,
            "history_added": sum(n for (_, s), n in written.items() if s == "history"),
            "unprocessed": sum(n for (_, s), n in written.items() if s == "unprocessed"),
            "rows": books.rows,
        }
    )
    return books
