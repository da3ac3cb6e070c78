"""The history report: Parquet export -> tables, PNG charts, one HTML page.

::

    msgboard report /shared/history/2026-11-21 /srv/www/msgboard/2026-11-21

Computed with Spark over the export (``export.load``); each table is written
as Parquet (``OUT/parquet/NAME``) and CSV (``OUT/NAME.csv``):

- ``traffic_queue``: per queue and hour (UTC), messages posted and processed.
- ``traffic_address``: the same per address.
- ``latency``: per queue, post-to-processed time of the processed messages in
  milliseconds: count, mean, exact p50/p95/p99 (linear interpolation), max.
- ``deliveries``: per queue, messages, redelivered (delivery count above 1),
  the highest delivery count, the dead letters it holds (messages with the
  ``x-dead-letter-reason`` header the board sets), and whether it is a
  dead-letter queue: one holding such messages, or whose name matches
  ``--dead-letter`` globs (default ``*dead*letter*``, ``*dlq*``); its
  messages count as dead letters.
- ``shapes``: the most common tuple shapes, e.g. ``(string, int, float)``.

``OUT/index.html`` shows the headline figures, one chart per table and the
top rows, with links to the CSVs.
"""

from __future__ import annotations

import fnmatch
import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark_msgboard.export import load

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

DEAD_LETTER = ("*dead*letter*", "*dlq*")
TOP_SHAPES = 20


def _traffic(df: DataFrame, key: str) -> DataFrame:
    from pyspark.sql import functions as F

    posted = df.select(
        key, F.date_trunc("hour", "posted_at").alias("hour"), F.lit(1).alias("p"), F.lit(0)
    )
    processed = df.where(F.col("processed_at").isNotNull()).select(
        key, F.date_trunc("hour", "processed_at").alias("hour"), F.lit(0), F.lit(1)
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


def tables(df: DataFrame, dead_letter: tuple[str, ...] = DEAD_LETTER) -> dict[str, DataFrame]:
    """The report's tables, as Spark DataFrames over the messages ``df``."""
    from pyspark.sql import functions as F

    latency_ms = (F.unix_micros("processed_at") - F.unix_micros("posted_at")) / 1000.0
    processed = df.where(F.col("processed_at").isNotNull()).withColumn("ms", latency_ms)
    p = F.percentile("ms", [0.5, 0.95, 0.99])
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
    queues = [r["queue"] for r in df.select("queue").distinct().collect()]
    dlqs = [q for q in queues if any(fnmatch.fnmatchcase(q, g) for g in dead_letter)]
    deliveries = (
        df.groupBy("queue")
        .agg(
            F.count("*").alias("messages"),
            F.sum((F.col("section") == "unprocessed").cast("long")).alias("unprocessed"),
            F.sum((F.col("delivery_count") > 1).cast("long")).alias("redelivered"),
            F.max("delivery_count").alias("max_deliveries"),
            F.sum(F.col("headers")["x-dead-letter-reason"].isNotNull().cast("long")).alias(
                "dead_lettered"
            ),
        )
        .withColumn("dead_letter_queue", F.col("queue").isin(dlqs) | (F.col("dead_lettered") > 0))
        .orderBy("queue")
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
        "shapes": shapes,
    }


@dataclass(frozen=True)
class Report:
    """What ``report`` wrote, and the tables' contents (small: aggregates)."""

    out: str
    frames: dict[str, pd.DataFrame]
    figures: dict[str, Any]


def report(
    spark: SparkSession,
    parquet: str,
    out: str,
    *,
    dead_letter: tuple[str, ...] = DEAD_LETTER,
) -> Report:
    """Computes the tables over the export at ``parquet`` and writes them,
    the charts and ``index.html`` to the directory ``out``."""
    from pyspark.sql import functions as F

    from pyspark_msgboard import charts

    df = load(spark, parquet).drop("day").cache()
    try:
        os.makedirs(out, exist_ok=True)
        frames: dict[str, pd.DataFrame] = {}
        for name, t in tables(df, dead_letter).items():
            t.write.mode("overwrite").parquet(os.path.join(out, "parquet", name))
            frames[name] = t.toPandas()
            frames[name].to_csv(os.path.join(out, f"{name}.csv"), index=False)
        span = df.agg(
            F.count("*").alias("messages"),
            F.countDistinct("queue").alias("queues"),
            F.min("posted_at").alias("first"),
            F.max("posted_at").alias("last"),
        ).collect()[0]
    finally:
        df.unpersist()
    d = frames["deliveries"]
    figures = {
        "messages": int(span["messages"]),
        "queues": int(span["queues"]),
        "first": span["first"],
        "last": span["last"],
        "processed": int(frames["latency"]["processed"].sum()),
        "redelivered": int(d["redelivered"].sum()),
        "dead_letters": int(d.loc[d["dead_letter_queue"], "messages"].sum()),
    }
    pngs = charts.draw(frames, out)
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(page(frames, figures, pngs, parquet))
    return Report(out, frames, figures)


def _table(frame: pd.DataFrame, rows: int = 12) -> str:
    head = frame.head(rows)
    cells = "".join(f"<th>{html.escape(str(c))}</th>" for c in head.columns)
    body = []
    for _, r in head.iterrows():
        tds = "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r)
        body.append(f"<tr>{tds}</tr>")
    more = (
        f"<p class=more>{len(frame) - rows} more rows in the CSV</p>" if len(frame) > rows else ""
    )
    return f"<table><tr>{cells}</tr>{''.join(body)}</table>{more}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


SECTIONS = [
    ("traffic_queue", "Traffic per queue", "Messages posted per hour (UTC), per queue."),
    ("latency", "Post-to-processed latency", "Percentiles per queue, milliseconds."),
    ("deliveries", "Redeliveries and dead letters", "Per queue."),
    ("traffic_address", "Traffic per address", "Messages posted per hour, busiest addresses."),
    ("shapes", "Tuple shapes", "The most common field types in order."),
]


def page(
    frames: dict[str, pd.DataFrame], figures: dict[str, Any], pngs: dict[str, str], source: str
) -> str:
    """The report as one HTML page (charts by relative link)."""
    tiles = [
        ("messages", f"{figures['messages']:,}"),
        ("queues", f"{figures['queues']:,}"),
        ("processed", f"{figures['processed']:,}"),
        ("redelivered", f"{figures['redelivered']:,}"),
        ("dead letters", f"{figures['dead_letters']:,}"),
    ]
    head = "".join(f"<div class=tile><b>{v}</b><span>{k}</span></div>" for k, v in tiles)
    parts = []
    for name, title, note in SECTIONS:
        img = f'<img src="{pngs[name]}" alt="{title}">' if name in pngs else ""
        parts.append(
            f"<section><h2>{title}</h2><p>{note} <a href='{name}.csv'>{name}.csv</a></p>"
            f"{img}{_table(frames[name])}</section>"
        )
    span = f"{figures['first']:%Y-%m-%d %H:%M} to {figures['last']:%Y-%m-%d %H:%M} UTC"
    if figures["first"] is None:
        span = "no messages"
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
</style></head><body>
<h1>msgboard history</h1>
<p class=sub>{html.escape(source)} &middot; {span}</p>
<div class=tiles>{head}</div>
{"".join(parts)}
</body></html>
"""
