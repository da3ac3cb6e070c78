"""The Spark side, on a real local SparkSession (one per test session) over
a snapshot of a board built here through the engine: the data source
returns what the engine holds, its partitions cover every key once, the
export round-trips and the report's figures match counts made directly."""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from msgboard import Message, QueueSpec
from msgboard.cli import main
from msgboard.engine import Board
from msgboard.engine.board import Start
from msgboard.errors import FailedPrecondition
from msgboard.spec import UNLIMITED

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pyspark_msgboard import export, report, session, snapshot  # noqa: E402

Row = tuple[Any, ...]


@pytest.fixture(scope="session")
def spark() -> Any:
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    s = session.session("local[2]", conf=conf)
    yield s
    s.stop()


@dataclass
class Built:
    snap: str
    messages: list[Message]
    root: Path


def _post(b: Board, queue: str, msgs: list[Message]) -> None:
    for i in range(0, len(msgs), 1000):
        b.post(queue, msgs[i : i + 1000])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A small board with every envelope field, both sections, redeliveries,
    a dead-letter queue, a sparse queue and a queue name awkward in a path."""
    root = tmp_path_factory.mktemp("spark")
    with Board(root / "board", sync=False) as b:
        for name in ("jobs", "events.dlq", "sparse", "a:b-c.d", "empty"):
            b.create_queue(QueueSpec(name, max_history=UNLIMITED))
        kinds: list[tuple[Any, ...]] = [
            ("resize", 7, 2.5),
            ("crop", -3, None, True, b"\x00\xff"),
            (),
            ("resize", 8, 1.0),
        ]
        _post(
            b,
            "jobs",
            [
                Message(
                    tuple=kinds[i % 4],
                    address=f"img.{('resize', 'crop', 'misc')[i % 3]}",
                    priority=i % 5,
                    headers={"owner": f"u{i % 3}", "n": str(i)} if i % 2 else {},
                    reply_to="replies" if i % 7 == 0 else "",
                    expires_at=4_000_000_000_000_000 if i % 11 == 0 else 0,
                    content_type="text/plain" if i % 2 else "",
                    body=f"body {i}".encode(),
                )
                for i in range(300)
            ],
        )
        b.take("jobs", max=100)
        fut = b.take_async("jobs", max=5)
        fut.result()
        b.abandon("jobs", fut)  # back to the queue: taken again below, twice delivered
        b.take("jobs", max=20)
        _post(b, "events.dlq", [Message(tuple=("dead", i)) for i in range(40)])
        # Real dead letters: expired on arrival, sent on with the board's headers.
        b.create_queue(QueueSpec("graveyard", max_history=UNLIMITED))
        b.create_queue(QueueSpec("orders", dead_letter="graveyard"))
        _post(b, "orders", [Message(tuple=("late", i), expires_at=1) for i in range(3)])
        # sparse: 100 waiting, 1,000 taken, 100 waiting: the unprocessed seqs
        # are far apart, the history ones dense.
        for word, n in (("keep", 100), ("go", 1000), ("keep", 100)):
            _post(b, "sparse", [Message(tuple=(word, i), address=word) for i in range(n)])
        from msgboard.associative import Pattern, template

        b.take("sparse", Pattern(templates=(template("go", int),)), max=1000)
        _post(b, "a:b-c.d", [Message(tuple=(1.5,), body=b"\x01") for _ in range(3)])
        messages = []
        for q in b.list_queues():
            seq = 0
            while True:
                page = b.browse(q.spec.name, Start.SEQ, seq=seq, limit=10_000)
                messages += page.messages
                if not page.next_seq:
                    break
                seq = page.next_seq
        b.snapshot(root / "snap")
    return Built(str(root / "snap"), messages, root)


def _us(t: datetime | None) -> int | None:
    return None if t is None else round(t.timestamp() * 1e6)


def _value(v: Any) -> Any:
    return (
        None if v["type"] == "null" else bytes(v["bytes"]) if v["type"] == "bytes" else v[v["type"]]
    )


def spark_row(r: Any) -> Row:
    return (
        r["queue"],
        r["seq"],
        r["section"],
        r["address"],
        r["priority"],
        dict(r["headers"]),
        r["reply_to"],
        _us(r["expires_at"]),
        tuple(_value(v) for v in r["tuple"]),
        [type(_value(v)).__name__ for v in r["tuple"]],
        r["content_type"],
        bytes(r["body"]),
        _us(r["posted_at"]),
        _us(r["processed_at"]),
        r["delivery_count"],
    )


def engine_row(m: Message) -> Row:
    return (
        m.queue,
        m.seq,
        m.section.value,
        m.address,
        m.priority,
        dict(m.headers),
        m.reply_to,
        m.expires_at or None,
        m.tuple,
        [type(v).__name__ for v in m.tuple],
        m.content_type,
        m.body,
        m.posted_at,
        m.processed_at or None,
        m.delivery_count,
    )


def test_the_dataframe_is_what_the_engine_holds(spark: SparkSession, built: Built) -> None:
    """Given a snapshot of the board, when I load it with format("msgboard"),
    I expect the engine's messages, row for row, every field and type."""
    df = spark.read.format("msgboard").load(built.snap)
    assert df.schema == snapshot.SCHEMA
    got = sorted((spark_row(r) for r in df.collect()), key=lambda r: (r[0], r[1]))
    want = sorted((engine_row(m) for m in built.messages), key=lambda r: (r[0], r[1]))
    assert len(got) == len(want) == 300 + 40 + 3 + 1200 + 3
    assert got == want
    twice = [r for r in got if r[14] == 2]
    assert len(twice) == 5 and {r[2] for r in twice} == {"history"}


def test_partitions_cover_every_key_once_balanced(spark: SparkSession, built: Built) -> None:
    """Given a target of 150 rows, I expect key ranges that read every
    message exactly once, none holding more than twice the target, whether
    cut by width (dense seqs) or by walking keys (sparse ones); and Spark to
    read them as that many partitions."""
    plan = snapshot.plan(built.snap, rows_per_part=150)
    seen: list[tuple[str, str, int]] = []
    for ranges in plan:
        rows = 0
        for batch in snapshot.read(built.snap, ranges, batch_rows=64):
            assert batch.num_rows <= 64
            d = batch.to_pydict()
            seen += zip(d["queue"], d["section"], d["seq"], strict=True)
            rows += batch.num_rows
        assert rows <= 300
    keys = [(m.queue, m.section.value, m.seq) for m in built.messages]
    assert len(seen) == len(set(seen)) and sorted(seen) == sorted(keys)
    sparse = [r for p in plan for r in p if r.queue == "sparse" and r.section == "unprocessed"]
    assert [r.lo for r in sparse] == [0, 1101]  # the 101st waiting message
    df = spark.read.format("msgboard").option("rowsPerPartition", "150").load(built.snap)
    ids = df.select(F.spark_partition_id().alias("p"), "queue", "section", "seq").collect()
    assert len({r["p"] for r in ids}) == len(plan) > 10
    assert sorted((r["queue"], r["section"], r["seq"]) for r in ids) == sorted(keys)
    assert spark.read.format("msgboard").option("numPartitions", "3").load(built.snap).count()


def test_export_round_trips_through_parquet(spark: SparkSession, built: Built) -> None:
    """Given the snapshot, when I export it, I expect Parquet partitioned by
    queue and UTC day, with standard UTC timestamps, that reads back as the
    same rows."""
    out = str(built.root / "parquet")
    assert export.export(spark, built.snap, out) == len(built.messages)
    back = export.load(spark, out)
    rows = back.collect()
    assert sorted(spark_row(r) for r in rows) == sorted(engine_row(m) for m in built.messages)
    for r in rows:
        assert r["day"] == datetime.fromtimestamp(r["posted_at"].timestamp(), UTC).date()
    dirs = sorted(p.name for p in Path(out).iterdir() if p.is_dir())
    assert "queue=jobs" in dirs and "queue=empty" not in dirs
    [f, *_] = Path(out, "queue=jobs").glob("day=*/*.parquet")
    schema = pq.read_schema(f)
    assert str(schema.field("posted_at").type) == "timestamp[us, tz=UTC]"
    assert "queue" not in schema.names
    with pytest.raises(Exception, match="already exists"):
        export.export(spark, built.snap, out)


def _hour(us: int) -> datetime:
    return datetime.fromtimestamp(us // 3_600_000_000 * 3600, UTC).replace(tzinfo=None)


def test_the_report_matches_counts_made_directly(spark: SparkSession, built: Built) -> None:
    """Given the export, when I make the report, I expect its traffic,
    latency percentiles, redelivery and dead-letter counts and tuple shapes
    to equal those computed from the engine's messages, and a page with a
    chart per table."""
    parquet = built.root / "parquet-report"
    export.export(spark, built.snap, str(parquet))
    r = report.report(spark, str(parquet), str(built.root / "report"))
    ms = built.messages

    posted = collections.Counter((m.queue, _hour(m.posted_at)) for m in ms)
    done = collections.Counter((m.queue, _hour(m.processed_at)) for m in ms if m.processed_at)
    t = r.frames["traffic_queue"]
    got = {(q, h.to_pydatetime()): (p, d) for q, h, p, d in t.itertuples(index=False)}
    assert got == {k: (posted[k], done[k]) for k in posted | done}

    by_address = collections.Counter(m.address for m in ms)
    a = r.frames["traffic_address"].groupby("address")["posted"].sum().to_dict()
    assert a == dict(by_address)

    lat = r.frames["latency"].set_index("queue")
    for q in {m.queue for m in ms if m.processed_at}:
        xs = [(m.processed_at - m.posted_at) / 1000 for m in ms if m.queue == q and m.processed_at]
        row = lat.loc[q]
        assert row["processed"] == len(xs)
        want = np.percentile(xs, [50, 95, 99])
        assert list(row[["p50_ms", "p95_ms", "p99_ms"]]) == pytest.approx(list(want))
        assert row["mean_ms"] == pytest.approx(statistics.fmean(xs))

    d = r.frames["deliveries"].set_index("queue")
    assert d.loc["jobs", "redelivered"] == 5 and d.loc["jobs", "max_deliveries"] == 2
    assert d.loc["sparse", "unprocessed"] == 200 and d.loc["sparse", "redelivered"] == 0
    assert list(d.index[d["dead_letter_queue"]]) == ["events.dlq", "graveyard"]
    assert d.loc["graveyard", "dead_lettered"] == 3 and d.loc["events.dlq", "dead_lettered"] == 0
    assert r.figures["dead_letters"] == 43 and r.figures["redelivered"] == 5
    assert r.figures["messages"] == len(ms)

    def shape(m: Message) -> str:
        names = {bool: "bool", int: "int", float: "float", str: "string", bytes: "bytes"}
        return "(" + ", ".join(names.get(type(v), "null") for v in m.tuple) + ")"

    shapes = collections.Counter(shape(m) for m in ms)
    s = r.frames["shapes"]
    assert dict(zip(s["shape"], s["messages"], strict=True)) == dict(shapes)
    assert s["shape"].iloc[0] == "(string, int)"

    out = built.root / "report"
    page = (out / "index.html").read_text()
    assert len(r.frames) == 5
    for name in r.frames:
        assert (out / f"{name}.csv").exists() and (out / "parquet" / name).is_dir()
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f'src="{name}.png"' in page


def test_export_and_report_from_the_command_line(
    spark: SparkSession, built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands share the running session (and leave it running)."""
    out = built.root / "cli-parquet"
    assert main(["export", built.snap, str(out)]) == 0
    assert f"{len(built.messages):,} messages written" in capsys.readouterr().out
    html_dir = built.root / "cli-report"
    assert main(["report", str(out), str(html_dir), "--dead-letter", "sparse"]) == 0
    assert (html_dir / "index.html").exists()
    flags = spark.read.parquet(str(html_dir / "parquet" / "deliveries")).where("dead_letter_queue")
    # By name (the --dead-letter glob), and by the board's dead-letter headers.
    assert sorted(r["queue"] for r in flags.collect()) == ["graveyard", "sparse"]
    assert main(["export", str(built.root / "nothing"), str(built.root / "x")]) == 1
    assert "no data.mdb" in capsys.readouterr().err


def test_a_missing_java_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(FailedPrecondition, match=r"Java 17 or newer.*has no bin/java"):
        session.java_version()
    monkeypatch.delenv("JAVA_HOME")
    assert session.java_version() >= 17
