"""Snapshot -> a Parquet dataset that accumulates, night after night.

::

    msgboard export /shared/snapshots/2026-11-21 /shared/history

``OUT`` is a dataset (``dataset.py``): hive-partitioned Parquet laid out as
``queue=NAME/section=SECTION/day=YYYY-MM-DD/part-*.parquet``, with every
column of the data source (``snapshot.ARROW``; ``queue`` and ``section``
carried by the directory names) and the books in ``_msgboard.json``. Each
run decodes only what changed since the dataset's last snapshot
(``changes.py``: new and changed waiting messages, history of the messages
that left the waiting section, history past the mark), keeps the rest (its
files hard-linked, or rewritten by pyarrow without the rows that left the
unprocessed section), and keeps the history the board has trimmed since; a
run with nothing to decode starts no Spark; the same snapshot twice changes
nothing; ``full`` rebuilds from the snapshot alone. Every change is a whole
new version swapped in at once: a run that fails leaves the dataset as it
was. Timestamps are Parquet's standard INT64 microseconds adjusted to UTC.
Read it back with
``load(spark, OUT)``, which types the partition columns as they were written
(a queue named "2024" stays a string): each message once, in the section it
was in at the last snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from msgboard.lmdbstore import snapshot as snapshots
from msgboard.message import to_datetime
from pyspark_msgboard import aggregates, changes, dataset, snapfile
from pyspark_msgboard.snapfile import SECTIONS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Job group of the export's Spark jobs, which the progress bar follows.
GROUP = "msgboard-export"
#: A night with at most this many rows to decode decodes and writes them in
#: this process (the same tasks, one after the other) and starts no Spark:
#: below it a JVM's start costs more than the second core gives back.
#: Chosen by measurement (docs/spark.md, "A night costs what the day
#: changed"): on the 2-core VM under load 10 to 20, Spark's session start
#: and first job took 25 to 40 s, the tasks' decode and write in one
#: process about 60,000 to 150,000 rows/s, so one process wins up to
#: about 2 x 10^6 rows.
LOCAL_ROWS = 2_000_000
#: Rows per partition at most when Spark runs: the partitions are then a
#: multiple of the cores, so that no wave runs on one core alone.
PARTITION_ROWS = 250_000


def load(spark: SparkSession, path: str) -> DataFrame:
    """An export read back: the data source's columns, plus ``day``."""
    from pyspark.sql.types import DateType, StructField, StructType

    from pyspark_msgboard import snapshot

    fields = [*snapshot.spark_schema().fields, StructField("day", DateType())]
    return spark.read.schema(StructType(fields)).parquet(path)


def schema() -> Any:
    """The dataset's columns as a pyarrow schema (the partitions' ``queue``,
    ``section`` and ``day`` among them), for ``pyarrow.dataset``: files
    written before a column was added read it as null."""
    import pyarrow as pa

    from pyspark_msgboard import snapshot

    return snapshot.ARROW.append(pa.field("day", pa.date32()))


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
        with contextlib.suppress(Exception):  # a dead JVM: the job's own error says so
            self._update()
        self._bar.close()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._update()
            except Exception:  # the JVM went away: the job's own error says so
                return

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
    #: Rows in the unprocessed section now.
    unprocessed: int
    #: Rows in the dataset now.
    rows: int
    #: The dataset had this snapshot already: nothing was changed.
    unchanged: bool = False
    #: "created", "rebuilt" (--full) or "updated".
    how: str = "updated"
    #: Rows decoded from the snapshot by this run (both sections).
    decoded: int = 0
    #: Whether this run needed Spark (more rows to decode than ``LOCAL_ROWS``).
    spark: bool = False

    def line(self) -> str:
        if self.unchanged:
            return f"{self.out} already holds this snapshot: nothing to do ({self.rows:,} rows)"
        how = f"{self.decoded:,} rows decoded" if self.decoded else "nothing to decode"
        how += " by Spark" if self.spark else ", no Spark"
        return (
            f"{self.out} {self.how}: {self.added:,} history rows added, "
            f"{self.unprocessed:,} unprocessed, {self.rows:,} rows in all ({how})"
        )


def _rows(path: str) -> dict[tuple[str, str], int]:
    """Rows per (queue, section) of the Parquet files under ``path``, from
    their footers (no data read)."""
    out: dict[tuple[str, str], int] = {}
    for (queue, _, section), n in _generation_rows(path).items():
        out[queue, section] = out.get((queue, section), 0) + n
    return out


def _generation_rows(path: str) -> dict[tuple[str, int | None, str], int]:
    """Rows per (queue, queue id, section) of the Parquet files under
    ``path``, from their footers: a file holds one generation of one queue
    (its ``queue_id`` statistics say which; None for a file written before
    the column)."""
    import pyarrow.parquet as pq

    out: dict[tuple[str, int | None, str], int] = {}
    for section in SECTIONS:
        for rel in dataset.files(path, section):
            meta = pq.read_metadata(os.path.join(path, rel))
            qid = _queue_id(meta)
            key = (dataset.queue_of(rel), qid, section)
            out[key] = out.get(key, 0) + meta.num_rows
    return out


def _leaf(meta: Any, name: str) -> int | None:
    """The index of the top-level column ``name`` among a Parquet file's
    leaf columns (where its statistics are), or None."""
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    return paths.index(name) if name in paths else None


def _queue_id(meta: Any) -> int | None:
    col = _leaf(meta, "queue_id")
    if col is None or not meta.num_row_groups:
        return None
    stats = meta.row_group(0).column(col).statistics
    return int(stats.min) if stats is not None and stats.has_min_max else None


def prepare(snap: str, out: str, full: bool = False) -> Exported | None:
    """What a run can decide before Spark starts, from the snapshot's
    manifest and the dataset's books alone: an Exported saying "nothing to
    do" for the snapshot the dataset holds already, DatasetError for an
    older one, otherwise None (``export`` has work to look at)."""
    snapfile.check(snap)  # says here, not deep in a Spark stack, what is wrong
    manifest = snapshots.load(snap)
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
    return None


def export(
    spark: SparkSession | Callable[[], SparkSession],
    snap: str,
    out: str,
    *,
    full: bool = False,
    progress: TextIO | None = None,
    options: dict[str, str] | None = None,
    local_rows: int = LOCAL_ROWS,
) -> Exported:
    """Adds the snapshot at ``snap`` to the dataset at ``out`` (see
    ``dataset.py``): what changed since the dataset's last snapshot
    (``changes.py``) is decoded, the rest of the dataset is kept (its files
    hard-linked, or rewritten without the rows that left the unprocessed
    section). With ``full``, or when ``out`` does not exist, writes the
    snapshot alone. Nothing changes unless the whole run succeeds.
    ``spark``: the session, or a function that starts one, called only if
    there are more rows to decode than ``local_rows`` (up to that, this
    process decodes and writes them). ``options`` go to the data source."""
    with dataset.locked(out):
        done = prepare(snap, out, full)
        if done is not None:
            return done
        manifest = snapshots.load(snap)
        books = None if full else dataset.load(out)
        night = changes.survey(snap, out, books, full)
        new = dataset.partial(out)
        try:
            decoded: dict[tuple[str, str], int] = {}
            rows = manifest.messages if night.full else night.rows
            by_spark = night.spark and (rows > local_rows or _spark_writer(options))
            if night.spark:
                session = (spark() if callable(spark) else spark) if by_spark else None
                _decode(session, snap, new, night, progress, options, rows)
                decoded = _rows(new)
            else:
                os.makedirs(new)
            removed = _keep(out, new, night) if books is not None else 0
            if not any(next(dataset.files(new, s), None) for s in SECTIONS):
                _write_empty(new)
            changes.write_index(new, night)
            aggregates.fill(new, out if books is not None else None)
            counts = _generation_rows(new)
            result = _books(books, manifest, snap, counts, decoded, removed, night, full, by_spark)
            dataset.write_books(new, result)
            dataset.swap(new, out)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        finally:
            night.close()
    added = sum(n for (_, section), n in decoded.items() if section == "history")
    how = "rebuilt" if full else "created" if books is None else "updated"
    return Exported(
        out,
        added,
        _count(result, "unprocessed"),
        result.rows,
        how=how,
        decoded=sum(decoded.values()),
        spark=by_spark,
    )


def _decode(
    spark: SparkSession | None,
    snap: str,
    new: str,
    night: changes.Changes,
    progress: TextIO | None,
    options: dict[str, str] | None,
    rows: int,
) -> None:
    """Decodes the night's ``rows`` rows and writes them into the new
    version ``new``: by Spark tasks with pyarrow (``writer.py``), in
    partitions of at most PARTITION_ROWS rows and a multiple of the cores
    in number; with no ``spark``, the same tasks in this process; or with
    the option ``writer=spark`` through the data source and Spark's
    writer."""
    opts = dict(options or {})
    if spark is not None and not {"numPartitions", "rowsPerPartition"} & set(opts):
        cores = max(1, spark.sparkContext.defaultParallelism)
        waves = max(1, -(-rows // (cores * PARTITION_ROWS)))
        opts["numPartitions"] = str(cores * waves)
    listed = None
    if not night.full:
        # The runs of seqs to decode, for the source's planner to read: a
        # file, since their number grows with the day's changes.
        fd, listed = tempfile.mkstemp(prefix="msgboard-ranges-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump([dataclasses.astuple(r) for q in night.queues.values() for r in q.decode], f)
        opts["ranges"] = listed
    try:
        if spark is None:
            opts.pop("writer", None)
            _write_tasks(None, snap, new, opts)
            return
        spark.sparkContext.setJobGroup(GROUP, f"msgboard export {snap}")
        try:
            with Progress(spark, GROUP, "export", progress):
                if opts.pop("writer", "tasks") == "spark":
                    _write_dataframe(spark, snap, new, opts)
                else:
                    _write_tasks(spark, snap, new, opts)
        finally:
            with contextlib.suppress(Exception):  # a dead JVM: the error above says it
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    finally:
        if listed is not None:
            os.unlink(listed)


def _spark_writer(options: dict[str, str] | None) -> bool:
    return (options or {}).get("writer") == "spark"


def _write_tasks(spark: SparkSession | None, snap: str, new: str, opts: dict[str, str]) -> None:
    """The rows decoded and written by Spark tasks with pyarrow
    (``writer.py``): no row goes through the JVM. The data source's
    options say the partitions (``ranges``, ``rowsPerPartition``,
    ``numPartitions``), the batch size and the decoder."""
    from pyspark_msgboard import writer
    from pyspark_msgboard.options import ReadOptions

    read = ReadOptions.parse({**opts, "path": snap})
    writer.write(spark, snap, new, read.partitions(), read.batch_rows, read.decoder)


def _write_dataframe(spark: SparkSession, snap: str, new: str, opts: dict[str, str]) -> None:
    """The rows read through the data source and written by Spark's own
    Parquet writer (in the JVM): the export before ``writer.py``, kept as
    the ``writer=spark`` option to compare against."""
    from pyspark.sql import functions as F

    df = spark.read.format("msgboard").options(**opts).load(snap)
    rows = df.withColumn("day", F.to_date("posted_at"))
    # No shuffle: a partition is a key range of one queue, in seq order, so
    # its rows already come grouped by queue and day.
    rows.write.mode("errorifexists").partitionBy("queue", "section", "day").parquet(new)


def _keep(old: str, new: str, night: changes.Changes) -> int:
    """Carries the dataset's files from ``old`` into the version ``new``:
    hard links, or a file rewritten without rows that leave it (an
    unprocessed row whose message left or changed, a history row whose
    message came back to waiting). The unprocessed rows of a queue gone
    from the board, or made again, go. Returns the rows removed."""
    removed = 0
    none = np.zeros(0, "<u8")
    for section in SECTIONS:
        for rel in dataset.files(old, section):
            q = night.queues.get(dataset.queue_of(rel))
            same = q is not None and q.same
            if section == "unprocessed" and not same:
                removed += _footer_rows(os.path.join(old, rel))
                continue
            drop, qid = none, None
            if same:
                assert q is not None
                drop = q.drop_unprocessed if section == "unprocessed" else q.drop_history
                qid = q.qid
            removed += _carry(old, new, rel, drop, qid)
    return removed


def _footer_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _carry(old: str, new: str, rel: str, drop: np.ndarray, qid: int | None) -> int:
    """Hard-links ``old/rel`` into ``new``, or writes it there without the
    rows whose seq is in ``drop`` (sorted) when it is a file of queue id
    ``qid`` (or of no recorded id) and its seq statistics say it may hold
    one. Returns the rows left out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src, dst = os.path.join(old, rel), os.path.join(new, rel)
    if len(drop) and _queue_id(pq.read_metadata(src)) in (qid, None):
        f = pq.ParquetFile(src)
        col = _leaf(f.metadata, "seq")
        lo = hi = None
        for i in range(f.metadata.num_row_groups):
            stats = None if col is None else f.metadata.row_group(i).column(col).statistics
            if stats is None or not stats.has_min_max:
                lo, hi = 0, 2**63 - 1
                break
            lo = stats.min if lo is None else min(lo, stats.min)
            hi = stats.max if hi is None else max(hi, stats.max)
        if lo is not None and hi is not None:
            i = int(np.searchsorted(drop, lo))
            if i < len(drop) and int(drop[i]) <= hi:
                table = f.read()
                gone = pc.is_in(table["seq"], value_set=pa.array(drop.astype(np.int64)))
                kept = table.filter(pc.invert(gone))
                if kept.num_rows:  # a file left with no rows is not written
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    pq.write_table(kept, dst)
                return int(table.num_rows - kept.num_rows)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.link(src, dst)
    return 0


#: The one data file of a dataset with no rows (below).
EMPTY = "part-empty.parquet"


def _write_empty(new: str) -> None:
    """An empty Parquet file with every column (``queue``, ``section`` and
    ``day`` too), at the top of a dataset that has no rows: plain readers
    (``spark.read.parquet``, ``pyarrow.dataset``) then see the columns, and
    no partition is made up. A dataset with rows has no such file (its
    partitions say the columns; a file beside them would confuse Spark's
    partition discovery)."""
    import pyarrow.parquet as pq

    pq.write_table(schema().empty_table(), os.path.join(new, EMPTY))


def _count(books: dataset.Books, key: str) -> int:
    return sum(q.get(key, 0) for q in books.queues.values())


def _books(
    old: dataset.Books | None,
    manifest: snapshots.SnapshotInfo,
    snap: str,
    rows: dict[tuple[str, int | None, str], int],
    decoded: dict[tuple[str, str], int],
    removed: int,
    night: changes.Changes,
    full: bool,
    by_spark: bool,
) -> dataset.Books:
    """The books after this run; ``rows`` are the new version's, per queue,
    generation and section, from its files' footers. ``queues`` holds each
    name's last generation (gone: no longer on the board); ``earlier``, by
    ``NAME#ID``, the generations before it that still have rows."""
    queues: dict[str, dict[str, Any]] = {}
    earlier: dict[str, dict[str, Any]] = dict(old.earlier) if old else {}
    for name, q in (old.queues if old else {}).items():
        queues[name] = {**q, "gone": True}
    for name, counts in manifest.queues.items():
        prev = queues.get(name, {})
        spec = manifest.specs.get(name, {})
        change = night.queues.get(name)
        same = change is not None and change.same
        if prev and not same:  # made again: the one before is an earlier generation
            earlier[f"{name}#{prev.get('id')}"] = {**prev, "queue": name}
        unrecorded = change.unrecorded if change else 0
        queues[name] = {
            "id": spec.get("id"),
            "next_seq": counts.next_seq,
            "spec": spec.get("spec"),
            "gone": False,
            "unrecorded": (prev.get("unrecorded", 0) if same else 0) + unrecorded,
            # Posted with a not_before still to come: no row yet, not unrecorded.
            "scheduled": len(change.scheduled) if change else 0,
        }
    for entry in [*queues.values(), *earlier.values()]:
        entry["unprocessed"] = entry["history"] = 0
    for (name, qid, section), n in sorted(rows.items(), key=str):
        book: dict[str, Any] | None = queues.get(name)
        if book is None or (qid is not None and qid != book.get("id")):
            book = earlier.setdefault(
                f"{name}#{qid}", {"queue": name, "id": qid, "gone": True, "history": 0}
            )
        book[section] = book.get(section, 0) + n
    earlier = {k: v for k, v in earlier.items() if v.get("history") or v.get("unprocessed")}
    taken_at = to_datetime(manifest.taken_at).isoformat().replace("+00:00", "Z")
    books = dataset.Books(
        {
            "taken_at": taken_at,
            "taken_at_us": manifest.taken_at,
            "path": os.path.abspath(snap),
        },
        queues,
        [*(old.runs if old else [])],
        earlier,
    )
    books.runs.append(
        {
            "at": dataset.now(),
            "snapshot": taken_at,
            "full": full or old is None,
            "history_added": sum(n for (_, s), n in decoded.items() if s == "history"),
            "decoded": sum(decoded.values()),
            "removed": removed,
            "spark": by_spark,
            "unprocessed": sum(n for (_, _, s), n in rows.items() if s == "unprocessed"),
            "rows": books.rows,
        }
    )
    return books
