"""The Spark commands of ``msgboard``: ``export``, ``report`` and ``nightly``
(``msgboard.cli`` parses them and hands them here, so that serving never
imports pyspark).

``nightly`` is the night in one command, one log and one exit status::

    msgboard nightly SNAPSHOTS DATASET REPORTS [--server HOST:PORT] [Spark options]

1. snapshot: the board writes ``SNAPSHOTS/YYYY-MM-DD`` (today, UTC); a
   snapshot already there from an earlier run today is used as it is;
2. export: ``DATASET`` is brought up to date from it (``export.py``);
   the same snapshot twice changes nothing;
3. report: ``REPORTS/YYYY-MM-DD`` is written aside and swapped in, unless
   it already shows the dataset as it is.

What can be decided without Spark is decided first (the books, the
snapshot's manifest, the survey of what changed, the report's own
``report.json``), and Spark starts only for a night with more rows to
decode than ``--local-rows`` (fewer are decoded in this process); the
report is summed from the dataset's aggregates, with no Spark. Each step prints one line,
time-stamped in UTC, to standard output. Spark's own logging goes to a file
(``--spark-log``, by default ``DATASET.spark.log`` beside the dataset, or
``OUT.spark.log`` for export and report; ``-`` keeps it on standard error).
A failure is one ``msgboard: CODE: …`` line on standard error and exit 1:
a JVM that dies or does not start, a full disk, no Java. Run it again after
a failure: every step either finds its work done or does it whole.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from msgboard.errors import FailedPrecondition, MsgboardError, StoreFull, Unavailable
from pyspark_msgboard import dataset
from pyspark_msgboard.session import quiet, session

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


def spark_log(args: argparse.Namespace) -> str | None:
    """Where Spark's own logging goes: ``--spark-log``, else beside the
    dataset (export, nightly) or the report (report); None: stderr."""
    given: str | None = getattr(args, "spark_log", None)
    if given == "-":
        return None
    if given:
        return os.path.abspath(given)
    out = args.dataset if args.command == "nightly" else args.out
    return f"{os.path.abspath(out).rstrip(os.sep)}.spark.log"


def log(text: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} {text}", flush=True)


class Spark:
    """The command's one SparkSession, started when a step first needs it
    (a night with nothing to decode and its report up to date starts none);
    stopped at the end unless it was running before."""

    def __init__(self, master: str | None, conf: dict[str, str], log: str | None) -> None:
        self.master, self.conf, self.log = master, conf, log
        self.spark: SparkSession | None = None
        self.ours = False

    def __call__(self) -> SparkSession:
        if self.spark is None:
            from pyspark.sql import SparkSession

            quiet(self.log)  # here, not before: a night without Spark imports none of it
            self.ours = SparkSession.getActiveSession() is None
            self.spark = session(self.master, conf=self.conf, log=self.log)
        return self.spark

    def stop(self) -> None:
        if self.spark is not None and self.ours:
            with contextlib.suppress(Exception):  # a dead JVM: the error says so already
                self.spark.stop()


def run(args: argparse.Namespace) -> int:
    conf = settings(args)
    where = spark_log(args)
    spark = Spark(args.master, conf, where)
    try:
        with failures(where):
            if args.command == "export":
                export(spark, os.path.abspath(args.snapshot), args.out, args)
            elif args.command == "report":
                out = os.path.abspath(args.out)
                last = _last(os.path.dirname(out), os.path.basename(out))
                report(args.parquet, args.out, tuple(args.dead_letter or ()), last)
            else:
                nightly(args, spark)
    finally:
        spark.stop()
    return 0


def nightly(args: argparse.Namespace, spark: Spark) -> None:
    snap = take_snapshot(args)
    export(spark, snap, args.dataset, args)
    day = os.path.basename(snap)
    out = os.path.join(args.reports, day)
    globs = tuple(args.dead_letter or ())
    if current(out, args.dataset, globs):
        log(f"report: {out}/index.html shows the dataset as it is: nothing to do")
    else:
        report(args.dataset, out, globs, _last(args.reports, day))
    from pyspark_msgboard.report import nights

    log(f"nights: {nights(args.reports)}")
    log("nightly: done")


def current(out: str, parquet: str, globs: tuple[str, ...]) -> bool:
    """Whether the report at ``out`` shows the dataset at ``parquet`` as it
    is now (the same snapshot and runs, the same ``--dead-letter`` globs)."""
    try:
        with open(os.path.join(out, "report.json")) as f:  # report.MADE
            made = json.load(f)
        books = dataset.load(parquet)
    except (OSError, ValueError, dataset.DatasetError):
        return False
    return (
        books is not None
        and made.get("taken_at_us") == books.snapshot.get("taken_at_us")
        and made.get("runs") == len(books.runs)
        and made.get("dead_letter") == list(globs)
    )


@contextlib.contextmanager
def failures(log: str | None) -> Iterator[None]:
    """Spark's ways of failing as one MsgboardError each (one line, exit 1):
    a JVM that dies mid-run or does not start, a full disk."""
    see = f": see {log}" if log else ""
    try:
        yield
    except MsgboardError:
        raise
    except Exception as e:
        text = str(e)
        if _full(e):
            raise StoreFull(f"disk full ({_first(text)}); the dataset is as it was") from None
        if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
            raise FailedPrecondition(
                "Spark's JVM did not start: check --driver-memory, --conf and JAVA_HOME" + see
            ) from None
        if _dead(e):
            raise Unavailable(
                f"Spark's JVM went away ({type(e).__name__}); the dataset is as it was" + see
            ) from None
        raise


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)[:200]


def _full(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(e)


def _dead(e: BaseException) -> bool:
    """A lost connection to the JVM, however py4j or pyspark wraps it."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        kind = type(cur).__name__
        if isinstance(cur, ConnectionError | EOFError) or kind in (
            "Py4JNetworkError",
            "Py4JError",
        ):
            return True
        if "Answer from Java side is empty" in str(cur) or "JVM" in kind:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


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


def export(spark: Spark, snap: str, out: str, args: argparse.Namespace) -> None:
    from pyspark_msgboard.export import export as run_export

    done = run_export(spark, snap, out, full=args.full, local_rows=args.local_rows)
    log(f"export: {done.line()}")


def _last(reports: str, day: str) -> str | None:
    """The newest report under ``reports`` but ``day``'s (last night's;
    for ``msgboard report DATASET OUT``, the newest report beside ``OUT``)."""
    from pyspark_msgboard.report import MADE

    names = sorted(os.listdir(reports)) if os.path.isdir(reports) else []
    made = [n for n in names if n != day and os.path.exists(os.path.join(reports, n, MADE))]
    return os.path.join(reports, made[-1]) if made else None


def report(
    parquet: str, out: str, dead_letter: tuple[str, ...], previous: str | None = None
) -> None:
    from pyspark_msgboard.report import report as run_report

    r = run_report(parquet, out, dead_letter=dead_letter, previous=previous)
    log(f"report of {r.figures['messages']:,} messages: {out}/index.html")
    sys.stdout.flush()
