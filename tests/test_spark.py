"""The Spark side, on a real local SparkSession (one per test session) over
a snapshot of a board built here through the engine: the data source
returns what the engine holds, its partitions cover every key once, the
export round-trips and the report's figures match counts made directly."""

from __future__ import annotations

import collections
import json
import os
import statistics
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
from msgboard.results import Start
from msgboard.spec import UNLIMITED
from tests import damage

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
    assert len(got) == len(want) == 300 + 40 + 3 + 1200 + 3 + 2
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
        ranked = sorted(xs)
        for name, f in (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)):
            # Approximate: a value of the data, at the rank asked for (± 1).
            got = row[name]
            assert got in ranked
            assert abs(ranked.index(got) + 1 - f * len(xs)) <= 1 + ranked.count(got)
        assert row["mean_ms"] == pytest.approx(statistics.fmean(xs))

    d = r.frames["deliveries"].set_index("queue")
    assert d.loc["jobs", "redelivered"] == 5 and d.loc["jobs", "max_deliveries"] == 2
    assert d.loc["sparse", "unprocessed"] == 200 and d.loc["sparse", "redelivered"] == 0
    # A dead-letter queue is one a queue's properties name, not one with the
    # board's headers in it, nor one with "dlq" in its name.
    assert list(d.index[d["dead_letter_queue"]]) == ["graveyard"]
    assert r.figures["dead_letters"] == 4 and r.figures["redelivered"] == 5
    letters = r.frames["dead_letters"]
    assert letters.to_dict("records") == [
        {"queue": "graveyard", "source": "orders", "reason": "expired", "messages": 3},
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
            assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
            assert f'src="{name}.png"' in page
    assert "approximate" in page


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


# ------------------------------------------------ the dataset, night by night


def _keys(out: str | Path) -> list[tuple[str, int, str]]:
    """(queue, seq, section) of every row of a dataset, read by pyarrow."""
    t = ds.dataset(str(out), partitioning="hive").to_table(columns=["queue", "seq", "section"])
    return sorted(zip(*(t[c].to_pylist() for c in ("queue", "seq", "section")), strict=True))


def _board_keys(b: Board) -> dict[tuple[str, int], str]:
    keys = {}
    for q in b.list_queues():
        page = b.browse(q.spec.name, Start.SEQ, seq=0, limit=10_000)
        keys.update({(m.queue, m.seq): m.section.value for m in page.messages})
    return keys


def _tree(out: Path) -> dict[str, tuple[int, int]]:
    """Every file of a directory with its inode and size: what a change touches."""
    return {
        str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_size)
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def test_an_empty_board_exports_and_reports(spark: SparkSession, tmp_path: Path) -> None:
    """Given a board with a queue and no messages, I expect an export of no
    rows and a report that says so, not a traceback."""
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        b.snapshot(tmp_path / "snap")
    assert snapshot.plan(str(tmp_path / "snap")) == [[]]
    done = export.export(spark, str(tmp_path / "snap"), str(tmp_path / "out"))
    assert (done.added, done.unprocessed, done.rows) == (0, 0, 0)
    assert export.load(spark, str(tmp_path / "out")).count() == 0
    r = report.report(spark, str(tmp_path / "out"), str(tmp_path / "report"))
    assert r.figures["messages"] == 0 and r.figures["first"] is None
    assert "no messages" in (tmp_path / "report" / "index.html").read_text()
    # Plain readers see every column of the empty dataset, and no rows.
    out = str(tmp_path / "out")
    columns = {*snapshot.SCHEMA.names, "day"}
    assert set(spark.read.parquet(out).columns) == columns
    assert spark.read.parquet(out).count() == 0
    table = ds.dataset(out, partitioning="hive").to_table()
    assert (set(table.column_names), table.num_rows) == (columns, 0)
    # Once it has rows, its partitions say the columns (no empty file beside).
    with Board(tmp_path / "board", sync=False) as b:
        b.post("jobs", [Message(tuple=("one",))])
        b.snapshot(tmp_path / "snap2")
    export.export(spark, str(tmp_path / "snap2"), out)
    assert spark.read.parquet(out).select("queue", "section").collect() == [("jobs", "unprocessed")]
    assert ds.dataset(out, partitioning="hive").count_rows() == 1


def test_a_time_no_timestamp_can_hold(spark: SparkSession, tmp_path: Path) -> None:
    """Given an expires_at in nanoseconds by mistake, I expect the board to
    refuse it at post time; given one stored anyway (an older board took
    it), I expect the reader to give the last time a timestamp holds, and
    collect() of the export to work."""
    from msgboard.errors import InvalidArgument
    from msgboard.lmdbstore import record
    from msgboard.v1 import board_pb2 as pb

    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        with pytest.raises(InvalidArgument, match=r"expires_at: .* after 9999-12-31"):
            b.post("jobs", [Message(tuple=(1,), expires_at=2**63)])
        b.post("jobs", [Message(tuple=(i,)) for i in range(3)])
        b.snapshot(tmp_path / "snap")
    import lmdb

    env = lmdb.open(str(tmp_path / "snap"), max_dbs=32, lock=False)
    db = env.open_db(b"unprocessed", create=False)
    with env.begin(write=True) as txn:
        for i, (key, raw) in enumerate(list(txn.cursor(db=db))):
            m = pb.Message.FromString(record.unseal(key, raw))
            m.expires_at.seconds = (2**63 - 1, 2**53, 300_000_000_000)[i]
            txn.put(key, record.seal(key, m.SerializeToString()), db=db)
    env.close()
    out = str(tmp_path / "out")
    assert export.export(spark, str(tmp_path / "snap"), out).rows == 3
    rows = export.load(spark, out).select("expires_at").collect()
    assert {r["expires_at"] for r in rows} == {datetime(9999, 12, 31, 23, 59, 59, 999999)}
    # pandas' nanosecond timestamps end in 2262: its µs since the epoch then.
    us = export.load(spark, out).select(F.unix_micros("expires_at").alias("us")).toPandas()
    assert set(us["us"]) == {snapshot.MAX_US}


def test_two_nights_give_each_message_once_in_its_last_section(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Given a night of posts and takes (out of seq order), then a second
    with more, whose takes trim history, I expect the dataset after the
    second export to hold every message the board holds, in its section
    now, plus the history the board trimmed, each once; and the second run
    to add only what the first had not seen."""
    from msgboard.associative import Pattern, template

    out = tmp_path / "history"
    trimmed: set[tuple[str, int]] = set()
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs", max_history=6))
        b.create_queue(QueueSpec("audit", max_history=UNLIMITED))
        _post(b, "jobs", [Message(tuple=("job", i)) for i in range(10)])
        _post(b, "audit", [Message(tuple=("a", i)) for i in range(4)])
        b.take("jobs", Pattern(templates=(template("job", 7),)))  # seq 8 first
        b.take("jobs", max=2)  # seqs 1, 2
        b.take("audit", max=1)
        night1 = _board_keys(b)
        b.snapshot(tmp_path / "snap1")
        first = export.export(spark, str(tmp_path / "snap1"), str(out))
        assert (first.added, first.unprocessed, first.rows) == (4, 10, 14)
        assert _keys(out) == sorted((q, s, sec) for (q, s), sec in night1.items())

        _post(b, "jobs", [Message(tuple=("job", i)) for i in range(10, 15)])
        b.take("jobs", max=6)  # 3..7 and 9: waiting last night, taken now
        b.take("jobs", Pattern(templates=(template("job", 12),)))  # seq 13, new
        night2 = _board_keys(b)
        trimmed = {k for k, sec in night1.items() if sec == "history"} - set(night2)
        assert trimmed == {("jobs", 1), ("jobs", 2)}  # max_history 6 let them go
        b.snapshot(tmp_path / "snap2")
    second = export.export(spark, str(tmp_path / "snap2"), str(out))
    want = {**dict.fromkeys(trimmed, "history"), **night2}
    assert _keys(out) == sorted((q, s, sec) for (q, s), sec in want.items())
    new = {k for k, sec in night2.items() if sec == "history" and night1.get(k) != "history"}
    assert second.added == len(new) and second.rows == len(want)
    assert export.load(spark, str(out)).count() == len(want)
    books = json.loads((out / "_msgboard.json").read_text())
    assert books["queues"]["jobs"]["next_seq"] == 16 and len(books["runs"]) == 2

    # The same snapshot again: nothing changes, not a file.
    before = _tree(out)
    again = export.export(spark, str(tmp_path / "snap2"), str(out))
    assert again.unchanged and _tree(out) == before
    # An older one is refused; --full rebuilds from it alone.
    with pytest.raises(FailedPrecondition, match="--full rebuilds"):
        export.export(spark, str(tmp_path / "snap1"), str(out))
    assert _tree(out) == before
    export.export(spark, str(tmp_path / "snap1"), str(out), full=True)
    assert _keys(out) == sorted((q, s, sec) for (q, s), sec in night1.items())


def test_a_failing_run_leaves_the_dataset_whole(spark: SparkSession, tmp_path: Path) -> None:
    """Given a dataset, when an incremental or a full run fails half-way (a
    damaged record in the new snapshot), I expect the dataset exactly as it
    was and nothing left beside it."""
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        _post(b, "jobs", [Message(tuple=(i,), body=b"x" * 100) for i in range(50)])
        b.snapshot(tmp_path / "snap1")
        _post(b, "jobs", [Message(tuple=(i,), body=b"night two %d" % i) for i in range(50)])
        b.snapshot(tmp_path / "snap2")
    out = tmp_path / "history"
    export.export(spark, str(tmp_path / "snap1"), str(out))
    before = _tree(out)
    damage.flip(tmp_path / "snap2", b"night two 20")
    for full in (False, True):
        with pytest.raises(Exception, match=r"checksum|damaged"):
            export.export(spark, str(tmp_path / "snap2"), str(out), full=full)
        assert _tree(out) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "board",
            "history",
            "history.lock",
            "snap1",
            "snap2",
        ]
    assert export.load(spark, str(out)).count() == 50


def test_nightly_runs_the_night_and_can_run_it_again(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a running board, msgboard nightly takes today's snapshot,
    brings the dataset up to date and writes the day's report; run again
    the same day, it uses the snapshot it took and changes nothing."""
    from msgboard.client import Client
    from msgboard.errors import InvalidArgument
    from msgboard.testing import ServerThread

    server = ServerThread(tmp_path / "board").start()
    try:
        with Client(server.address) as c:
            c.create_queue("jobs")
            for i in range(20):
                c.post("jobs", ("job", i))
            # Nanoseconds for microseconds: refused over the wire too.
            with pytest.raises(InvalidArgument, match="expires_at"):
                c.post("jobs", ("late",), expires_at=1_795_000_000_000_000_000)
            c.create_queue("single", max_history=10)  # one taken: percentiles of one
            c.post("single", ("one",))
            c.take("single")
        args = [
            "nightly",
            str(tmp_path / "snaps"),
            str(tmp_path / "history"),
            str(tmp_path / "www"),
            "--server",
            server.address,
        ]
        assert main(args) == 0
        first = capsys.readouterr().out
        assert "20 unprocessed" in first and "nightly: done" in first
        [day] = [p.name for p in (tmp_path / "www").iterdir() if not p.name.endswith(".lock")]
        assert (tmp_path / "www" / day / "index.html").exists()
        assert "single,1," in (tmp_path / "www" / day / "latency.csv").read_text()
        assert main(args) == 0
        again = capsys.readouterr().out
        assert "is there already" in again and "nothing to do" in again
    finally:
        server.stop()


def test_nightly_against_a_board_with_a_snapshot_dir(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a board with users and a --snapshot-dir (docs/security.md's
    setup), which refuses absolute snapshot paths: msgboard nightly with the
    admin's token names the day, and says where the board wrote it when
    SNAPSHOTS is another directory; given the board's snapshot directory,
    it runs the night on that snapshot."""
    from msgboard.client import Client
    from msgboard.security.auth import token_hash
    from msgboard.testing import ServerProcess

    users = tmp_path / "users.toml"
    users.write_text(
        f'[[user]]\nname = "ops"\ntoken_sha256 = "{token_hash("ops-token")}"\n'
        '[[user.allow]]\nqueues = "*"\nverbs = ["admin"]\n'
    )
    snaps = tmp_path / "snapshots"
    server = ServerProcess(tmp_path / "data", "--users", str(users), "--snapshot-dir", str(snaps))
    try:
        with Client(server.address, token="ops-token") as c:
            c.create_queue("jobs")
            for i in range(5):
                c.post("jobs", ("job", i))
        rest = [str(tmp_path / "history"), str(tmp_path / "www")]
        login = ["--server", server.address, "--token", "ops-token"]
        assert main(["nightly", str(tmp_path / "elsewhere"), *rest, *login]) == 1
        err = capsys.readouterr().err
        [day] = os.listdir(snaps)
        assert f"wrote today's snapshot to {snaps.resolve() / day}" in err
        assert main(["nightly", str(snaps), *rest, *login]) == 0
        out = capsys.readouterr().out
        assert f"{snaps / day} is there already" in out and "5 unprocessed" in out
        assert (tmp_path / "www" / day / "index.html").exists()
    finally:
        server.kill()


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


def test_three_nights_from_an_empty_board(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given an empty board served over gRPC, and three nights of traffic
    (posts, takes, history trimmed by max_history, dead letters from a full
    queue), each followed by the documented `msgboard nightly`, I expect the
    dataset after every night to hold each message the board holds, in its
    section now, plus the history the board trimmed since, each once; and
    each night's report to count exactly those rows and trace the dead
    letters to the queue they came from."""
    from msgboard.client import Client
    from msgboard.testing import ServerThread

    server = ServerThread(tmp_path / "board").start()
    out = tmp_path / "history"
    seen: dict[tuple[str, int], str] = {}
    try:
        assert server.board is not None
        with Client(server.address) as c:
            c.create_queue("dlq", max_history=UNLIMITED)
            c.create_queue("jobs", max_history=4)
            c.create_queue("small", max_unprocessed=3, overflow="dead-letter", dead_letter="dlq")
            for night, (posts, takes) in enumerate([(0, 0), (12, 5), (6, 9)], start=1):
                for i in range(posts):
                    c.post("jobs", ("job", night, i))
                    c.post("small", ("s", night, i))  # past 3 waiting: dead-lettered
                if takes:
                    c.take("jobs", max=takes)
                    c.take("small", max=1)
                now = _board_keys(server.board)
                # What was history stays (trimmed or not); the rest as now.
                seen = {**{k: s for k, s in seen.items() if s == "history"}, **now}
                args = [
                    "nightly",
                    str(tmp_path / f"snapshots-night{night}"),
                    str(out),
                    str(tmp_path / f"www-night{night}"),
                    "--server",
                    server.address,
                ]
                assert main(args) == 0, night
                printed = capsys.readouterr().out
                if seen:
                    assert _keys(out) == sorted((q, s, sec) for (q, s), sec in seen.items())
                else:  # no Parquet file yet: the dataset's own reader knows the schema
                    assert export.load(spark, str(out)).count() == 0
                assert f"report of {len(seen):,} messages" in printed
        # Each night took more jobs than max_history keeps: the dataset kept
        # the 4 history rows of night 2 that the board has trimmed since,
        # beside the 4 it holds (what a night trims before its snapshot is
        # never seen).
        history = [k for k, sec in seen.items() if k[0] == "jobs" and sec == "history"]
        assert len(history) == 8
        assert len([k for k in history if k in _board_keys(server.board)]) == 4
        # small's overflow went to dlq, and the report traces it there.
        assert any(q == "dlq" for q, _ in seen)
        [day] = [p for p in os.listdir(tmp_path / "www-night3") if not p.endswith(".lock")]
        letters = (tmp_path / "www-night3" / day / "dead_letters.csv").read_text()
        assert "small" in letters
    finally:
        server.stop()
