"""The export's tasks write Parquet themselves (``writer.py``): the same
dataset Spark's own writer makes from the data source (``writer=spark``),
row for row and field for field, in the same partition directories; and a
run whose task fails leaves no attempt behind."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.spec import UNLIMITED
from tests import damage
from tests.sparking import exact

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)

from pyspark.sql import SparkSession  # noqa: E402

from pyspark_msgboard import export, writer  # noqa: E402

#: posted_at of the records, by seq % 4: three days apart, and the first
#: microsecond of 1970 (the epoch's day).
DAYS_US = (1_795_000_000_000_000, 1_795_090_000_000_000, 1_795_180_000_000_000, 1)


def _board(tmp_path: Path) -> Path:
    """A snapshot of two queues (one named with a character Spark escapes
    in a directory name), edge values in the tuples and headers, half of
    each taken, the records' posted_at spread over four days."""
    from msgboard.lmdbstore import record
    from msgboard.v1 import board_pb2 as pb

    with Board(tmp_path / "board", sync=False) as b:
        for q in ("jobs", "a:b"):
            b.create_queue(QueueSpec(q, max_history=UNLIMITED))
            b.post(
                q,
                [
                    Message(
                        tuple=(None, True, -(2**63), -0.0, float("nan"), "é", b"\x00", i),
                        headers={"z": "1", "a": "", "tenant": f"t{i % 3}"},
                        body=b"body-%d" % i,
                        expires_at=0 if i % 2 else 253_402_300_799_999_999,
                    )
                    for i in range(40)
                ],
            )
            b.take(q, max=20)
        b.snapshot(tmp_path / "snap")
    import lmdb

    env = lmdb.open(str(tmp_path / "snap"), max_dbs=32, lock=False)
    with env.begin(write=True) as txn:
        for section in (b"unprocessed", b"history"):
            db = env.open_db(section, txn=txn, create=False)
            for key, raw in list(txn.cursor(db=db)):
                m = pb.Message.FromString(record.unseal(key, raw))
                seq = struct.unpack(">Q", key[4:])[0]
                m.posted_at.FromMicroseconds(DAYS_US[seq % 4])
                txn.put(key, record.seal(key, m.SerializeToString()), db=db)
    env.close()
    return tmp_path / "snap"


def _table(out: Path) -> Any:
    t = ds.dataset(str(out), partitioning="hive").to_table()
    t = t.select(sorted(t.column_names))
    return t.sort_by([("queue", "ascending"), ("section", "ascending"), ("seq", "ascending")])


def _dirs(out: Path) -> set[str]:
    return {str(p.parent.relative_to(out)) for p in out.rglob("*.parquet")}


def test_the_tasks_write_what_sparks_writer_writes(spark: SparkSession, tmp_path: Path) -> None:
    # Given a snapshot of messages over four days, two queues, both sections
    snap = _board(tmp_path)
    # When it is exported by the tasks (the default) and by Spark's writer
    tasks, jvm = tmp_path / "tasks", tmp_path / "jvm"
    by_tasks = export.export(spark, str(snap), str(tasks), options={"rowsPerPartition": "7"})
    by_jvm = export.export(spark, str(snap), str(jvm), options={"writer": "spark"})
    # I expect the same rows, field by field, in the same directories
    assert by_tasks.rows == by_jvm.rows == 80
    assert _dirs(tasks) == _dirs(jvm)
    assert "queue=a%3Ab/section=history/day=1970-01-01" in _dirs(tasks)
    a, b = _table(tasks), _table(jvm)
    assert a.column_names == b.column_names
    for name in a.column_names:
        assert exact(a[name].to_pylist()) == exact(b[name].to_pylist()), name
    # and the same books, read back by Spark the same way
    books = [json.loads((o / "_msgboard.json").read_text()) for o in (tasks, jvm)]
    assert books[0]["queues"] == books[1]["queues"]
    got = export.load(spark, str(tasks)).orderBy("queue", "section", "seq").collect()
    want = export.load(spark, str(jvm)).orderBy("queue", "section", "seq").collect()
    assert exact([r.asDict(True) for r in got]) == exact([r.asDict(True) for r in want])
    # and no attempt directory left in either
    assert not list(tasks.glob("_attempt-*"))


def test_a_failed_task_leaves_no_attempt(spark: SparkSession, tmp_path: Path) -> None:
    # Given a snapshot with a damaged record, and the directory a run writes
    # into holding a stray attempt of an earlier task
    from pyspark_msgboard import snapshot

    good = _board(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    damage.flip(bad, b"body-33")
    new = tmp_path / "new"
    (new / "_attempt-stray").mkdir(parents=True)
    (new / "_attempt-stray" / "00000.parquet").write_bytes(b"half")
    # When its tasks run, one of them failing on the damaged record
    with pytest.raises(Exception, match=r"checksum|damaged"):
        writer.write(spark, str(bad), str(new), snapshot.plan(str(bad), 7))
    # I expect no attempt left, stray or new, and no data file
    assert sorted(p.name for p in new.iterdir()) == []
    # and a run that succeeds to move every file into place, leaving no attempt
    files = writer.write(spark, str(good), str(new), snapshot.plan(str(good), 7))
    assert sorted(files) == sorted(str(p.relative_to(new)) for p in new.rglob("*.parquet"))
    assert ds.dataset(str(new), partitioning="hive").count_rows() == 80
    assert not list(new.glob("_attempt-*"))
