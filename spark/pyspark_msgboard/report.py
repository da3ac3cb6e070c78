"""The history report: a dataset -> tables, SVG charts, one HTML page.

::

    msgboard report /shared/history /srv/www/msgboard/2026-11-21

Summed from the dataset's aggregates (``aggregates.py``: one small file
per data file, written by the export for the files a night writes and
hard-linked with those it keeps), in this process with pandas, no Spark: a
night's report costs what the night changed, and an idle night's reads
small JSON files only. ``tables`` computes the same tables with Spark from
the rows (the reference the tests compare against). Each table is written
as Parquet (``OUT/parquet/NAME``) and CSV (``OUT/NAME.csv``):

- ``traffic_queue``: per queue and hour (UTC), messages posted and processed.
- ``traffic_address``: the same per address.
- ``latency``: per queue, post-to-processed time of the processed messages
  (those a consumer acked or a Take took: ``exit`` acked or taken; not the
  moved, dead-lettered, expired or dropped) in
  milliseconds: count, mean, max, and p50/p95/p99 *approximate*: read
  from histograms of log buckets (``aggregates.GAMMA``), within 1% of the
  value at the rank, which fit in memory whatever the number of rows
  (``tables``, with Spark: ``percentile_approx`` at ACCURACY).
- ``deliveries``: per queue (every queue on the board at the snapshot, the
  empty ones too, and any gone with rows left), messages, unprocessed,
  redelivered (delivery count above 1), the highest delivery count
  (``most_deliveries``), the queue's ``max_deliveries`` property (0: no
  limit), how its history rows left (``exit``, as the board recorded it):
  ``processed`` (acked or taken), ``moved``, ``dead_lettered``, ``expired``,
  ``dropped`` and ``not_recorded`` (a record from before exits were
  recorded), ``posted`` (its ``next_seq`` - 1) and ``unrecorded`` (posted,
  but the dataset has no row of it: it left the board with no history
  record), ``scheduled`` (posted with a ``not_before`` still to come at
  the snapshot: no row yet), and ``balanced``: posted = unprocessed +
  processed + moved + dead_lettered + expired + dropped + not_recorded +
  unrecorded + scheduled (null for a
  queue no longer on the board); and
  whether it is a dead-letter queue: one that a queue's
  properties name as its ``dead_letter`` (recorded in the snapshot manifest
  and the dataset's books), or whose name matches a ``--dead-letter`` glob.
  Its messages are the dead letters. A header alone makes no queue a dead-letter queue.
- ``dead_letters``: per dead-letter queue, the queue each dead letter came
  from and why (the board's ``x-dead-letter-queue`` and
  ``x-dead-letter-reason`` headers, believed only when that queue does name
  this one as its dead-letter queue; blank otherwise).
- ``shapes``: the most common tuple shapes, e.g. ``(string, int, float)``;
  long ones abbreviated on the page (``abbreviate``), whole in the CSV.

``OUT/index.html`` shows the headline figures, one chart per table and the
top rows, with links to the CSVs. Times are UTC throughout. ``OUT`` is
written aside and swapped in whole, so a report is never half old.
"""

from __future__ import annotations

import fnmatch
import html
import json
import math
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark_msgboard import dataset

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

TOP_SHAPES = 20
#: What a report records of what it shows (``commands.current`` reads it).
MADE = "report.json"


#: A span of posts shorter than this is charted by minute, not by hour.
SHORT_US = 6 * 3600 * 1_000_000


def _traffic(df: DataFrame, key: str, unit: str = "hour") -> DataFrame:
    """Posted and processed per ``key`` and ``unit`` of time (the column is
    called ``hour`` whatever the unit)."""
    from pyspark.sql import functions as F

    posted = df.select(
        key, F.date_trunc(unit, "posted_at").alias("hour"), F.lit(1).alias("p"), F.lit(0)
    )
    processed = df.where(F.col("processed_at").isNotNull()).select(
        key, F.date_trunc(unit, "processed_at").alias("hour"), F.lit(0), F.lit(1)
    )
    both = posted.union(processed).toDF(key, "hour", "posted", "processed")
    counts = both.groupBy(key, "hour").agg(
        F.sum("posted").cast("long").alias("posted"),
        F.sum("processed").cast("long").alias("processed"),
    )
    return counts.orderBy(key, "hour")


def _shape(tuple_col: str = "tuple") -> Column:
    from pyspark.sql import functions as F

    types = F.transform(F.col(tuple_col), lambda v: v["type"])
    return F.concat(F.lit("("), F.array_join(types, ", "), F.lit(")"))


#: Relative accuracy of the percentiles (``percentile_approx``): the value
#: returned is within 1/ACCURACY of the true rank of the requested one.
ACCURACY = 10_000
#: What the report reads: never the bodies, headers or tuples whole.
COLUMNS = (
    "queue",
    "queue_id",
    "section",
    "address",
    "posted_at",
    "processed_at",
    "delivery_count",
    "exit",
)
#: The ``exit`` values counted as processed (consumed): latency is theirs.
PROCESSED = ("acked", "taken")
#: The columns of ``deliveries`` that count history rows by how they left.
EXITS = ("processed", "moved", "dead_lettered", "expired", "dropped", "not_recorded")
#: The headers the board sets when it dead-letters a message (engine/overflow.py).
REASON = "x-dead-letter-reason"
SOURCE = "x-dead-letter-queue"


def tables(
    df: DataFrame,
    dead_letter: dict[str, list[str]] | None = None,
    globs: tuple[str, ...] = (),
    queues: dict[str, dict[str, Any]] | None = None,
) -> dict[str, DataFrame]:
    """The report's tables, as Spark DataFrames over the messages ``df``.
    ``dead_letter``: each dead-letter queue with the queues that name it
    (their properties, ``dataset.Books.dead_letter_queues``); ``globs``:
    more dead-letter queues by name; ``queues``: the books' queues, so that
    a queue with no rows is counted too, with its properties."""
    from pyspark.sql import functions as F

    dead_letter = dead_letter or {}
    spark = df.sparkSession
    latency_ms = (F.unix_micros("processed_at") - F.unix_micros("posted_at")) / 1000.0
    processed = df.where(F.col("exit").isin(*PROCESSED)).withColumn("ms", latency_ms)
    p = F.percentile_approx("ms", [0.5, 0.95, 0.99], ACCURACY)
    latency = (
        processed.groupBy("queue")
        .agg(
            F.count("*").alias("processed"),
            F.mean("ms").alias("mean_ms"),
            p.alias("p"),
            F.max("ms").alias("max_ms"),
        )
        .select(
            "queue",
            "processed",
            "mean_ms",
            *(F.col("p")[i].alias(name) for i, name in enumerate(("p50_ms", "p95_ms", "p99_ms"))),
            "max_ms",
        )
        .orderBy("queue")
    )
    names = {r["queue"] for r in df.select("queue").distinct().collect()} | set(queues or {})
    named = [q for q in names if any(fnmatch.fnmatchcase(q, g) for g in globs)]
    dlqs = sorted({*dead_letter, *named})
    # Every queue of the books (an empty one too) with its max_deliveries
    # property (0: no limit), and any queue with rows.
    props = spark.createDataFrame(
        [
            (
                name,
                int(((q.get("spec") or {}).get("max_deliveries")) or 0),
                int(q.get("next_seq", 1)) - 1,
                int(q.get("unrecorded", 0)),
                int(q.get("scheduled", 0)),
            )
            for name, q in sorted((queues or {}).items())
        ],
        "queue string, max_deliveries long, posted long, unrecorded long, scheduled long",
    )
    counts = df.groupBy("queue").agg(
        F.count("*").alias("messages"),
        F.sum((F.col("section") == "unprocessed").cast("long")).alias("unprocessed"),
        F.sum((F.col("delivery_count") > 1).cast("long")).alias("redelivered"),
        F.max("delivery_count").alias("most_deliveries"),
        *(_exit_count(name).alias(name) for name in EXITS),
    )
    deliveries = (
        counts.join(props, "queue", "full")
        .select(
            "queue",
            *(
                F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c)
                for c in ("messages", "unprocessed", "redelivered", "most_deliveries", *EXITS)
            ),
            F.coalesce(F.col("max_deliveries"), F.lit(0)).alias("max_deliveries"),
            "posted",
            "unrecorded",
            F.coalesce(F.col("scheduled"), F.lit(0)).alias("scheduled"),
        )
        .withColumn("dead_letter_queue", F.col("queue").isin(dlqs))
        .withColumn("balanced", balanced())
        .orderBy("queue")
    )
    # A dead letter's source queue, from the board's header, believed only
    # when that queue does name this one as its dead-letter queue.
    pairs = [(dlq, src) for dlq, srcs in dead_letter.items() for src in srcs]
    valid = spark.createDataFrame(pairs or [("", "")], "queue string, source string")
    letters = (
        df.where(F.col("queue").isin(dlqs))
        .select(
            "queue",
            F.col("headers")[SOURCE].alias("source"),
            F.col("headers")[REASON].alias("reason"),
        )
        .join(F.broadcast(valid.withColumn("_ok", F.lit(True))), ["queue", "source"], "left")
        .select(
            "queue",
            F.when(F.col("_ok"), F.col("source")).alias("source"),
            F.when(F.col("_ok"), F.col("reason")).alias("reason"),
        )
        .groupBy("queue", "source", "reason")
        .agg(F.count("*").alias("messages"))
        .orderBy("queue", F.col("source").asc_nulls_last(), F.col("reason").asc_nulls_last())
    )
    shapes = (
        df.groupBy(_shape().alias("shape"))
        .agg(F.count("*").alias("messages"), F.countDistinct("queue").alias("queues"))
        .orderBy(F.desc("messages"), "shape")
        .limit(TOP_SHAPES)
    )
    return {
        "traffic_queue": _traffic(df, "queue"),
        "traffic_address": _traffic(df, "address"),
        "latency": latency,
        "deliveries": deliveries,
        "dead_letters": letters,
        "shapes": shapes,
    }


def _exit_count(name: str) -> Column:
    """How many history rows of a group left as ``name`` (one of EXITS)."""
    from pyspark.sql import functions as F

    history = F.col("section") == "history"
    if name == "processed":
        left = F.col("exit").isin(*PROCESSED)
    elif name == "not_recorded":
        left = history & F.col("exit").isNull()
    else:
        left = F.col("exit") == name
    return F.sum(F.coalesce(left, F.lit(False)).cast("long"))


def balanced() -> Column:
    """posted = waiting + every way out + unrecorded + scheduled, for a
    queue on the board (null for one gone, whose posted the books no longer
    know)."""
    from pyspark.sql import functions as F

    total = F.col("unprocessed") + F.col("unrecorded") + F.col("scheduled")
    for name in EXITS:
        total = total + F.col(name)
    return F.when(F.col("posted").isNull(), F.lit(None)).otherwise(F.col("posted") == total)


def generation(ids: dict[str, int]) -> Column:
    """The ``queue`` column with rows of a queue's earlier generations (a
    queue deleted and made again under its name: another ``queue_id``) or
    of a queue no longer on the board labelled ``NAME (deleted, id N)``,
    so that every table keeps the generations apart. ``ids``: the queues
    on the board, by name. Rows written before ``queue_id`` keep their
    name."""
    from pyspark.sql import functions as F

    pairs = [F.lit(x) for name, qid in sorted(ids.items()) for x in (name, qid)]
    current = F.create_map(*pairs)[F.col("queue")] if pairs else F.lit(None)
    same = F.col("queue_id").isNull() | (F.col("queue_id") == current)
    deleted = F.format_string("%s (deleted, id %d)", F.col("queue"), F.col("queue_id"))
    return F.when(same, F.col("queue")).otherwise(deleted)


def abbreviate(shape: str, most: int = 60) -> str:
    """A tuple shape for a label: runs of one type as ``62 int``, and cut at
    about ``most`` characters with the field count, e.g.
    ``(string, 62 int, float)`` or ``(string, int, bool, … 64 fields)``."""
    inner = shape[1:-1]
    if not inner:
        return shape
    types = inner.split(", ")
    runs: list[str] = []
    i = 0
    while i < len(types):
        j = i
        while j < len(types) and types[j] == types[i]:
            j += 1
        runs.append(types[i] if j - i == 1 else f"{j - i} {types[i]}")
        i = j
    text = ", ".join(runs)
    if len(text) + 2 <= most:
        return f"({text})"
    cut = text[: most - 16].rsplit(", ", 1)[0]
    return f"({cut}, … {len(types)} fields)"


@dataclass(frozen=True)
class Report:
    """What ``report`` wrote, and the tables' contents (small: aggregates)."""

    out: str
    frames: dict[str, pd.DataFrame]
    figures: dict[str, Any]


def report(
    parquet: str,
    out: str,
    *,
    dead_letter: tuple[str, ...] = (),
    previous: str | None = None,
) -> Report:
    """Makes the tables from the dataset's aggregates (``aggregates.py``:
    one small file per data file, kept beside it by the export) and writes
    them, the charts and ``index.html`` to the directory ``out``: written
    aside, then swapped in whole. No Spark, and no row of the dataset read
    unless a data file has no aggregates yet (a dataset an older export
    wrote). ``dead_letter``: more dead-letter queues by name (globs),
    beside those the queues' properties name.

    When the report at ``out`` or at ``previous`` (last night's) was made
    from the same aggregates and books (``digest``: an idle night's), its
    tables and charts are taken over as they are and only the page's
    snapshot line and ``report.json`` are new: no table is summed and no
    chart drawn (``Report.frames`` is then empty)."""
    from pyspark_msgboard import aggregates

    try:
        books = dataset.load(parquet)
    except dataset.DatasetError:
        books = None  # an export of an older version: --dead-letter globs only
    dlqs = books.dead_letter_queues() if books else {}
    live = {n: q for n, q in books.queues.items() if not q.get("gone")} if books else None
    files = aggregates.load(parquet)
    same = digest(files, books, dead_letter)
    last = _made(previous).get("figures") if previous else None
    for there in (out, previous):
        if there and _made(there).get("digest") == same:
            return _again(there, out, books, dead_letter, same, last)
    return _make(parquet, out, files, books, dlqs, live, dead_letter, same, last)


def digest(
    files: list[tuple[str, dict[str, Any]]],
    books: dataset.Books | None,
    globs: tuple[str, ...],
) -> str:
    """What a report shows depends on, hashed: every data file's
    aggregates, the books' queues (ids, properties, counts, generations),
    and the ``--dead-letter`` globs; not the snapshot's time."""
    import hashlib

    h = hashlib.sha256()
    for name, agg in files:
        h.update(json.dumps([name, agg], sort_keys=True).encode())
    if books is not None:
        h.update(json.dumps([books.queues, books.earlier], sort_keys=True, default=str).encode())
    h.update(json.dumps(list(globs)).encode())
    return h.hexdigest()


def _made(where: str) -> dict[str, Any]:
    try:
        with open(os.path.join(where, MADE)) as f:
            made: dict[str, Any] = json.load(f)
            return made
    except (OSError, ValueError):
        return {}


def _again(
    before: str,
    out: str,
    books: dataset.Books | None,
    globs: tuple[str, ...],
    same: str,
    last: dict[str, Any] | None,
) -> Report:
    """The report at ``before`` again for the books now (``out`` may be
    ``before`` itself): its files copied, the page's snapshot line, its
    "since last night" (``last``: last night's figures) and ``report.json``
    new."""
    import re

    made = _made(before)
    figures = dict(made.get("figures") or {})
    figures["taken_at"] = books.snapshot.get("taken_at") if books else None
    figures["made_at"] = dataset.now()
    new = dataset.partial(out)
    try:
        shutil.copytree(before, new)
        path = os.path.join(new, "index.html")
        with open(path) as f:
            text = f.read()
        line = f"<p class=sub id=made>{html.escape(_made_line(figures))}</p>"
        text = re.sub(r"<p class=sub id=made>.*?</p>", lambda _: line, text, count=1)
        day = since(figures, last)
        text = re.sub(r"<section id=day>.*?</section>", lambda _: day, text, count=1, flags=re.S)
        with open(path, "w") as f:
            f.write(text)
        _write_made(new, figures, books, globs, same)
        dataset.swap(new, out)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return Report(out, {}, figures)


def _made_line(figures: dict[str, Any]) -> str:
    taken = figures.get("taken_at")
    made = f"snapshot taken {_stamp(taken)}" if taken else "snapshot: not recorded"
    return made + f" · report made {_stamp(figures.get('made_at'))}"


def _write_made(
    new: str,
    figures: dict[str, Any],
    books: dataset.Books | None,
    globs: tuple[str, ...],
    same: str,
) -> None:
    made = {
        "taken_at": figures["taken_at"],
        "taken_at_us": books.snapshot.get("taken_at_us") if books else None,
        "runs": len(books.runs) if books else None,
        "dead_letter": list(globs),
        "made_at": figures["made_at"],
        "digest": same,
        "figures": {k: v for k, v in figures.items() if k not in ("first", "last")},
    }
    with open(os.path.join(new, MADE), "w") as f:
        json.dump(made, f, indent=1)
        f.write("\n")


def _make(
    parquet: str,
    out: str,
    files: list[tuple[str, dict[str, Any]]],
    books: dataset.Books | None,
    dlqs: dict[str, list[str]],
    live: dict[str, dict[str, Any]] | None,
    dead_letter: tuple[str, ...],
    same: str,
    before: dict[str, Any] | None,
) -> Report:
    """The report made from the aggregates ``files``; ``before``: last
    night's figures (None: none), for what changed since."""
    from pyspark_msgboard import charts

    merged = merge(files, live, dlqs, dead_letter)
    frames, span = merged.frames, merged.span
    new = dataset.partial(out)
    try:
        os.makedirs(new)
        _write_tables(frames, new)
        frames["shapes"]["shape"] = [abbreviate(x) for x in frames["shapes"]["shape"]]
        d = frames["deliveries"]
        figures: dict[str, Any] = {
            "messages": span["messages"],
            # On the board at the snapshot, the empty ones too (the books).
            "queues": len(live) if live is not None else span["queues"],
            "first": _utc(span["first"]),
            "last": _utc(span["last"]),
            "processed": int(frames["latency"]["processed"].sum()),
            "redelivered": int(d["redelivered"].sum()),
            # Messages in dead-letter queues (what is there to look at) ...
            "dead_letters": int(d.loc[d["dead_letter_queue"], "messages"].sum()),
            # ... and the history rows of each way out but processing.
            **{name: int(d[name].sum()) for name in EXITS if name != "processed"},
            "unbalanced": int((d["balanced"] == False).sum()),  # noqa: E712 (None: gone)
            "unprocessed": int(d["unprocessed"].sum()),
            "posted": int(d["posted"].fillna(0).sum()),
            "slowest": _slowest(frames["latency"]),
        }
        figures["taken_at"] = books.snapshot.get("taken_at") if books else None
        figures["made_at"] = dataset.now()
        drawn = dict(frames)
        if span["first"] is not None and span["last"] - span["first"] < SHORT_US:
            # Hours would draw a few flat blocks: the chart goes by minute.
            drawn["traffic_queue"] = merged.by_minute
        drawings = charts.draw(drawn, new)
        with open(os.path.join(new, "index.html"), "w") as f:
            f.write(page(frames, figures, drawings, parquet, before))
        _write_made(new, figures, books, dead_letter, same)
        dataset.swap(new, out)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return Report(out, frames, figures)


def _write_tables(frames: dict[str, pd.DataFrame], new: str) -> None:
    """Each table as ``NAME.csv`` and ``parquet/NAME/part-0.parquet``
    (timestamps as µs, as Spark reads them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, frame in frames.items():
        os.makedirs(os.path.join(new, "parquet", name))
        table = pa.Table.from_pandas(frame, preserve_index=False)
        path = os.path.join(new, "parquet", name, "part-00000.parquet")
        pq.write_table(table, path, coerce_timestamps="us", allow_truncated_timestamps=True)
        frame.to_csv(os.path.join(new, f"{name}.csv"), index=False)


@dataclass(frozen=True)
class Merged:
    """The report's tables summed from the data files' aggregates."""

    frames: dict[str, pd.DataFrame]
    #: messages, queues (with rows), first and last posted_at (µs).
    span: dict[str, Any]
    #: traffic_queue by minute, for a short span's chart.
    by_minute: pd.DataFrame


def merge(
    files: list[tuple[str, dict[str, Any]]],
    queues: dict[str, dict[str, Any]] | None,
    dead_letter: dict[str, list[str]],
    globs: tuple[str, ...],
) -> Merged:
    """The report's tables from each data file's aggregates (``files``:
    its queue and aggregates), as ``tables`` computes them with Spark from
    the rows; ``queues``: the books' queues on the board (a queue with no
    rows is counted too, with its properties; a row of another generation
    of a name, or of a queue gone, is labelled ``NAME (deleted, id N)``)."""
    import pandas as pd

    ids = {n: int(q["id"]) for n, q in (queues or {}).items()}

    def label(name: str, qid: int | None) -> str:
        if queues is None or qid is None or ids.get(name) == qid:
            return name
        return f"{name} (deleted, id {qid})"

    traffic, counts, letters, shapes = [], [], [], []
    latency: dict[str, dict[str, Any]] = {}
    first = last = None
    for name, agg in files:
        q = label(name, agg.get("queue_id"))
        traffic += [(q, a, m, p, d) for a, m, p, d in agg["traffic"]]
        counts.append({"queue": q, **agg["counts"]})
        letters += [(q, src, why, k) for src, why, k in agg["letters"]]
        shapes += [(q, shape, k) for shape, k in agg["shapes"]]
        lat = agg["latency"]
        if lat["count"]:
            into = latency.setdefault(q, {"count": 0, "sum_us": 0, "max_us": 0, "buckets": {}})
            into["count"] += lat["count"]
            into["sum_us"] += lat["sum_us"]
            into["max_us"] = max(into["max_us"], lat["max_us"])
            for b, k in lat["buckets"].items():
                into["buckets"][int(b)] = into["buckets"].get(int(b), 0) + k
        if agg["first"] is not None:
            first = agg["first"] if first is None else min(first, agg["first"])
            last = agg["last"] if last is None else max(last, agg["last"])

    t = pd.DataFrame(traffic, columns=["queue", "address", "minute", "posted", "processed"])
    t = t.astype({"minute": "int64", "posted": "int64", "processed": "int64"})
    t["hour"] = t["minute"] // 60
    frames: dict[str, pd.DataFrame] = {
        "traffic_queue": _sum_by(t, "queue", "hour", 3600),
        "traffic_address": _sum_by(t, "address", "hour", 3600),
    }
    by_minute = _sum_by(t, "queue", "minute", 60).rename(columns={"hour": "minute"})
    frames["latency"] = _latency(latency)
    c = pd.DataFrame(
        counts,
        columns=["queue", "messages", "unprocessed", "redelivered", "most_deliveries", *EXITS],
    )
    names = set(c["queue"]) | set(queues or {})
    named = [q for q in names if any(fnmatch.fnmatchcase(q, g) for g in globs)]
    dlqs = sorted({*dead_letter, *named})
    frames["deliveries"] = _deliveries(c, queues, dlqs)
    frames["dead_letters"] = _letters(letters, dead_letter, dlqs)
    frames["shapes"] = _shape_table(shapes)
    span = {
        "messages": int(c["messages"].sum()),
        "queues": int(c.loc[c["messages"] > 0, "queue"].nunique()),
        "first": first,
        "last": last,
    }
    return Merged(frames, span, by_minute)


def _sum_by(t: pd.DataFrame, key: str, unit: str, seconds: int) -> pd.DataFrame:
    """Posted and processed per ``key`` and time ``unit`` (a column of ``t``
    counted in ``seconds``), as naive UTC times; the column is called
    ``hour`` whatever the unit."""
    import pandas as pd

    g = t.groupby([key, unit], as_index=False)[["posted", "processed"]].sum()
    g = g.sort_values([key, unit], kind="stable").reset_index(drop=True)
    hour = pd.to_datetime(g[unit] * seconds, unit="s")
    return pd.DataFrame(
        {key: g[key], "hour": hour, "posted": g["posted"], "processed": g["processed"]}
    )


def _latency(latency: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per queue: processed, mean, p50/p95/p99 (from the merged buckets,
    within 1% of the value) and max, in milliseconds."""
    import pandas as pd

    from pyspark_msgboard.aggregates import value

    rows = []
    for q in sorted(latency):
        lat = latency[q]
        n = lat["count"]
        order = sorted(lat["buckets"].items())
        ps = []
        for f in (0.5, 0.95, 0.99):
            rank = max(1, math.ceil(f * n))
            seen = 0
            for b, k in order:
                seen += k
                if seen >= rank:
                    ps.append(min(value(b), lat["max_us"]) / 1000.0)
                    break
        rows.append((q, n, lat["sum_us"] / n / 1000.0, *ps, lat["max_us"] / 1000.0))
    cols = ["queue", "processed", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"]
    return pd.DataFrame(rows, columns=cols).astype({"processed": "int64"})


def _deliveries(
    c: pd.DataFrame, queues: dict[str, dict[str, Any]] | None, dlqs: list[str]
) -> pd.DataFrame:
    import pandas as pd

    g = c.groupby("queue", as_index=False).agg(
        {
            "messages": "sum",
            "unprocessed": "sum",
            "redelivered": "sum",
            "most_deliveries": "max",
            **dict.fromkeys(EXITS, "sum"),
        }
    )
    props = pd.DataFrame(
        [
            (
                name,
                int(((q.get("spec") or {}).get("max_deliveries")) or 0),
                int(q.get("next_seq", 1)) - 1,
                int(q.get("unrecorded", 0)),
                int(q.get("scheduled", 0)),
            )
            for name, q in sorted((queues or {}).items())
        ],
        columns=["queue", "max_deliveries", "posted", "unrecorded", "scheduled"],
    )
    d = g.merge(props, on="queue", how="outer")
    counted = ("messages", "unprocessed", "redelivered", "most_deliveries", *EXITS)
    for col in (*counted, "max_deliveries", "scheduled"):
        d[col] = pd.to_numeric(d[col]).fillna(0).astype("int64")
    d["posted"] = pd.to_numeric(d["posted"]).astype("Int64")
    d["unrecorded"] = pd.to_numeric(d["unrecorded"]).astype("Int64")
    d["dead_letter_queue"] = d["queue"].isin(dlqs)
    total = d["unprocessed"] + d["unrecorded"] + d["scheduled"]
    for name in EXITS:
        total = total + d[name]
    d["balanced"] = [
        None if pd.isna(p) else bool(p == s) for p, s in zip(d["posted"], total, strict=True)
    ]
    cols = ["queue", "messages", "unprocessed", "redelivered", "most_deliveries", *EXITS]
    cols += ["max_deliveries", "posted", "unrecorded", "scheduled", "dead_letter_queue"]
    cols += ["balanced"]
    return d[cols].sort_values("queue", kind="stable").reset_index(drop=True)


def _letters(
    letters: list[tuple[str, Any, Any, int]], dead_letter: dict[str, list[str]], dlqs: list[str]
) -> pd.DataFrame:
    """Per dead-letter queue, its messages by source and reason (the
    board's headers, believed only when that source names this queue as
    its dead-letter queue)."""
    import pandas as pd

    valid = {(dlq, src) for dlq, srcs in dead_letter.items() for src in srcs}
    counted: dict[tuple[str, Any, Any], int] = {}
    for q, src, why, k in letters:
        if q not in dlqs:
            continue
        key = (q, src, why) if (q, src) in valid else (q, None, None)
        counted[key] = counted.get(key, 0) + k
    rows = sorted(
        counted.items(),
        key=lambda kv: (kv[0][0], *_nulls_last(kv[0][1]), *_nulls_last(kv[0][2])),
    )
    return pd.DataFrame(
        [(q, s, r, k) for (q, s, r), k in rows], columns=["queue", "source", "reason", "messages"]
    ).astype({"messages": "int64"})


def _nulls_last(v: str | None) -> tuple[bool, str]:
    return (v is None, v or "")


def _shape_table(shapes: list[tuple[str, str, int]]) -> pd.DataFrame:
    import pandas as pd

    messages: dict[str, int] = {}
    queues: dict[str, set[str]] = {}
    for q, shape, k in shapes:
        messages[shape] = messages.get(shape, 0) + k
        queues.setdefault(shape, set()).add(q)
    rows = [(s, n, len(queues[s])) for s, n in messages.items()]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return pd.DataFrame(rows[:TOP_SHAPES], columns=["shape", "messages", "queues"]).astype(
        {"messages": "int64", "queues": "int64"}
    )


def nights(reports: str) -> str:
    """Writes ``REPORTS/index.html``: one line per report under ``reports``
    (each ``REPORTS/NAME/report.json``), newest snapshot first, with its
    figures and a link. Python only, no Spark; written aside and renamed.
    Returns its path."""
    rows = []
    for name in sorted(os.listdir(reports)) if os.path.isdir(reports) else []:
        try:
            with open(os.path.join(reports, name, MADE)) as f:
                made = json.load(f)
        except (OSError, ValueError):
            continue  # not a report (or one from before report.json)
        rows.append((made.get("taken_at") or "", name, made))
    rows.sort(reverse=True)
    cells = ["night", "snapshot taken", "report made", "messages", "queues", "processed"]
    cells += ["moved", "dead-lettered", "expired", "redelivered", "in dead-letter queues"]
    head = "".join(f"<th>{c}</th>" for c in cells)
    body = []
    for _, name, made in rows:
        fig = made.get("figures") or {}
        link = f'<a href="{html.escape(name)}/index.html">{html.escape(name)}</a>'
        values = [_stamp(made.get("taken_at")), _stamp(made.get("made_at"))]
        values += [_fmt(fig.get(k, "")) for k in ("messages", "queues", "processed")]
        values += [_fmt(fig.get(k, "")) for k in ("moved", "dead_lettered", "expired")]
        values += [_fmt(fig.get(k, "")) for k in ("redelivered", "dead_letters")]
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in values)
        body.append(f"<tr><td>{link}</td>{tds}</tr>")
    table = f"<table><tr>{head}</tr>{''.join(body)}</table>" if body else "<p>No reports yet.</p>"
    page = f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>msgboard nights</title>
<style>
body{{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;
  padding:0 1em}}
table{{border-collapse:collapse;margin:.8em 0;font-size:14px}}
td,th{{border-bottom:1px solid #e3e3e3;padding:.3em .8em;text-align:right}}
th{{background:#fafafa}} td:first-child,th:first-child{{text-align:left}}
</style></head><body>
<h1>msgboard nights</h1>
<p>One report per night, the newest snapshot first; times are UTC.</p>
{table}
</body></html>
"""
    path = os.path.join(reports, "index.html")
    os.makedirs(reports, exist_ok=True)
    aside = f"{path}.partial"
    with open(aside, "w") as f:
        f.write(page)
    os.replace(aside, path)
    return path


def _utc(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC)


def _stamp(iso: str | None) -> str:
    """``2026-11-25T02:00:03Z`` as ``2026-11-25 02:00:03 UTC``."""
    return f"{iso.replace('T', ' ').removesuffix('Z').split('.')[0]} UTC" if iso else "?"


#: What a page says for a table with no rows, by table.
NONE = {
    "dead_letters": "No dead letters: no message is in a dead-letter queue.",
    "latency": "No message has been processed yet.",
}


def _table(frame: pd.DataFrame, rows: int = 12, none: str = "No rows.") -> str:
    if frame.empty:
        return f"<p class=none>{html.escape(none)}</p>"
    head = frame.head(rows)
    names = [str(c).removesuffix("_ms") for c in head.columns]
    cells = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in names)
    body = []
    for _, r in head.iterrows():
        tds = "".join(
            f"<td>{html.escape(duration(v) if str(c).endswith('_ms') else _fmt(v))}</td>"
            for c, v in zip(head.columns, r, strict=True)
        )
        body.append(f"<tr>{tds}</tr>")
    more = (
        f"<p class=more>{len(frame) - rows} more rows in the CSV</p>" if len(frame) > rows else ""
    )
    return f"<div class=wide><table><tr>{cells}</tr>{''.join(body)}</table></div>{more}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


SECTIONS = [
    (
        "traffic_queue",
        "Traffic per queue",
        "Messages posted per hour (UTC), per queue (the chart goes by minute when the "
        "posts span less than six hours).",
    ),
    (
        "latency",
        "Post-to-processed latency",
        "Per queue, milliseconds, of the messages acked or taken (not the moved, "
        "dead-lettered, expired or dropped); p50, p95 and p99 are approximate (within "
        "1% of the value).",
    ),
    (
        "deliveries",
        "Redeliveries and dead letters",
        "Per queue, every queue on the board: most_deliveries is the highest delivery "
        "count of a message, max_deliveries the queue's limit (0: none); how the history "
        "rows left, as the board recorded it (processed: acked or taken; not_recorded: "
        "written before exits were recorded); balanced: posted = unprocessed + processed "
        "+ moved + dead_lettered + expired + dropped + not_recorded + unrecorded (posted, "
        "but left the board with no history record) + scheduled (posted with a not_before "
        "still to come: no row yet).",
    ),
    (
        "dead_letters",
        "Dead letters by source",
        "Messages in dead-letter queues, by the queue that dead-lettered them and why "
        "(blank: not put there by the board).",
    ),
    ("traffic_address", "Traffic per address", "Messages posted per hour, busiest addresses."),
    ("shapes", "Tuple shapes", "The most common field types in order."),
]


#: What changed since last night, in the order the page says it: the
#: figure, and its words.
DAY = (
    ("posted", "posted"),
    ("processed", "processed (acked or taken)"),
    ("moved", "moved (by a selector)"),
    ("dead_lettered", "dead-lettered"),
    ("expired", "expired"),
    ("dropped", "dropped"),
    ("unprocessed", "backlog (waiting)"),
    ("dead_letters", "in dead-letter queues"),
)


def since(figures: dict[str, Any], last: dict[str, Any] | None) -> str:
    """The page's first section: what changed since last night's report
    (``last``: its figures), in and out by each way and the backlog's
    growth, then the slowest queues (by p99)."""
    if last is None:
        rows = "<p class=none>No report of an earlier night to compare with.</p>"
    else:
        cells = []
        for key, words in DAY:
            now, then = int(figures.get(key) or 0), int(last.get(key) or 0)
            delta = now - then
            sign = "+" if delta > 0 else ""
            cells.append(
                f"<tr><td>{html.escape(words)}</td><td><b>{sign}{delta:,}</b></td>"
                f"<td>{then:,}</td><td>{now:,}</td></tr>"
            )
        stamp = _stamp(last.get("taken_at"))
        rows = (
            f"<p>Against the snapshot of {html.escape(stamp)}.</p><div class=wide><table>"
            "<tr><th></th><th>since last night</th><th>last night</th><th>now</th></tr>"
            f"{''.join(cells)}</table></div>"
        )
    slow = figures.get("slowest") or []
    if slow:
        items = "".join(
            f"<tr><td>{html.escape(str(q))}</td><td>{html.escape(duration(p99))}</td>"
            f"<td>{n:,}</td></tr>"
            for q, p99, n in slow
        )
        rows += (
            "<h3>Slowest queues</h3><div class=wide><table><tr><th>queue</th>"
            f"<th>p99 post to processed</th><th>processed</th></tr>{items}</table></div>"
        )
    return f"<section id=day><h2>Since last night</h2>{rows}</section>"


def duration(ms: float | None) -> str:
    """Milliseconds in the unit a person reads: ``850 ms``, ``2.4 s``,
    ``3.1 min``, ``5.0 h``, ``2.1 days``."""
    if ms is None or ms != ms:
        return ""
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:,.1f} {unit}"
    return f"{ms:,.1f} ms" if abs(ms) < 10 else f"{ms:,.0f} ms"


def _slowest(latency: pd.DataFrame, n: int = 5) -> list[list[Any]]:
    """The ``n`` queues of highest p99 latency: queue, p99 ms, processed."""
    top = latency.sort_values(["p99_ms", "queue"], ascending=[False, True]).head(n)
    return [[str(q), float(p), int(k)] for q, p, k in top[["queue", "p99_ms", "processed"]].values]


def page(
    frames: dict[str, pd.DataFrame],
    figures: dict[str, Any],
    drawings: dict[str, str],
    source: str,
    last: dict[str, Any] | None = None,
) -> str:
    """The report as one HTML page (charts by relative link); ``last``:
    last night's figures, for what changed since."""
    tiles = [
        ("messages", f"{figures['messages']:,}"),
        ("queues", f"{figures['queues']:,}"),
        ("processed", f"{figures['processed']:,}"),
        ("moved", f"{figures['moved']:,}"),
        ("dead-lettered", f"{figures['dead_lettered']:,}"),
        ("expired", f"{figures['expired']:,}"),
        ("dropped", f"{figures['dropped']:,}"),
        ("redelivered", f"{figures['redelivered']:,}"),
        ("in dead-letter queues", f"{figures['dead_letters']:,}"),
    ]
    if figures.get("unbalanced"):
        tiles.append(("queues whose books do not add up", f"{figures['unbalanced']:,}"))
    head = "".join(f"<div class=tile><b>{v}</b><span>{k}</span></div>" for k, v in tiles)
    parts = []
    for name, title, note in SECTIONS:
        img = f'<img src="{drawings[name]}" alt="{title}">' if name in drawings else ""
        parts.append(
            f"<section><h2>{title}</h2><p>{note} <a href='{name}.csv'>{name}.csv</a></p>"
            f"{img}{_table(frames[name], none=NONE.get(name, 'No rows.'))}</section>"
        )
    made = _made_line(figures)
    span = "no messages"
    if figures["first"] is not None:
        span = f"{figures['first']:%Y-%m-%d %H:%M} to {figures['last']:%Y-%m-%d %H:%M} UTC"
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>msgboard history</title>
<style>
body{{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;
  padding:0 1em}}
h1{{margin-bottom:0}} .sub{{color:#666;margin-top:.2em}}
.tiles{{display:flex;gap:1em;flex-wrap:wrap;margin:1.5em 0}}
.tile{{background:#f3f5f8;border-radius:8px;padding:.8em 1.2em;min-width:8em}}
.tile b{{display:block;font-size:1.7em}} .tile span{{color:#555}}
img{{max-width:100%;border:1px solid #eee;border-radius:6px}}
table{{border-collapse:collapse;margin:.8em 0;font-size:13px}}
td,th{{border-bottom:1px solid #e3e3e3;padding:.25em .8em;text-align:right}}
th{{background:#fafafa}} td:first-child,th:first-child{{text-align:left}}
.more{{color:#777;font-size:13px}} section{{margin:2.5em 0}}
.none{{color:#555;font-style:italic}} .wide{{overflow-x:auto;max-width:100%}}
</style></head><body>
<h1>msgboard history</h1>
<p class=sub>{html.escape(source)} &middot; {span}</p>
<p class=sub id=made>{html.escape(made)}</p>
<div class=tiles>{head}</div>
{since(figures, last)}
{"".join(parts)}
</body></html>
"""
