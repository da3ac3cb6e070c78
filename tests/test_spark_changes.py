"""A night costs what the day changed (``changes.py``, ``export.py``), on the
local SparkSession of ``conftest.py`` and on the ``msgboard`` command in a
process of its own: a stuck message does not make its queue's history
decode again, a redelivery decodes its one row, a night with nothing new
decodes nothing and starts no Spark, the same or an older snapshot is
decided with no Java at all, Spark's logging stays in its log file, and a
JVM killed mid-export is one line with the dataset as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.engine import Board
from msgboard.lmdbstore import DurableStore
from msgboard.results import Start
from msgboard.spec import UNLIMITED
from tests.sparking import post

pyspark = pytest.importorskip("pyspark")
# Several Spark jobs, or a JVM of their own, per test: a busy machine takes minutes.
pytestmark = pytest.mark.timeout(900)

from pyspark.sql import SparkSession  # noqa: E402

from pyspark_msgboard import changes, export  # noqa: E402

#: The msgboard command of this interpreter's environment.
MSGBOARD = os.path.join(os.path.dirname(sys.executable), "msgboard")


def _no_spark() -> SparkSession:
    raise AssertionError("this night needed no Spark, yet it started one")


def _rows(out: Path) -> dict[tuple[str, int], tuple[str, int]]:
    """(queue, seq) -> (section, delivery_count) of every row, by pyarrow."""
    t = ds.dataset(str(out), partitioning="hive").to_table(
        columns=["queue", "seq", "section", "delivery_count"]
    )
    cols = [t[c].to_pylist() for c in ("queue", "seq", "section", "delivery_count")]
    rows = {}
    for q, s, sec, dc in zip(*cols, strict=True):
        assert (q, s) not in rows, f"({q}, {s}) twice in the dataset"
        rows[q, s] = (sec, dc)
    return rows


def _board(b: Board) -> dict[tuple[str, int], tuple[str, int]]:
    rows = {}
    for q in b.list_queues():
        page = b.browse(q.spec.name, Start.SEQ, seq=0, limit=10_000)
        rows.update({(m.queue, m.seq): (m.section.value, m.delivery_count) for m in page.messages})
    return rows


def _adds_up(out: Path) -> None:
    """Per queue on the board: posted = rows in the dataset + unrecorded."""
    books = json.loads((out / "_msgboard.json").read_text())
    for name, q in books["queues"].items():
        if not q["gone"]:
            assert q["next_seq"] - 1 == q["unprocessed"] + q["history"] + q["unrecorded"], name


def _files(out: Path) -> dict[str, int]:
    """Data files by path, with their inode."""
    return {
        str(p.relative_to(out)): p.stat().st_ino
        for p in out.rglob("*.parquet")
        if not p.name.startswith(("_", "."))
    }


def _new_rows(out: Path, before: dict[str, int]) -> dict[str, int]:
    """Rows per section of the files this run wrote under new names: what
    Spark wrote, which is every row the data source decoded (a file kept
    or rewritten by pyarrow keeps its name)."""
    rows: dict[str, int] = {}
    for rel in set(_files(out)) - set(before):
        section = rel.split(os.sep)[1].removeprefix("section=")
        rows[section] = rows.get(section, 0) + pq.read_metadata(out / rel).num_rows
    return rows


def test_a_night_decodes_what_changed_not_the_backlog(spark: SparkSession, tmp_path: Path) -> None:
    """Given a queue whose first message a consumer holds and never acks,
    and 999 taken: night 2, after 1,000 more posted and taken, I expect it
    to decode exactly those 1,000 history rows (not the queue's history
    since the stuck message), and the stuck message's file kept as it was;
    a nack of the stuck message decodes its one row again, with its
    delivery count raised (0 to 1); a new snapshot of an idle board decodes nothing
    and starts no Spark; and after each night the dataset holds what the
    board holds, each message once."""
    out = tmp_path / "history"
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        b.create_queue(QueueSpec("idle"))
        post(b, "jobs", [Message(tuple=("job", i), body=b"x" * 50) for i in range(1000)])
        post(b, "idle", [Message(tuple=("idle", i)) for i in range(10)])
        [stuck] = b.take_leased("jobs", lease=3600)
        assert stuck.message.seq == 1
        assert len(b.take("jobs", max=999)) == 999
        b.snapshot(tmp_path / "snap1")
        first = export.export(spark, str(tmp_path / "snap1"), str(out), local_rows=0)
        assert (first.decoded, first.rows, first.spark) == (1010, 1010, True)
        assert _rows(out) == _board(b)
        _adds_up(out)

        post(b, "jobs", [Message(tuple=("job", i)) for i in range(1000, 2000)])
        assert len(b.take("jobs", max=1000)) == 1000
        b.snapshot(tmp_path / "snap2")
        before = _files(out)
        # A small night: decoded and written in this process, no Spark.
        second = export.export(_no_spark, str(tmp_path / "snap2"), str(out))
        assert (second.decoded, second.added, second.spark) == (1000, 1000, False)
        assert _new_rows(out, before) == {"history": 1000}
        assert _rows(out) == _board(b)
        _adds_up(out)
        assert _rows(out)["jobs", 1] == ("unprocessed", 0)  # held, never given back yet
        kept = {rel: ino for rel, ino in _files(out).items() if "unprocessed" in rel}
        assert kept and all(before.get(rel) == ino for rel, ino in kept.items())

        b.ack_leases("jobs", [stuck.id], nack=True)  # given back: delivered once
        b.snapshot(tmp_path / "snap3")
        before = _files(out)
        third = export.export(_no_spark, str(tmp_path / "snap3"), str(out))
        assert third.decoded == 1 and _new_rows(out, before) == {"unprocessed": 1}
        assert _rows(out)["jobs", 1] == ("unprocessed", 1) == _board(b)["jobs", 1]
        assert _rows(out) == _board(b)
        _adds_up(out)

        b.snapshot(tmp_path / "snap4")  # an idle board: nothing new
    before = _files(out)
    fourth = export.export(_no_spark, str(tmp_path / "snap4"), str(out))
    assert (fourth.decoded, fourth.spark, fourth.unchanged) == (0, False, False)
    assert _files(out) == before  # every file kept, hard-linked
    books = json.loads((out / "_msgboard.json").read_text())
    taken = json.loads((tmp_path / "snap4" / "snapshot.json").read_text())["taken_at_us"]
    assert books["snapshot"]["taken_at_us"] == taken
    assert [r["decoded"] for r in books["runs"]] == [1010, 1000, 1, 0]
    # The same snapshot again: decided from the books, no Spark either.
    assert export.export(_no_spark, str(tmp_path / "snap4"), str(out)).unchanged


def test_the_survey_sorts_what_changed(tmp_path: Path) -> None:
    """Given last night's waiting index and tonight's board, I expect the
    survey to name which waiting messages left (into history, or with no
    history record), changed, or are new, and the history past the mark;
    and a queue made again under its name to be a new generation."""
    out = tmp_path / "history"
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        b.create_queue(QueueSpec("none", max_history=0))
        b.create_queue(QueueSpec("again"))
        post(b, "jobs", [Message(tuple=("job", i)) for i in range(10)])
        post(b, "none", [Message(tuple=("n", i)) for i in range(3)])
        post(b, "again", [Message(tuple=("a", i)) for i in range(2)])
        leases = b.take_leased("jobs", max=2, lease=3600)  # seqs 1, 2 held
        b.snapshot(tmp_path / "snap1")
        night = changes.survey(str(tmp_path / "snap1"), str(out), None, False)
        assert night.full and night.spark
        os.makedirs(out)
        changes.write_index(str(out), night)
        marks = {name: {"id": q.qid, "next_seq": q.next_seq} for name, q in night.queues.items()}

        b.ack_leases("jobs", [leases[0].id])  # seq 1 into history
        b.ack_leases("jobs", [leases[1].id], nack=True)  # seq 2 changed
        seq2 = Pattern(templates=(template("job", 1),))
        assert b.read("jobs", seq2, timeout=30)  # back after the nack backoff
        b.take("jobs", max=3)  # seqs 2, 3, 4 (2 given back first)
        post(b, "jobs", [Message(tuple=("job", i)) for i in range(10, 12)])  # 11, 12
        post(b, "none", [Message(tuple=("n", i)) for i in range(3, 5)])  # 4, 5
        b.take("none", max=5)  # all five, leaving no history record
        b.delete_queue("again")
        b.create_queue(QueueSpec("again"))
        post(b, "again", [Message(tuple=("a2", 0))])
        b.snapshot(tmp_path / "snap2")

    class Books:
        queues = marks

    night = changes.survey(str(tmp_path / "snap2"), str(out), Books, False)
    assert not night.full
    jobs = night.queues["jobs"]

    def seqs(q: changes.Queue, section: str) -> list[int]:
        return [s for r in q.decode if r.section == section for s in range(r.lo, r.hi or 0)]

    assert seqs(jobs, "history") == [1, 2, 3, 4]  # left into history
    assert seqs(jobs, "unprocessed") == [11, 12]  # seq 2 changed, then taken: history
    assert list(jobs.drop_unprocessed) == [1, 2, 3, 4]
    assert (jobs.mark, jobs.next_seq, jobs.unrecorded) == (11, 13, 0)
    none = night.queues["none"]
    # 1-3 left the waiting section, 4-5 came and went since: no record of any.
    assert (none.rows, none.unrecorded, list(none.drop_unprocessed)) == (0, 5, [1, 2, 3])
    assert jobs.unrecorded == 0
    again = night.queues["again"]
    assert not again.same and again.mark == 1 and seqs(again, "unprocessed") == [1]


def test_the_waiting_walk_does_not_trust_the_count(tmp_path: Path) -> None:
    """Given a snapshot of three queues, I expect the survey's walk of the
    middle one to give its waiting seqs and checksums, and only its, in
    chunks of CHUNK, whether the count it is told (the queue's state) is
    right, too high (the next queue's keys follow) or too low."""
    with Board(tmp_path / "board", sync=False) as b:
        for name in ("a", "b", "c"):
            b.create_queue(QueueSpec(name))
            post(b, name, [Message(tuple=(name, i)) for i in range(23)])
        b.take("b", max=3)  # seqs 1-3 of b gone: 4..23 wait
        b.snapshot(tmp_path / "snap")
    from msgboard.lmdbstore import record
    from msgboard.lmdbstore.layout import KEY, QID, STATE
    from pyspark_msgboard.snapfile import opened

    with opened(str(tmp_path / "snap")) as (env, dbs), env.begin() as txn:
        qid = json.loads(bytes(txn.get(b"b", db=dbs["queues"])))["id"]
        _, count, _ = STATE.unpack(bytes(txn.get(QID.pack(qid), db=dbs["state"])))
        assert count == 20
        records = [txn.get(KEY.pack(qid, s), db=dbs["unprocessed"]) for s in range(4, 24)]
        crcs = [int.from_bytes(r[1 : record.HEADER], "big") for r in records]
        for told in (count, count + 7, count - 6, 0):
            for chunk in (changes.CHUNK, 6):
                old, changes.CHUNK = changes.CHUNK, chunk
                try:
                    got = list(changes._waiting(txn, dbs, qid, True, told))
                finally:
                    changes.CHUNK = old
                assert all(len(c) <= chunk for c in got)
                seqs = [int(s) for c in got for s in c["seq"]]
                assert seqs == list(range(4, 24)), (told, chunk)
                assert [int(x) for c in got for x in c["crc"]] == crcs, (told, chunk)


def _spark_free_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no Java at all: a command that needed Spark
    would fail in it, saying Spark needs Java."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK"))}
    env["JAVA_HOME"] = str(tmp_path / "no-java")
    env["PATH"] = os.path.dirname(sys.executable)
    return env


def _msgboard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MSGBOARD, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_nothing_to_do_needs_no_java(spark: SparkSession, tmp_path: Path) -> None:
    """Given a dataset that holds a snapshot, I expect `msgboard export` of
    the same snapshot to say nothing to do, and of an older one to refuse
    in one line, both with no Java on the machine (so no JVM was
    started); and `msgboard nightly`'s report step to see that its report
    shows the dataset already."""
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(tuple=(1,))])
        b.snapshot(tmp_path / "old")
        b.post("jobs", [Message(tuple=(2,))])
        b.snapshot(tmp_path / "snap")
    out = tmp_path / "history"
    export.export(spark, str(tmp_path / "snap"), str(out))
    env = _spark_free_env(tmp_path)
    same = _msgboard("export", str(tmp_path / "snap"), str(out), env=env)
    assert same.returncode == 0, same.stderr
    assert "nothing to do" in same.stdout and same.stderr == ""
    older = _msgboard("export", str(tmp_path / "old"), str(out), env=env)
    assert older.returncode == 1
    assert older.stderr.startswith("msgboard: FAILED_PRECONDITION: ")
    assert "was taken before" in older.stderr and len(older.stderr.splitlines()) == 1


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _java(pid: int) -> int | None:
    for kid in _children(pid):
        try:
            cmd = Path(f"/proc/{kid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"java" in cmd.split(b"\0")[0]:
            return kid
    return None


def test_a_jvm_killed_mid_export_is_one_line(tmp_path: Path) -> None:
    """Given `msgboard export` running in its own process, when its JVM is
    killed -9 once the export has begun writing, I expect exit 1, one line
    on stderr (`msgboard: UNAVAILABLE: …`, naming the Spark log), Spark's
    own logging in that log file and not on stderr, and no dataset: the
    run never swapped one in, and left nothing beside it."""
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        post(b, "jobs", [Message(tuple=("job", i), body=b"y" * 200) for i in range(20_000)])
        b.snapshot(tmp_path / "snap")
    out = tmp_path / "history"
    log = tmp_path / "spark.log"
    cmd = [MSGBOARD, "export", str(tmp_path / "snap"), str(out)]
    proc = subprocess.Popen(
        [*cmd, "--spark-log", str(log), "--master", "local[1]", "--local-rows", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        killed = None
        while time.monotonic() < deadline and proc.poll() is None and killed is None:
            # The new version (not the survey's scratch): the JVM has begun writing.
            if list(tmp_path.glob("history.partial-????????")):
                java = _java(proc.pid)
                try:
                    if java is not None:
                        os.kill(java, signal.SIGSTOP)  # frozen mid-write, then gone
                        os.kill(java, signal.SIGKILL)
                        killed = java
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        assert killed is not None, "the export's JVM was not found writing"
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("msgboard: UNAVAILABLE: Spark's JVM went away")
    assert str(log) in err and "Spark" in log.read_text()  # the JVM's own output went there
    assert not out.exists() and not list(tmp_path.glob("history.partial-*"))


def test_a_queue_made_again_is_a_generation_of_its_own(spark: SparkSession, tmp_path: Path) -> None:
    """Given a queue deleted and made again under its name between two
    nights (its seqs start again at 1), I expect the dataset to key its rows
    by queue id too, the books to keep the earlier generation apart with
    counts equal to the files', and the report to list the two apart."""
    from pyspark_msgboard import report

    out = tmp_path / "history"
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        post(b, "jobs", [Message(tuple=("old", i)) for i in range(5)])
        b.take("jobs", max=3)  # 1-3 history, 4-5 waiting
        b.snapshot(tmp_path / "snap1")
        export.export(spark, str(tmp_path / "snap1"), str(out))
        old = json.loads((out / "_msgboard.json").read_text())["queues"]["jobs"]["id"]
        b.delete_queue("jobs")
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        post(b, "jobs", [Message(tuple=("new", i)) for i in range(3)])
        b.take("jobs", max=1)  # 1 history, 2-3 waiting
        b.snapshot(tmp_path / "snap2")
    export.export(spark, str(tmp_path / "snap2"), str(out))
    t = ds.dataset(str(out), partitioning="hive").to_table(
        columns=["queue", "queue_id", "seq", "section"]
    )
    keys = sorted(zip(*(t[c].to_pylist() for c in t.column_names), strict=True))
    books = json.loads((out / "_msgboard.json").read_text())
    new = books["queues"]["jobs"]["id"]
    assert new != old
    assert keys == sorted(
        [("jobs", old, s, "history") for s in (1, 2, 3)]  # its waiting rows went with it
        + [("jobs", new, 1, "history"), ("jobs", new, 2, "unprocessed")]
        + [("jobs", new, 3, "unprocessed")]
    )
    assert (books["queues"]["jobs"]["history"], books["queues"]["jobs"]["unprocessed"]) == (1, 2)
    assert books["earlier"] == {
        f"jobs#{old}": {**books["earlier"][f"jobs#{old}"], "history": 3, "unprocessed": 0}
    }
    assert books["runs"][-1]["rows"] == t.num_rows == 6
    r = report.report(str(out), str(tmp_path / "report"))
    d = r.frames["deliveries"].set_index("queue")
    assert d.loc["jobs", "messages"] == 3 and d.loc["jobs", "unprocessed"] == 2
    assert d.loc[f"jobs (deleted, id {old})", "messages"] == 3
    assert r.figures["queues"] == 1 and r.figures["messages"] == 6
    assert (d.loc["jobs", "posted"], d.loc["jobs", "unrecorded"]) == (3, 0)


def test_each_way_spark_fails_is_one_error(tmp_path: Path) -> None:
    """Given the errors a dead JVM, a JVM that does not start and a full
    disk raise (as py4j, pyspark and the OS raise them), I expect each to
    come out of the Spark commands as one MsgboardError naming what
    happened and the log; any other error to pass as it is."""
    import errno

    from py4j.protocol import Py4JError, Py4JNetworkError
    from pyspark.errors import PySparkRuntimeError

    from msgboard.errors import FailedPrecondition, StoreFull, Unavailable
    from pyspark_msgboard.commands import failures

    log = str(tmp_path / "spark.log")
    gone = Py4JNetworkError("Answer from Java side is empty")
    wrapped = Py4JError("An error occurred while calling o42.parquet")
    wrapped.__cause__ = ConnectionResetError()
    cases = [
        (gone, Unavailable, "Spark's JVM went away"),
        (wrapped, Unavailable, "Spark's JVM went away"),
        (
            PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={}),
            FailedPrecondition,
            "did not start: check --driver-memory",
        ),
        (OSError(errno.ENOSPC, "No space left on device"), StoreFull, "disk full"),
        (RuntimeError("java.io.IOException: No space left on device"), StoreFull, "disk full"),
    ]
    for raised, kind, words in cases:
        with pytest.raises(kind, match=words) as caught, failures(log):
            raise raised
        assert "\n" not in str(caught.value)
        if kind is not StoreFull:
            assert log in str(caught.value)
    with pytest.raises(ZeroDivisionError), failures(log):
        raise ZeroDivisionError


def test_books_from_before_the_index_decode_the_waiting_section_once(tmp_path: Path) -> None:
    """Given a dataset written before the waiting index (no
    ``_msgboard/waiting``: its waiting seqs only in its unprocessed files),
    I expect the survey to take last night's waiting seqs from those files,
    decode every waiting message once (no checksums to compare), and drop
    those rows and the ones whose message left."""
    import pyarrow as pa

    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        post(b, "jobs", [Message(tuple=("job", i)) for i in range(6)])
        b.take("jobs", max=2)  # 1, 2 into history: they were waiting last night
        b.snapshot(tmp_path / "snap")
    from msgboard.lmdbstore import snapshot as manifest

    qid = manifest.load(str(tmp_path / "snap")).specs["jobs"]["id"]
    out = tmp_path / "history"
    files = out / "queue=jobs" / "section=unprocessed" / "day=2026-11-25"
    files.mkdir(parents=True)
    pq.write_table(pa.table({"seq": pa.array([1, 2, 3, 4], pa.int64())}), files / "part-0.parquet")

    class Books:
        queues = {"jobs": {"id": qid, "next_seq": 5}}

    jobs = changes.survey(str(tmp_path / "snap"), str(out), Books, False).queues["jobs"]
    decoded = {(r.section, s) for r in jobs.decode for s in range(r.lo, r.hi or 0)}
    assert decoded == {("history", 1), ("history", 2)} | {("unprocessed", s) for s in (3, 4, 5, 6)}
    assert list(jobs.drop_unprocessed) == [1, 2, 3, 4] and jobs.unrecorded == 0


def test_scheduled_messages_are_neither_unrecorded_nor_new_until_released(
    tmp_path: Path,
) -> None:
    """Given messages scheduled an hour ahead (and one due at t=100) beside
    waiting ones, I expect the survey to count them neither unrecorded nor
    new, so that posted = waiting + history + unrecorded + scheduled each
    night; and one released since the last night to be new (waiting), or,
    released and taken with no history record, unrecorded exactly once."""
    out = tmp_path / "history"
    hour = 3600 * 1_000_000
    store = DurableStore(tmp_path / "board", sync=False)

    def balanced(q: changes.Queue, unrecorded: int) -> None:
        with store.begin() as txn:
            c = txn.counts(q.name)
        assert q.next_seq - 1 == c.unprocessed + c.history + unrecorded + len(q.scheduled)
        assert len(q.scheduled) == c.scheduled and q.waiting == c.unprocessed

    try:
        with store.begin() as txn:
            txn.create_queue(QueueSpec("jobs", max_history=UNLIMITED), 0)
            txn.create_queue(QueueSpec("none", max_history=0), 0)
            txn.append("jobs", Message(tuple=("job", 1)), now=1)  # 1
            txn.schedule("jobs", Message(tuple=("job", 2), not_before=100), now=1)  # 2
            txn.schedule("jobs", Message(tuple=("job", 3), not_before=hour), now=1)  # 3
            txn.append("jobs", Message(tuple=("job", 4)), now=1)  # 4
            txn.schedule("none", Message(tuple=("n", 1), not_before=100), now=1)  # 1
        store.snapshot(str(tmp_path / "snap1"))
        night = changes.survey(str(tmp_path / "snap1"), str(out), None, False)
        jobs, none = night.queues["jobs"], night.queues["none"]
        assert (jobs.unrecorded, none.unrecorded) == (0, 0)
        assert (list(jobs.scheduled), jobs.unrecorded) == ([2, 3], 0)
        assert (list(none.scheduled), none.unrecorded) == ([1], 0)
        balanced(jobs, 0)
        balanced(none, 0)
        os.makedirs(out)
        changes.write_index(str(out), night)
        marks = {name: {"id": q.qid, "next_seq": q.next_seq} for name, q in night.queues.items()}

        with store.begin() as txn:
            assert txn.release("jobs", 2, 100) is not None  # waiting now: new
            assert txn.release("none", 1, 100) is not None
            txn.process("none", 1, 101, 0)  # taken, leaving no history record
            txn.schedule("jobs", Message(tuple=("job", 5), not_before=hour), now=101)  # 5
            txn.append("jobs", Message(tuple=("job", 6)), now=101)  # 6
        store.snapshot(str(tmp_path / "snap2"))
    finally:
        store.close()

    class Books:
        queues = marks

    night = changes.survey(str(tmp_path / "snap2"), str(out), Books, False)
    jobs, none = night.queues["jobs"], night.queues["none"]
    store = DurableStore(tmp_path / "board", sync=False)
    try:
        decoded = [(r.section, s) for r in jobs.decode for s in range(r.lo, r.hi or 0)]
        assert decoded == [("unprocessed", 2), ("unprocessed", 6)]
        assert list(jobs.drop_history) == []  # seq 2 never had a history row
        assert (list(jobs.scheduled), jobs.unrecorded) == ([3, 5], 0)
        balanced(jobs, 0)
        assert (list(none.scheduled), none.unrecorded, none.rows) == ([], 1, 0)
        balanced(none, 1)
    finally:
        store.close()
