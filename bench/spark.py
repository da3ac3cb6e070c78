"""Spark benchmark: snapshot, full scan through the data source and Parquet
export of a board of 10^6 messages, beside the physical floor.

Builds a board through the engine in this process (batched posts, half of
each queue taken into history; not measured), then measures, in one run on
the same snapshot:

- snapshot: ``Board.snapshot`` (LMDB's compacting copy plus the manifest);
- floor: a bare py-lmdb cursor walk over every record, in one process;
- parse: the same walk with each record checked (CRC32C) and parsed
  (protobuf), in one process: the scan + decode floor the targets are
  measured against (issue 16: scan >= 0.5x, export >= 0.25x);
- decode: ``snapshot.read`` into Arrow batches over the whole plan, in one
  process (the data source's per-row work, without Spark);
- scan: ``spark.read.format("msgboard").load(SNAP)`` written to Spark's
  ``noop`` sink, which materialises every row;
- export: ``msgboard export`` to Parquet (a new dataset, every row);
- report: ``msgboard report`` of that dataset, and the JVM's peak resident
  memory (VmHWM) after it.

    scripts/bench-spark [--messages 1000000] [--rounds 3] [--master local[*]]
    scripts/bench-spark --report-rows 30000000   # the report's scale run alone
    scripts/bench-spark --steps 100000           # the decode's cost per step

Each figure is the median of ``--rounds`` (min and max beside it); a JSON
file goes to bench/results/spark-<time>.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nights
from table import summarize

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.lmdbstore import record
from msgboard.spec import UNLIMITED
from msgboard.v1 import board_pb2 as pb
from pyspark_msgboard import export, report, snapshot
from pyspark_msgboard.session import session

QUEUES = ("orders", "events", "jobs", "audit")


def messages(q: str, start: int, stop: int) -> list[Message]:
    """Messages ``start`` to ``stop`` of queue ``q``, the benchmark's shape."""
    return [
        Message(
            tuple=(q, i, i * 0.5, f"item-{i % 1000}"),
            address=f"{q}.{('eu', 'us', 'asia')[i % 3]}.{i % 7}",
            priority=i % 5,
            headers={"tenant": f"t{i % 13}"},
            content_type="application/json",
            body=b'{"n": %d}' % i,
        )
        for i in range(start, stop)
    ]


def post(b: Board, q: str, start: int, stop: int) -> None:
    """Posts messages ``start`` to ``stop`` of ``q`` in batches of 10,000."""
    futs = [
        b.post_async(q, messages(q, i, min(stop, i + 10_000))) for i in range(start, stop, 10_000)
    ]
    for f in futs:
        f.result()


def take(b: Board, q: str, count: int) -> None:
    """Takes the ``count`` oldest waiting messages of ``q``."""
    taken = 0
    while taken < count:
        taken += len(b.take(q, max=min(10_000, count - taken)))


def build(path: Path, n: int) -> None:
    """A board of ``n`` messages over four queues, half of each taken."""
    with Board(path, sync=False) as b:
        per = n // len(QUEUES)
        for q in QUEUES:
            b.create_queue(QueueSpec(q, max_history=UNLIMITED))
            post(b, q, 0, per)
            take(b, q, per // 2)
        print(f"built {n:,} messages in {path}", file=sys.stderr)


def day(b: Board, n: int, share: float = 0.1) -> None:
    """A day that changes ``share`` of the board of ``build(path, n)``:
    n*share/2 new messages posted and as many of the waiting ones taken,
    in order."""
    per = n // len(QUEUES)
    k = int(per * share / 2)
    for q in QUEUES:
        post(b, q, per, per + k)
        take(b, q, k)


def parse(snap: str) -> int:
    """Every record walked, checked and parsed in one process; the count."""
    n = 0
    unseal, decode = record.unseal, pb.Message.FromString
    with snapshot.opened(snap) as (env, dbs), env.begin() as txn:
        for section in snapshot.SECTIONS:
            for key, raw in txn.cursor(db=dbs[section]):
                decode(unseal(key, raw))
                n += 1
    return n


def peak(spark: object) -> float:
    """The driver JVM's peak resident memory so far, MiB (Linux)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def synthesize(out: Path, n: int, chunk: int = 1_000_000) -> None:
    """A dataset of ``n`` rows in ``msgboard export``'s layout, written with
    numpy and pyarrow in 10^6-row files (no board: a board of 3x10^7 takes
    longer to build than the report to run): the benchmark's message shape,
    80% processed, 1% redelivered, "orders.dlq" the dead-letter queue of
    "orders" with its dead letters traced by the board's headers."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    arrow = snapshot.ARROW
    stamp = arrow.field("posted_at").type
    rng = np.random.default_rng(1)
    queues = ["orders", "events", "jobs", "orders.dlq"]
    for c in range(0, n, chunk):
        m = min(chunk, n - c)
        q = queues[c // chunk % len(queues)]
        seq = np.arange(c + 1, c + m + 1, dtype=np.int64)
        posted = 1_795_000_000_000_000 + seq * 8_000
        done = rng.random(m) < 0.8
        processed = pa.array(posted + rng.exponential(50_000, m).astype(np.int64), stamp)
        dead = q == "orders.dlq"
        keys = pa.array(["x-dead-letter-queue" if dead else "tenant"] * m)
        values = pa.array(["orders" if dead else f"t{i % 13}" for i in range(m)])
        offsets = pa.array(np.arange(m + 1, dtype=np.int32))
        kinds = pa.array(np.tile(np.array(["string", "int", "float"]), m))
        ints = np.where(np.tile([False, True, False], m), np.repeat(seq, 3), 0)
        strings = np.tile(np.array(["item", None, None], dtype=object), m)
        value_type = arrow.field("tuple").type.value_type
        fields = pa.StructArray.from_arrays(
            [
                kinds,
                pa.nulls(3 * m, pa.bool_()),
                pa.array(ints, pa.int64()),
                pa.array(np.repeat(seq * 0.5, 3)),
                pa.array(strings, pa.string()),
                pa.nulls(3 * m, pa.binary()),
            ],
            fields=list(value_type),
        )
        table = pa.table(
            {
                "seq": pa.array(seq),
                "address": pa.array([f"{q}.{('eu', 'us', 'asia')[i % 3]}" for i in range(m)]),
                "priority": pa.array(seq % 5),
                "headers": pa.MapArray.from_arrays(
                    offsets, keys, values, type=arrow.field("headers").type
                ),
                "reply_to": pa.array([""] * m),
                "expires_at": pa.nulls(m, stamp),
                "tuple": pa.ListArray.from_arrays(
                    pa.array(np.arange(0, 3 * m + 1, 3, dtype=np.int32)),
                    fields,
                    type=arrow.field("tuple").type,
                ),
                "content_type": pa.array(["application/json"] * m),
                "body": pa.array([b'{"n": %d}' % i for i in range(m)], pa.binary()),
                "posted_at": pa.array(posted, stamp),
                "processed_at": pc.if_else(pa.array(done), processed, pa.scalar(None, stamp)),
                "delivery_count": pa.array(
                    done.astype(np.int32) + (rng.random(m) < 0.01).astype(np.int32)
                ),
            }
        )
        where = out / f"queue={q}" / "section=history" / "day=2026-11-18"
        where.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, where / f"part-{c // chunk:05d}.parquet")
    books = {
        "format": "msgboard-dataset",
        "snapshot": {},
        "runs": [],
        "queues": {
            q: {"id": i, "next_seq": n + 1, "spec": {"dead_letter": "orders.dlq" * (q == "orders")}}
            for i, q in enumerate(queues)
        },
    }
    (out / "_msgboard.json").write_text(json.dumps(books))


def report_scale(n: int, master: str) -> None:
    """``msgboard report`` of a synthetic dataset of ``n`` rows with Spark's
    default settings: wall time and the JVM's peak resident memory."""
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-report-") as tmp:
        root = Path(tmp)
        synthesize(root / "dataset", n)
        size = sum(f.stat().st_size for f in (root / "dataset").rglob("*.parquet"))
        spark = session(master)
        try:
            wall = timed(lambda: report.report(str(root / "dataset"), str(root / "www")))
            jvm = peak(spark)
        finally:
            spark.stop()
    print(
        f"report of {n:,} rows ({size / 2**20:,.0f} MiB of Parquet), {master}, default "
        f"settings: {wall:.1f} s, JVM peak resident memory {jvm:,.0f} MiB"
    )


def steps(n: int) -> None:
    """The data source's decode (``columns.batch``, then ``compiled.batch``) step by step, in µs per
    record, on a board of ``n`` messages of the benchmark's shape: the best
    of 5 of each step over the whole snapshot, in batches of 8192."""
    from operator import attrgetter

    import numpy as np
    import pyarrow as pa

    from pyspark_msgboard import columns as c
    from pyspark_msgboard import compiled

    with tempfile.TemporaryDirectory(prefix="msgboard-bench-steps-") as tmp:
        root = Path(tmp)
        build(root / "board", n)
        with Board(root / "board", sync=False) as b:
            b.snapshot(root / "snap")
        snap = str(root / "snap")
        with snapshot.opened(snap) as (env, dbs), env.begin() as txn:
            items = [(k, v) for s in snapshot.SECTIONS for k, v in txn.cursor(db=dbs[s])]
        figures: list[tuple[str, Callable[[], object]]] = [
            ("LMDB cursor walk", lambda: snapshot.raw_scan(snap))
        ]
        payloads = [record.unseal(k, v) for k, v in items]
        chunks = [
            ([k for k, _ in items[i : i + 8192]], payloads[i : i + 8192])
            for i in range(0, len(items), 8192)
        ]
        framed = [b"".join([c._frame(len(p)) + p for p in ps]) for _, ps in chunks]
        batches = [list(c._Batch.FromString(b).rows) for b in framed]
        scalars = [
            attrgetter(f)
            for f in ("address", "priority", "reply_to", "content_type", "body", "delivery_count")
        ]
        figures += [
            ("check (CRC32C)", lambda: [record.unseal(k, v) for k, v in items]),
            (
                "frame a batch",
                lambda: [b"".join([c._frame(len(p)) + p for p in ps]) for _, ps in chunks],
            ),
            ("parse a batch (one call)", lambda: [c._Batch.FromString(b) for b in framed]),
            ("  and list its rows", lambda: [list(c._Batch.FromString(b).rows) for b in framed]),
            (
                "seq, from the keys",
                lambda: [np.frombuffer(b"".join(k), c.KEYS) for k, _ in chunks],
            ),
            (
                "6 scalar columns",
                lambda: [[list(map(f, rows)) for f in scalars] for rows in batches],
            ),
            ("posted_at", lambda: [c._micros([m.posted_at for m in rows]) for rows in batches]),
            (
                "expires_at, processed_at",
                lambda: [
                    [c._optional_time(rows, f) for f in ("expires_at", "processed_at")]
                    for rows in batches
                ],
            ),
            ("headers", lambda: [c._headers(rows) for rows in batches]),
            ("tuple", lambda: [c._tuples(rows) for rows in batches]),
            (
                "the whole batch (columns.batch)",
                lambda: [c.batch(k, p, "q", "history") for k, p in chunks],
            ),
            ("payloads to one Arrow array", lambda: [pa.array(p, pa.binary()) for _, p in chunks]),
            (
                "the whole batch (compiled.batch)",
                lambda: [compiled.batch(k, p, "q", "history") for k, p in chunks],
            ),
        ]
        for label, fn in figures:
            best = min(timed(fn) for _ in range(5))
            print(f"{label:36s} {best / len(items) * 1e6:6.2f} µs per record")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument(
        "--report-rows",
        type=int,
        default=0,
        metavar="N",
        help="instead: time msgboard report over a synthetic dataset of N rows",
    )
    p.add_argument(
        "--ways",
        default="after",
        help="comma-separated, measured in turn every round: before (upb decoder, "
        "Spark's writer), after (ptars, the tasks' writer); e.g. before,after",
    )
    p.add_argument(
        "--nights",
        type=int,
        default=0,
        metavar="N",
        help="instead: night 1 (and its export by Spark), a day of 1%% changes, "
        "night 2 and an idle night, each exported and reported, on a board of N "
        "messages (bench/nights.py)",
    )
    p.add_argument(
        "--no-spark-night",
        action="store_true",
        help="with --nights: skip night 1's export again by Spark (--local-rows 0)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=0,
        metavar="N",
        help="instead: the decode's cost per step on a board of N messages",
    )
    args = p.parse_args()
    if args.steps:
        steps(args.steps)
        return
    if args.report_rows:
        report_scale(args.report_rows, args.master)
        return
    if args.nights:
        nights.main(
            args.nights, args.master, args.out, build, day, parse, by_spark=not args.no_spark_night
        )
        return
    n = args.messages
    ways = args.ways.split(",")
    unknown = set(ways) - set(WAYS)
    if unknown:
        p.error(f"--ways: unknown {', '.join(sorted(unknown))}; known: {', '.join(WAYS)}")

    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-spark-") as tmp:
        root = Path(tmp)
        build(root / "board", n)
        spark = session(args.master, conf={"spark.ui.enabled": "false"})
        try:
            for r in range(args.rounds):
                fig: dict[str, float] = {}
                snap = root / f"snap{r}"
                with Board(root / "board", sync=False) as b:
                    fig["snapshot_s"] = timed(lambda: b.snapshot(snap))  # noqa: B023
                size = (snap / "data.mdb").stat().st_size
                fig["snapshot_mib"] = size / 2**20
                fig["floor_rows_per_s"] = n / timed(lambda: snapshot.raw_scan(str(snap)))  # noqa: B023
                fig["parse_rows_per_s"] = n / timed(lambda: parse(str(snap)))  # noqa: B023
                # Each way in turn on the same snapshot, the order turned
                # round every round, so that both see the same load.
                for way in ways if r % 2 == 0 else ways[::-1]:
                    fig.update(one_way(spark, snap, root, n, way, report_too=way == ways[-1]))
                shutil.rmtree(snap)
                rounds.append(fig)
                print(f"round {r + 1}/{args.rounds}: {fig}", file=sys.stderr)
        finally:
            spark.stop()

    labels = [
        ("snapshot_s", "snapshot (compacting hot copy)", "s"),
        ("snapshot_mib", "  snapshot size", "MiB"),
        ("floor_rows_per_s", "floor: raw LMDB cursor scan, 1 process", "rows/s"),
        ("parse_rows_per_s", "floor: scan + check + parse, 1 process", "rows/s"),
    ]
    for way in ways:
        labels += [
            (f"decode_rows_per_s:{way}", f"[{way}] decode to Arrow batches, 1 process", "rows/s"),
            (f"scan_rows_per_s:{way}", f"[{way}] Spark full scan via the data source", "rows/s"),
            (f"export_s:{way}", f"[{way}] export to Parquet (msgboard export)", "s"),
            (f"parquet_mib:{way}", f"[{way}]   Parquet size", "MiB"),
        ]
    labels += [
        ("report_s", "report (msgboard report)", "s"),
        ("jvm_peak_mib", "  JVM peak resident memory", "MiB"),
    ]
    print(
        f"\nmsgboard Spark, {n:,} messages ({len(QUEUES)} queues, half in history), "
        f"{args.master}, median of {args.rounds} on {platform.node()} "
        f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}, "
        f"load average {os.getloadavg()[0]:.1f} at the end\n"
    )
    rows = summarize(rounds, labels)
    floor = rows["floor_rows_per_s"]["median"]
    for way in ways:
        print(f"\n[{way}] ({WAYS[way]})")
        print_ratios(rounds, way, n, floor)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"spark-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "rows": rows, "rounds": rounds}, indent=2))
    print(f"results: {path}")


#: The ways the data source and the export can run, by ``--ways``.
WAYS = {
    "before": "decoder=protobuf (upb + numpy), export through Spark's Parquet writer",
    "after": "decoder=compiled (ptars), export written by the tasks (pyarrow)",
}
_OPTIONS = {
    "before": {"decoder": "protobuf", "writer": "spark"},
    "after": {"decoder": "compiled", "writer": "tasks"},
}


def one_way(
    spark: Any, snap: Path, root: Path, n: int, way: str, report_too: bool
) -> dict[str, float]:
    """The decode, the scan and the export of ``snap`` one way; the report
    of that export too, if ``report_too``."""
    opts = _OPTIONS[way]
    fig: dict[str, float] = {}

    def decode() -> None:
        for ranges in snapshot.plan(str(snap)):
            collections.deque(snapshot.read(str(snap), ranges, 8192, opts["decoder"]), maxlen=0)

    fig[f"decode_rows_per_s:{way}"] = n / timed(decode)
    df = spark.read.format("msgboard").option("decoder", opts["decoder"]).load(str(snap))  # type: ignore[attr-defined]
    fig[f"scan_rows_per_s:{way}"] = n / timed(
        lambda: df.write.format("noop").mode("overwrite").save()
    )
    out = root / f"parquet-{way}"
    fig[f"export_s:{way}"] = timed(
        lambda: export.export(spark, str(snap), str(out), options=dict(opts))
    )
    fig[f"parquet_mib:{way}"] = sum(f.stat().st_size for f in out.rglob("*.parquet")) / 2**20
    if report_too:
        www = root / "report"
        fig["report_s"] = timed(lambda: report.report(str(out), str(www)))
        fig["jvm_peak_mib"] = peak(spark)
        shutil.rmtree(www)
    shutil.rmtree(out)
    return fig


def print_ratios(rounds: list[dict[str, float]], way: str, n: int, floor: float) -> None:
    """The ratios to the floors, median over the rounds, each round's beside."""
    import statistics

    def ratio(per_round: Callable[[dict[str, float]], float]) -> str:
        each = [per_round(r) for r in rounds]
        return f"{statistics.median(each):.3f}  ({', '.join(f'{x:.3f}' for x in each)})"

    parsed = "parse_rows_per_s"
    print(
        "Spark scan / raw cursor floor:      "
        + ratio(lambda r: r[f"scan_rows_per_s:{way}"] / floor)
    )
    print(
        "Spark scan / scan + decode floor:   "
        + ratio(lambda r: r[f"scan_rows_per_s:{way}"] / r[parsed])
    )
    print(
        "Arrow decode / scan + decode floor: "
        + ratio(lambda r: r[f"decode_rows_per_s:{way}"] / r[parsed])
    )
    print(
        "export wall / scan + decode floor:  "
        + ratio(lambda r: n / r[f"export_s:{way}"] / r[parsed])
    )
    rates = sorted(n / r[f"export_s:{way}"] for r in rounds)
    print(f"export rows/s: {rates[len(rates) // 2]:,.0f}")


if __name__ == "__main__":
    main()
