"""Snapshot -> Parquet, partitioned by queue and day (UTC).

::

    msgboard export /shared/snapshots/2026-11-21 /shared/history/2026-11-21

The output is a directory of Parquet files laid out as
``queue=NAME/day=YYYY-MM-DD/part-*.parquet`` with every column of the data
source (``snapshot.SCHEMA``) but ``queue``, which the directory names carry;
timestamps are Parquet's standard INT64 microseconds adjusted to UTC. Read it
back with ``load(spark, OUT)``, which types the partition columns as they
were written (a queue named "2024" stays a string).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from pyspark_msgboard import snapshot

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


def export(
    spark: SparkSession,
    snap: str,
    out: str,
    *,
    overwrite: bool = False,
    progress: TextIO | None = None,
    options: dict[str, str] | None = None,
) -> int:
    """Writes the snapshot at ``snap`` as Parquet to ``out``; returns the
    number of messages written. ``options`` go to the data source."""
    from pyspark.sql import functions as F

    snapshot.check(snap)  # says here, not deep in a Spark stack, what is wrong
    df = spark.read.format("msgboard").options(**(options or {})).load(snap)
    rows = df.withColumn("day", F.to_date("posted_at"))
    spark.sparkContext.setJobGroup(GROUP, f"msgboard export {snap}")
    try:
        # No shuffle: a partition is a key range of one queue, in seq order,
        # so its rows already come grouped by queue and (mostly) by day.
        with Progress(spark, GROUP, "export", progress):
            write = rows.write.mode("overwrite" if overwrite else "errorifexists")
            write.partitionBy("queue", "day").parquet(out)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return int(load(spark, out).count())
