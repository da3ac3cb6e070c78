"""The Spark dataset night by night, on the local SparkSession of
``conftest.py``: an empty board exports and reports, times no timestamp can
hold, each message once in its last section across nights, a failing run
that leaves the dataset whole, and ``msgboard nightly`` against a running
board (with a snapshot dir, and for three nights from an empty board)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from msgboard import Message, QueueSpec
from msgboard.cli import main
from msgboard.engine import Board
from msgboard.errors import FailedPrecondition
from msgboard.results import Start
from msgboard.spec import UNLIMITED
from tests import damage
from tests.sparking import post as _post

pyspark = pytest.importorskip("pyspark")
# Three nights of Spark jobs in one test: under a load of 14 on 2 cores
# that took more than the suite's 120 s (test_spark_changes.py does the same).
pytestmark = pytest.mark.timeout(900)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pyspark_msgboard import export, report, snapshot  # noqa: E402


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
    r = report.report(str(tmp_path / "out"), str(tmp_path / "report"))
    assert r.figures["messages"] == 0 and r.figures["first"] is None
    page = (tmp_path / "report" / "index.html").read_text()
    assert "no messages" in page and "No dead letters" in page
    assert r.figures["queues"] == 1  # an empty queue counts
    # Plain readers see every column of the empty dataset, and no rows.
    out = str(tmp_path / "out")
    columns = {*snapshot.ARROW.names, "day"}
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
        [day] = [p.name for p in (tmp_path / "www").iterdir() if p.is_dir()]
        assert (tmp_path / "www" / day / "index.html").exists()
        assert "single,1," in (tmp_path / "www" / day / "latency.csv").read_text()
        assert main(args) == 0
        again = capsys.readouterr().out
        assert "is there already" in again and "export: " in again
        assert "already holds this snapshot: nothing to do" in again
        assert "shows the dataset as it is: nothing to do" in again  # no report made again
        nights = (tmp_path / "www" / "index.html").read_text()
        assert f'href="{day}/index.html"' in nights
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
            # Scheduled an hour ahead: no row and not unrecorded, every night.
            c.create_queue("later")
            c.post("later", ("l", 1), delay=3600.0)
            for night, (posts, takes) in enumerate([(0, 0), (12, 5), (6, 9)], start=1):
                for i in range(posts):
                    c.post("jobs", ("job", night, i))
                    c.post("small", ("s", night, i))  # past 3 waiting: dead-lettered
                if takes:
                    c.take("jobs", max=takes)
                    c.take("small", max=1)
                now = {k: s for k, s in _board_keys(server.board).items() if s != "scheduled"}
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
                # posted = rows in the dataset + unrecorded (trimmed unseen)
                books = json.loads((out / "_msgboard.json").read_text())
                for name, q in books["queues"].items():
                    kept = q["unprocessed"] + q["history"]
                    balance = kept + q["unrecorded"] + q["scheduled"]
                    assert q["next_seq"] - 1 == balance, (night, name)
                assert (
                    books["queues"]["later"]["scheduled"],
                    books["queues"]["later"]["unrecorded"],
                ) == (1, 0)
        # Each night took more jobs than max_history keeps: the dataset kept
        # the 4 history rows of night 2 that the board has trimmed since,
        # beside the 4 it holds (what a night trims before its snapshot is
        # never seen).
        history = [k for k, sec in seen.items() if k[0] == "jobs" and sec == "history"]
        assert len(history) == 8
        assert len([k for k in history if k in _board_keys(server.board)]) == 4
        # small's overflow went to dlq, and the report traces it there.
        assert any(q == "dlq" for q, _ in seen)
        [day] = [p.name for p in (tmp_path / "www-night3").iterdir() if p.is_dir()]
        letters = (tmp_path / "www-night3" / day / "dead_letters.csv").read_text()
        assert "small" in letters
    finally:
        server.stop()


#: A Python that cannot import the Spark side, as on a board installed by
#: scripts/serve: a finder ahead of all others that refuses those modules.
_WITHOUT_SPARK = """
import sys
from importlib.abc import MetaPathFinder

class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "pyarrow", "pandas", "pyspark"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
for name in [m for m in sys.modules if m.split(".")[0] in ("numpy", "pyarrow", "pandas")]:
    del sys.modules[name]
from msgboard.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_nightly_without_the_spark_side_says_what_to_install(tmp_path: Path) -> None:
    """Given a running board and a Python without the spark extra (numpy,
    pyarrow, pyspark: scripts/serve's install), msgboard nightly says in
    one line what to install, with no traceback, before it takes the
    snapshot."""
    import subprocess
    import sys

    from msgboard.testing import ServerThread

    server = ServerThread(tmp_path / "board").start()
    try:
        argv = ["nightly", "snaps", "history", "www", "--server", server.address]
        done = subprocess.run(
            [sys.executable, "-c", _WITHOUT_SPARK, *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "pip install 'msgboard[spark]'" in line and "numpy" in line
    assert not (tmp_path / "snaps").exists()  # no snapshot taken
