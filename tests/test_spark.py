"""The Spark side, on a real local SparkSession (one per test session,
``conftest.py``) over a snapshot of a board built here through the engine:
the data source returns what the engine holds, its partitions cover every
key once, the export round-trips and the report's figures match counts made
directly. The dataset night by night is in ``test_spark_nights.py``."""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from msgboard import Message, QueueSpec
from msgboard.cli import main
from msgboard.engine import Board
from msgboard.errors import FailedPrecondition
from msgboard.message import ExitKind, now_us
from msgboard.results import Start
from msgboard.spec import UNLIMITED, Op, SelectorSpec
from tests.sparking import post as _post

pyspark = pytest.importorskip("pyspark")
# A Spark session starting under a load of 50 on the 2 cores took more than
# the suite's 120 s (test_spark_nights.py and test_spark_changes.py do the same).
pytestmark = pytest.mark.timeout(900)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pyspark_msgboard import export, report, session, snapshot  # noqa: E402

Row = tuple[Any, ...]


@dataclass
class Built:
    snap: str
    messages: list[Message]
    root: Path


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
        b.create_queue(QueueSpec("orders", dead_letter="graveyard", max_deliveries=3))
        _post(b, "orders", [Message(tuple=("late", i), expires_at=1) for i in range(3)])
        # Headers any poster can set: they make no dead letter, and trace none.
        forged = {"x-dead-letter-reason": "expired", "x-dead-letter-queue": "jobs"}
        _post(b, "events.dlq", [Message(tuple=("forged",), headers=forged)])
        _post(b, "graveyard", [Message(tuple=("forged",), headers=forged)])
        # sparse: 100 waiting, 1,000 taken, 100 waiting: the unprocessed seqs
        # are far apart, the history ones dense.
        for word, n in (("keep", 100), ("go", 1000), ("keep", 100)):
            _post(b, "sparse", [Message(tuple=(word, i), address=word) for i in range(n)])
        from msgboard.associative import Pattern, template

        b.take("sparse", Pattern(templates=(template("go", int),)), max=1000)
        _post(b, "a:b-c.d", [Message(tuple=(1.5,), body=b"\x01") for _ in range(3)])
        _every_exit(b)
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


def _every_exit(b: Board) -> None:
    """Queue ``work``: one message dropped by a DELETE selector, one
    expired, one acked (a leased Take), one dead-lettered (max-deliveries),
    one taken, one waiting; its dead letters go to ``graveyard``."""
    from msgboard.associative import Pattern, template

    def only(word: str) -> Pattern:
        return Pattern(templates=(template(word, int),))

    spec = QueueSpec("work", max_history=UNLIMITED, dead_letter="graveyard", max_deliveries=2)
    b.create_queue(spec)
    b.create_selector(SelectorSpec("work", only("drop"), op=Op.DELETE))
    soon = now_us() + 200_000
    words = ("drop", "expire", "ack", "nack", "take", "wait")
    _post(
        b,
        "work",
        [
            Message(tuple=(w, i), expires_at=soon if w == "expire" else 0)
            for i, w in enumerate(words)
        ],
    )
    while now_us() <= soon:  # a condition, not a guess: the time has passed
        time.sleep(0.05)
    b.take("work", only("expire"))  # finds it expired: dead-lettered as such
    [lease] = b.take_leased("work", only("ack"), lease=60)
    b.ack_leases("work", [lease.id])
    for _ in range(2):
        [lease] = b.take_leased("work", only("nack"), lease=60, timeout=30)
        b.ack_leases("work", [lease.id], nack=True)
    b.take("work", only("take"))


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
        (r["exit"], r["exit_reason"], r["exit_queue"], r["exit_selector"], r["exit_seq"]),
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
        _exit(m),
    )


def _exit(m: Message) -> tuple[Any, ...]:
    """How ``m`` left, as the dataset's exit columns say it."""
    e = m.exit
    if e is None:
        return (None,) * 5
    return (e.kind.value, e.reason or None, e.queue or None, e.selector or None, e.seq or None)


def test_the_dataframe_is_what_the_engine_holds(spark: SparkSession, built: Built) -> None:
    """Given a snapshot of the board, when I load it with format("msgboard"),
    I expect the engine's messages, row for row, every field and type."""
    df = spark.read.format("msgboard").load(built.snap)
    assert df.schema == snapshot.spark_schema()
    got = sorted((spark_row(r) for r in df.collect()), key=lambda r: (r[0], r[1]))
    want = sorted((engine_row(m) for m in built.messages), key=lambda r: (r[0], r[1]))
    assert len(got) == len(want) == 300 + 40 + 3 + 1200 + 3 + 2 + 6 + 2
    assert got == want
    # Every history row says how it left; a waiting one says nothing.
    assert {r[2] for r in got if r[15][0] is None} == {"unprocessed"}
    exits = {r[15][:3] for r in got if r[0] == "work"}
    assert exits == {
        ("dropped", "delete", None),
        ("expired", "expired", "graveyard"),
        ("acked", None, None),
        ("dead_lettered", "max-deliveries", "graveyard"),
        ("taken", None, None),
        (None, None, None),
    }
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


def test_history_since_reads_only_the_tail(spark: SparkSession, built: Built) -> None:
    """Given historySince for a queue, I expect its history read from that
    seq on, cut into partitions from there, and every other section whole."""
    history = sorted(
        m.seq for m in built.messages if m.queue == "sparse" and m.section.value == "history"
    )
    since = history[600]
    for rows in (150, 100_000):
        plan = snapshot.plan(built.snap, rows_per_part=rows, since={"sparse": since})
        seen = []
        for ranges in plan:
            for batch in snapshot.read(built.snap, ranges):
                d = batch.to_pydict()
                seen += zip(d["queue"], d["section"], d["seq"], strict=True)
        want = [
            (m.queue, m.section.value, m.seq)
            for m in built.messages
            if not (m.queue == "sparse" and m.section.value == "history" and m.seq < since)
        ]
        assert sorted(seen) == sorted(want)
    df = (
        spark.read.format("msgboard")
        .option("historySince", json.dumps({"sparse": since}))
        .load(built.snap)
    )
    assert df.where("queue = 'sparse' AND section = 'history'").count() == len(history) - 600
    with pytest.raises(Exception, match="historySince"):
        spark.read.format("msgboard").option("historySince", "[1]").load(built.snap).count()


def test_export_round_trips_through_parquet(spark: SparkSession, built: Built) -> None:
    """Given the snapshot, when I export it, I expect Parquet partitioned by
    queue and UTC day, with standard UTC timestamps, that reads back as the
    same rows."""
    out = str(built.root / "parquet")
    assert export.export(spark, built.snap, out).rows == len(built.messages)
    back = export.load(spark, out)
    rows = back.collect()
    assert sorted(spark_row(r) for r in rows) == sorted(engine_row(m) for m in built.messages)
    for r in rows:
        assert r["day"] == datetime.fromtimestamp(r["posted_at"].timestamp(), UTC).date()
    dirs = sorted(p.name for p in Path(out).iterdir() if p.is_dir())
    assert "queue=jobs" in dirs and "queue=empty" not in dirs
    [f, *_] = Path(out, "queue=jobs").glob("section=*/day=*/*.parquet")
    schema = pq.read_schema(f)
    assert str(schema.field("posted_at").type) == "timestamp[us, tz=UTC]"
    assert "queue" not in schema.names and "section" not in schema.names
    # Plain hive-partitioned Parquet, for pyarrow too.
    table = ds.dataset(out, partitioning="hive").to_table(columns=["queue", "seq", "section"])
    keys = sorted(zip(*(table[c].to_pylist() for c in ("queue", "section", "seq")), strict=True))
    assert keys == sorted((m.queue, m.section.value, m.seq) for m in built.messages)


def _hour(us: int) -> datetime:
    return datetime.fromtimestamp(us // 3_600_000_000 * 3600, UTC).replace(tzinfo=None)


def test_the_report_matches_counts_made_directly(spark: SparkSession, built: Built) -> None:
    """Given the export, when I make the report, I expect its traffic,
    latency percentiles, redelivery and dead-letter counts and tuple shapes
    to equal those computed from the engine's messages, and a page with a
    chart per table."""
    parquet = built.root / "parquet-report"
    export.export(spark, built.snap, str(parquet))
    r = report.report(str(parquet), str(built.root / "report"))
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
    # Latency is of the messages processed (acked or taken) only.
    consumed = [m for m in ms if m.exit and m.exit.kind in (ExitKind.ACKED, ExitKind.TAKEN)]
    assert set(lat.index) == {m.queue for m in consumed}
    for q in {m.queue for m in consumed}:
        xs = [(m.processed_at - m.posted_at) / 1000 for m in consumed if m.queue == q]
        row = lat.loc[q]
        assert row["processed"] == len(xs)
        ranked = sorted(xs)
        for name, f in (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)):
            # Approximate: within 1% of the value at the rank asked for
            # (from the aggregates' log buckets, aggregates.GAMMA).
            want = ranked[max(1, math.ceil(f * len(xs))) - 1]
            assert row[name] == pytest.approx(want, rel=0.01, abs=0.001)
        assert row["mean_ms"] == pytest.approx(statistics.fmean(xs))

    d = r.frames["deliveries"].set_index("queue")
    assert d.loc["jobs", "redelivered"] == 5 and d.loc["jobs", "most_deliveries"] == 2
    # max_deliveries is the queue's property (0: no limit), not a count.
    assert d.loc["orders", "max_deliveries"] == 3 and d.loc["jobs", "max_deliveries"] == 0
    # Every queue on the board is counted, the empty ones too (orders' three
    # messages expired on arrival: they never entered it).
    names = {m.queue for m in ms} | {"empty", "orders"}
    assert set(d.index) == names
    assert d.loc["empty", "messages"] == d.loc["orders", "messages"] == 0
    assert r.figures["queues"] == len(names) == 8
    # How work's messages left, counted apart, and its books add up.
    w = d.loc["work"]
    ways = ("unprocessed", "processed", "moved", "dead_lettered", "expired", "dropped")
    assert [w[k] for k in ways] == [1, 2, 0, 1, 1, 1]
    assert (w["not_recorded"], w["unrecorded"], w["posted"]) == (0, 0, 6)
    assert lat.loc["work", "processed"] == 2
    assert d["balanced"].tolist() == [True] * len(names)
    assert (r.figures["dead_lettered"], r.figures["expired"], r.figures["dropped"]) == (1, 1, 1)
    assert r.figures["unbalanced"] == 0
    assert d.loc["sparse", "unprocessed"] == 200 and d.loc["sparse", "redelivered"] == 0
    # A dead-letter queue is one a queue's properties name, not one with the
    # board's headers in it, nor one with "dlq" in its name.
    assert list(d.index[d["dead_letter_queue"]]) == ["graveyard"]
    assert r.figures["dead_letters"] == 6 and r.figures["redelivered"] == 6
    letters = r.frames["dead_letters"]
    assert letters.to_dict("records") == [
        {"queue": "graveyard", "source": "orders", "reason": "expired", "messages": 3},
        {"queue": "graveyard", "source": "work", "reason": "expired", "messages": 1},
        {"queue": "graveyard", "source": "work", "reason": "max-deliveries", "messages": 1},
        {"queue": "graveyard", "source": None, "reason": None, "messages": 1},
    ]
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
    assert len(r.frames) == 6
    for name in r.frames:
        assert (out / f"{name}.csv").exists() and (out / "parquet" / name).is_dir()
        if name != "dead_letters":
            import xml.etree.ElementTree as ET

            svg = ET.parse(out / f"{name}.svg").getroot()  # well-formed, drawn
            assert svg.tag == "{http://www.w3.org/2000/svg}svg" and len(svg) > 5
            assert f'src="{name}.svg"' in page
    assert "approximate" in page
    taken = json.loads((Path(built.snap) / "snapshot.json").read_text())["taken_at"]
    assert f"snapshot taken {taken.replace('T', ' ').split('.')[0].removesuffix('Z')} UTC" in page
    assert "report made " in page
    made = json.loads((out / "report.json").read_text())
    assert (
        made["taken_at_us"]
        == json.loads((Path(built.snap) / "snapshot.json").read_text())["taken_at_us"]
    )


def test_export_and_report_from_the_command_line(
    spark: SparkSession, built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commands share the running session (and leave it running)."""
    out = built.root / "cli-parquet"
    assert main(["export", built.snap, str(out)]) == 0
    assert f"{len(built.messages):,} rows in all" in capsys.readouterr().out
    html_dir = built.root / "cli-report"
    assert main(["report", str(out), str(html_dir), "--dead-letter", "sparse"]) == 0
    assert (html_dir / "index.html").exists()
    flags = spark.read.parquet(str(html_dir / "parquet" / "deliveries")).where("dead_letter_queue")
    # By name (the --dead-letter glob), and by the board's dead-letter headers.
    assert sorted(r["queue"] for r in flags.collect()) == ["graveyard", "sparse"]
    assert main(["export", built.snap, str(out), "--conf", "nonsense"]) == 2
    assert "--conf: expected KEY=VALUE" in capsys.readouterr().err
    assert main(["export", str(built.root / "nothing"), str(built.root / "x")]) == 1
    assert "no data.mdb" in capsys.readouterr().err


def test_a_missing_java_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(FailedPrecondition, match=r"Java 17 or newer.*has no bin/java"):
        session.java_version()
    monkeypatch.delenv("JAVA_HOME")
    assert session.java_version() >= 17


def test_a_local_session_listens_on_loopback(spark: SparkSession) -> None:
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert spark.conf.get("spark.driver.bindAddress") == "127.0.0.1"
    # The block managers, as "host:port"; and the UI binds to SPARK_LOCAL_IP.
    sc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    assert str(sc.getExecutorMemoryStatus().keys().head()).startswith("127.0.0.1:")
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_long_shapes_are_abbreviated() -> None:
    assert report.abbreviate("(string, int, float)") == "(string, int, float)"
    assert report.abbreviate("()") == "()"
    long = "(" + ", ".join(["string", *["int"] * 62, "float"]) + ")"
    assert report.abbreviate(long) == "(string, 62 int, float)"
    mixed = "(" + ", ".join(["int", "string"] * 32) + ")"
    short = report.abbreviate(mixed)
    assert len(short) <= 60 and short.endswith("… 64 fields)")


def test_the_books_column_flags_a_queue_that_does_not_add_up(spark: SparkSession) -> None:
    """``balanced``: posted = unprocessed + every way out + unrecorded +
    scheduled; one message short is False, a queue gone (no posted) is null."""
    cols = ["posted", "unprocessed", "unrecorded", "scheduled", *report.EXITS]
    ways = (3, 1, 1, 1, 1, 0)
    rows = [(12, 1, 2, 2, *ways), (12, 1, 2, 1, *ways), (None, 1, 0, 0, *ways)]
    df = spark.createDataFrame(rows, ", ".join(f"{c} long" for c in cols))
    assert [r[0] for r in df.select(report.balanced()).collect()] == [True, False, None]


def test_the_aggregates_give_what_spark_computes_from_the_rows(
    spark: SparkSession, built: Built
) -> None:
    """Given the export, I expect the report's tables summed from the data
    files' aggregates (no Spark) to equal those Spark computes from every
    row (``report.tables``): counts exactly, latency means and maxima to
    the microsecond, percentiles within 1%."""
    from pyspark_msgboard import aggregates, dataset

    out = str(built.root / "parquet-aggregates")
    export.export(spark, built.snap, out)
    books = dataset.load(out)
    assert books is not None
    live = {n: q for n, q in books.queues.items() if not q.get("gone")}
    got = report.merge(aggregates.load(out), live, books.dead_letter_queues(), ()).frames
    df = export.load(spark, out).drop("day")
    df = df.withColumn("queue", report.generation({n: int(q["id"]) for n, q in live.items()}))
    want = {
        k: v.toPandas() for k, v in report.tables(df, books.dead_letter_queues(), (), live).items()
    }
    for name in ("traffic_queue", "traffic_address", "dead_letters", "shapes"):
        a = got[name].reset_index(drop=True)
        b = want[name].reset_index(drop=True)
        if name == "traffic_address":  # Spark orders by address then hour too
            a = a.sort_values(["address", "hour"]).reset_index(drop=True)
            b = b.sort_values(["address", "hour"]).reset_index(drop=True)
        assert a.astype(str).to_dict("records") == b.astype(str).to_dict("records"), name
    d_got, d_want = got["deliveries"].set_index("queue"), want["deliveries"].set_index("queue")
    assert d_got.astype(str).to_dict("index") == d_want[d_got.columns].astype(str).to_dict("index")
    lat_got, lat_want = got["latency"].set_index("queue"), want["latency"].set_index("queue")
    assert list(lat_got.index) == list(lat_want.index)
    assert (lat_got["processed"] == lat_want["processed"]).all()
    for col in ("mean_ms", "max_ms"):
        assert lat_got[col].tolist() == pytest.approx(lat_want[col].tolist(), abs=0.001)
    for col in ("p50_ms", "p95_ms", "p99_ms"):
        assert lat_got[col].tolist() == pytest.approx(lat_want[col].tolist(), rel=0.01, abs=0.001)
