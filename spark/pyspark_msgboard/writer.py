"""The export's Spark tasks: each decodes its key ranges of the snapshot and
writes them as Parquet itself, with pyarrow, so that no row goes through
the JVM.

``write(spark, snap, new, plan)`` runs one task per partition of ``plan``
(``snapshot.plan`` or ``snapshot.pack``: lists of key ranges) as
``parallelize(...).map(task).collect()``, on ``local[*]`` as on a cluster
(executors need the snapshot and the dataset at the same paths, as the data
source does). A task reads its ranges with ``snapshot.read`` (the decoder
the data source uses) and writes the files Spark's partitioned Parquet
writer would: ``queue=Q/section=S/day=YYYY-MM-DD/part-*.parquet``, the
partition columns in the path and not in the file, timestamps as INT64
microseconds adjusted to UTC, snappy. A row group holds up to
``ROW_GROUP`` rows.

Commit protocol: a task writes its files flat into ``new/_attempt-<id>/``
(a name the dataset's readers skip), made with ``mkdir`` in ``new``, so a
task still running when a failed run has removed ``new`` cannot make it
again; it returns where each file goes. The driver, once every task has
answered, moves the files of the attempts that answered into place and
removes every ``_attempt-*`` directory. A task that failed and ran again,
or a stray attempt, leaves no rows behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pyspark_msgboard import snapshot
from pyspark_msgboard.snapfile import Range

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The columns the path carries: not written into the files.
PARTITIONS = ("queue", "section")
#: The files' columns: the data source's, less those in the path.
SCHEMA = pa.schema([f for f in snapshot.ARROW if f.name not in PARTITIONS])
#: Rows per row group (Spark's writer cuts by bytes, 128 MiB; this is about
#: as much for the benchmark's rows, and bounds a task's memory).
ROW_GROUP = 131_072
#: Rows per file of the unprocessed section at most. Waiting messages
#: mostly leave in order (oldest first), and a night rewrites each file of
#: that section that lost a row (``export._carry``): small files there keep
#: a 1% night from rewriting a queue's whole backlog.
WAITING_FILE_ROWS = 16_384
#: The columns written with dictionary encoding: those of few distinct
#: values. The others (seq, the tuple's ints and floats, body, the times)
#: are written plain, as Spark's writer ends up writing them: dictionary
#: pages of all-distinct values made files 40% larger and slower to write.
DICTIONARY = [
    "queue_id",
    "address",
    "priority",
    "headers.key_value.key",
    "headers.key_value.value",
    "reply_to",
    "tuple.list.element.type",
    "tuple.list.element.bool",
    "tuple.list.element.string",
    "content_type",
    "delivery_count",
    "exit",
    "exit_reason",
    "exit_queue",
    "exit_selector",
]
#: Characters Spark escapes in a partition value (``%XX``), as it does.
_ESCAPE = frozenset("\"#%'*/:=?\\{[]^\x7f") | frozenset(chr(c) for c in range(1, 32))


def escape(value: str) -> str:
    """A partition value as Spark writes it in a directory name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def write(
    spark: SparkSession | None,
    snap: str,
    new: str,
    plan: list[list[Range]],
    batch_rows: int = 8192,
    decoder: str = "compiled",
) -> list[str]:
    """Decodes ``plan`` from the snapshot at ``snap`` into Parquet files
    under ``new`` (made if missing), one Spark task per partition, or, with
    no ``spark``, the same tasks one after the other in this process (a
    small night: no JVM); returns the files, relative to ``new``."""
    os.makedirs(new, exist_ok=True)
    tasks = [(snap, new, ranges, batch_rows, decoder) for ranges in plan]
    try:
        if spark is None:
            answers = [task(t) for t in tasks]
        else:
            answers = spark.sparkContext.parallelize(tasks, len(tasks)).map(task).collect()
        moved = []
        for attempt, files in answers:
            for name, rel in files:
                dst = os.path.join(new, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.rename(os.path.join(new, attempt, name), dst)
                moved.append(rel)
        return moved
    finally:
        for name in os.listdir(new):
            if name.startswith("_attempt-"):
                shutil.rmtree(os.path.join(new, name), ignore_errors=True)


def task(args: tuple[str, str, list[Range], int, str]) -> tuple[str, list[tuple[str, str]]]:
    """One partition: its ranges decoded and written into an attempt
    directory of ``new``; returns that directory's name and its files, each
    with where it goes in ``new``."""
    snap, new, ranges, batch_rows, decoder = args
    attempt = f"_attempt-{uuid.uuid4().hex}"
    os.mkdir(os.path.join(new, attempt))  # not makedirs: ``new`` gone, the run failed
    files = Files(os.path.join(new, attempt))
    try:
        for batch in snapshot.read(snap, ranges, batch_rows, decoder):
            files.add(batch)
        files.close()
    except BaseException:
        files.abort()
        raise
    return attempt, files.written


class Files:
    """The Parquet files of one task, one per (queue, section, day), each
    written in row groups of up to ROW_GROUP rows."""

    def __init__(self, root: str) -> None:
        self.root = root
        #: Each file's name in ``root`` and its path in the dataset.
        self.written: list[tuple[str, str]] = []
        self._open: dict[tuple[str, str, str], tuple[pq.ParquetWriter, list[pa.RecordBatch]]] = {}
        self._part = uuid.uuid4().hex[:12]
        #: Rows in each open file of the unprocessed section.
        self._rows: dict[tuple[str, str, str], int] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        """A batch of one queue section (as ``snapshot.read`` yields them)."""
        queue = batch.column("queue")[0].as_py()
        section = batch.column("section")[0].as_py()
        days = pc.strftime(batch.column("posted_at").cast(pa.date32()), "%Y-%m-%d")
        data = pa.RecordBatch.from_arrays([batch.column(f.name) for f in SCHEMA], schema=SCHEMA)
        values = pc.unique(days)
        if len(values) == 1:
            self._append((queue, section, values[0].as_py()), data)
            return
        index = np.asarray(pc.index_in(days, value_set=values))
        for i, day in enumerate(values.to_pylist()):
            self._append((queue, section, day), data.filter(pa.array(index == i)))

    def _append(self, key: tuple[str, str, str], rows: pa.RecordBatch) -> None:
        if key not in self._open:
            queue, section, day = key
            rel = os.path.join(
                f"queue={escape(queue)}",
                f"section={section}",
                f"day={day}",
                f"part-{len(self.written):05d}-{self._part}.c000.snappy.parquet",
            )
            name = f"{len(self.written):05d}.parquet"
            path = os.path.join(self.root, name)
            out = pq.ParquetWriter(path, SCHEMA, compression="snappy", use_dictionary=DICTIONARY)
            self._open[key] = (out, [])
            self.written.append((name, rel))
        writer, pending = self._open[key]
        if key[1] == "unprocessed":
            room = WAITING_FILE_ROWS - self._rows.get(key, 0)
            if rows.num_rows > room:  # this file is full: the rest into the next
                if room > 0:
                    pending.append(rows.slice(0, room))
                self._close(key)
                self._append(key, rows.slice(max(room, 0)))
                return
            self._rows[key] = self._rows.get(key, 0) + rows.num_rows
        pending.append(rows)
        if sum(b.num_rows for b in pending) >= ROW_GROUP:
            writer.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP)
            pending.clear()

    def _close(self, key: tuple[str, str, str]) -> None:
        writer, pending = self._open.pop(key)
        if pending:
            writer.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP)
        writer.close()
        self._rows[key] = 0

    def close(self) -> None:
        for writer, pending in self._open.values():
            if pending:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=ROW_GROUP)
            writer.close()
        self._open.clear()

    def abort(self) -> None:
        for writer, _ in self._open.values():
            with contextlib.suppress(Exception):  # the task's own error is the one to raise
                writer.close()
        self._open.clear()
        shutil.rmtree(self.root, ignore_errors=True)
