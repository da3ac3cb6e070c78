"""The Spark commands of ``msgboard``: ``export``, ``report`` and ``nightly``
(``msgboard.cli`` parses them and hands them here, so that serving never
imports pyspark).

``nightly`` is the night in one command, one log and one exit status::

    msgboard nightly SNAPSHOTS DATASET REPORTS [--server HOST:PORT] [Spark options]

1. snapshot: the board writes ``SNAPSHOTS/YYYY-MM-DD`` (today, UTC); a
   snapshot already there from an earlier run today is used as it is;
2. export: ``DATASET`` is brought up to date from it (``export.py``);
   the same snapshot twice changes nothing;
3. report: ``REPORTS/YYYY-MM-DD`` is written aside and swapped in.

Each step prints one line, time-stamped in UTC, to standard output; Spark's
own warnings go to standard error. Run it again after a failure: every step
either finds its work done or does it whole.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyspark_msgboard.session import session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def settings(args: argparse.Namespace) -> dict[str, str]:
    """``--conf K=V`` and ``--driver-memory`` as Spark settings."""
    from msgboard.errors import InvalidArgument

    conf = {}
    for item in args.conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InvalidArgument(f"--conf: expected KEY=VALUE (got {item!r})")
        conf[key.strip()] = value
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    return conf


def log(text: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    conf = settings(args)
    snap = None
    if args.command == "nightly":
        snap = take_snapshot(args)
    running = SparkSession.getActiveSession()  # one we did not start stays up
    spark = session(args.master, conf=conf)
    try:
        if args.command == "export":
            export(spark, os.path.abspath(args.snapshot), args.out, args.full)
        elif args.command == "report":
            report(spark, args.parquet, args.out, tuple(args.dead_letter or ()))
        else:
            assert snap is not None
            export(spark, snap, args.dataset, args.full)
            day = os.path.basename(snap)
            out = os.path.join(args.reports, day)
            report(spark, args.dataset, out, tuple(args.dead_letter or ()))
            log("nightly: done")
    finally:
        if running is None:
            spark.stop()
    return 0


def take_snapshot(args: argparse.Namespace) -> str:
    """Today's snapshot (UTC day), taken now unless a whole one is there.

    The request names the day (``YYYY-MM-DD``), as a board started with
    ``--snapshot-dir`` wants it: that board writes it under its snapshot
    directory, which ``SNAPSHOTS`` must then be (or show: a mount of it);
    the board's answer says where it wrote, and a ``SNAPSHOTS`` that does
    not hold it is an error that says so. An open board with no snapshot
    directory refuses a relative name (RelativePath): it is then sent
    ``SNAPSHOTS/YYYY-MM-DD`` whole."""
    from msgboard.cli.commands import connect
    from msgboard.errors import FailedPrecondition, RelativePath
    from msgboard.lmdbstore import snapshot as snapshots

    day = datetime.now(UTC).strftime("%Y-%m-%d")
    path = os.path.join(os.path.abspath(args.snapshots), day)
    if os.path.exists(os.path.join(path, snapshots.FILE)):
        info = snapshots.load(path)
        log(f"snapshot: {path} is there already ({info.messages:,} messages): using it")
        return path
    with connect(args) as c:
        try:
            snap = c.snapshot(day)
        except RelativePath:
            snap = c.snapshot(path)
    here = snapshots.load(path) if os.path.exists(os.path.join(path, snapshots.FILE)) else None
    if here is None or here.taken_at != snap.taken_at:
        raise FailedPrecondition(
            f"the board wrote today's snapshot to {snap.path} (its --snapshot-dir), "
            f"which {path} is not: give nightly the board's snapshot directory as SNAPSHOTS "
            "(or where this machine mounts it)"
        )
    log(f"snapshot: {path} ({snap.messages:,} messages, {snap.bytes:,} bytes)")
    return path


def export(spark: SparkSession, snap: str, out: str, full: bool) -> None:
    from pyspark_msgboard.export import export as run_export

    done = run_export(spark, snap, out, full=full)
    log(f"export: {done.line()}")


def report(spark: SparkSession, parquet: str, out: str, dead_letter: tuple[str, ...]) -> None:
    from pyspark_msgboard.report import report as run_report

    r = run_report(spark, parquet, out, dead_letter=dead_letter)
    log(f"report of {r.figures['messages']:,} messages: {out}/index.html")
    sys.stdout.flush()
