"""The dataset is exact night after night at 10^5 messages (issue 41):
every row and every column of the export equals the board's own message at
the snapshot, after night 1, after a night that changed about 1% of the
messages, and after a night whose export was killed -9 half-way and run
again. The nights here are small enough to run in this process (no Spark:
``export.LOCAL_ROWS``); ``test_spark_changes.py`` runs the Spark tasks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.engine import Board
from msgboard.results import Start
from msgboard.spec import UNLIMITED, Op, SelectorSpec
from tests.sparking import exact
from tests.sparking import post as _post

pytest.importorskip("pyarrow")
# At a load of 30 to 40 on the 2 cores, the three nights took 800 s.
pytestmark = pytest.mark.timeout(1800)

from pyspark_msgboard import export  # noqa: E402

#: Messages on the board at night 1.
N = 100_000
MSGBOARD = os.path.join(os.path.dirname(sys.executable), "msgboard")
Row = tuple[Any, ...]


def _no_spark() -> Any:
    raise AssertionError("a night of this size needs no Spark")


def _us(t: datetime | None) -> int | None:
    return None if t is None else round(t.replace(tzinfo=UTC).timestamp() * 1e6)


def _value(v: dict[str, Any]) -> Any:
    return None if v["type"] == "null" else v[v["type"]]


def dataset_rows(out: Path) -> list[Row]:
    """Every row of the dataset, every column, as plain values (each
    row's ``queue_id`` checked against the books')."""
    import json

    ids = {
        n: q["id"] for n, q in json.loads((out / "_msgboard.json").read_text())["queues"].items()
    }
    t = ds.dataset(str(out), partitioning="hive").to_table()
    rows = []
    for r in t.to_pylist():
        assert r["queue_id"] == ids[r["queue"]], r
        rows.append(
            (
                r["queue"],
                r["seq"],
                r["section"],
                r["address"],
                r["priority"],
                dict(r["headers"]),
                r["reply_to"],
                _us(r["expires_at"]),
                exact([_value(v) for v in r["tuple"]]),
                [v["type"] for v in r["tuple"]],
                r["content_type"],
                bytes(r["body"]),
                _us(r["posted_at"]),
                _us(r["processed_at"]),
                r["delivery_count"],
                (r["exit"], r["exit_reason"], r["exit_queue"], r["exit_selector"], r["exit_seq"]),
            )
        )
    return sorted(rows, key=lambda r: (r[0], r[1]))


_TYPES = {bool: "bool", int: "int", float: "float", str: "string", bytes: "bytes"}


def board_rows(b: Board) -> list[Row]:
    """Every message the board holds now, both sections, as the dataset
    should hold it."""
    rows = []
    for q in b.list_queues():
        seq = 0
        while True:
            page = b.browse(q.spec.name, Start.SEQ, seq=seq, limit=10_000)
            for m in page.messages:
                rows.append(
                    (
                        m.queue,
                        m.seq,
                        m.section.value,
                        m.address,
                        m.priority,
                        dict(m.headers),
                        m.reply_to,
                        m.expires_at or None,
                        exact(list(m.tuple)),
                        [_TYPES.get(type(v), "null") for v in m.tuple],
                        m.content_type,
                        m.body,
                        m.posted_at,
                        m.processed_at or None,
                        m.delivery_count,
                        (
                            m.exit.kind.value,
                            m.exit.reason or None,
                            m.exit.queue or None,
                            m.exit.selector or None,
                            m.exit.seq or None,
                        )
                        if m.exit
                        else (None,) * 5,
                    )
                )
            if not page.next_seq:
                break
            seq = page.next_seq
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _messages(n: int, start: int) -> list[Message]:
    return [
        Message(
            tuple=(("job", "img", "mail")[i % 3], i, i / 7, i % 5 == 0, b"\x00" * (i % 3)),
            address=f"a.{i % 11}",
            priority=i % 4,
            headers={"n": str(i)} if i % 2 else {},
            body=b"b%d" % i,
        )
        for i in range(start, start + n)
    ]


def _take(b: Board, queue: str, n: int) -> None:
    """Takes the ``n`` oldest waiting messages, in calls of 10,000 at most."""
    while n > 0:
        n -= len(b.take(queue, max=min(n, 10_000)))


def _day(b: Board, start: int, n: int) -> None:
    """A day's traffic of ``n`` messages on ``jobs``: posted, taken in
    order, some leased and nacked, some moved to ``moved`` by a MOVE
    selector, a few deleted by an operator."""
    _post(b, "jobs", _messages(n, start))
    _take(b, "jobs", n // 2)
    for lease in b.take_leased("jobs", max=n // 20, lease=60):
        b.ack_leases("jobs", [lease.id], nack=lease.message.seq % 2 == 0)
    _post(b, "orders", [Message(tuple=("order", i)) for i in range(start, start + n // 10)])
    _take(b, "orders", n // 20)


def test_every_row_and_column_is_exact_night_after_night(tmp_path: Path) -> None:
    """Given a board of 10^5 messages (takes, leases acked and nacked, a
    MOVE selector, dead letters by max-deliveries, a DELETE selector), I
    expect the dataset after night 1 to equal it row for row and column for
    column; after a day that changed about 1% of it, the night to decode
    only that and the dataset to equal the board again; and after an
    export killed -9 half-way, the dataset as it was, and the same export
    run again to make it equal the board."""
    out = tmp_path / "history"
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("graveyard", max_history=UNLIMITED))
        b.create_queue(
            QueueSpec("jobs", max_history=UNLIMITED, dead_letter="graveyard", max_deliveries=2)
        )
        b.create_queue(QueueSpec("moved", max_history=UNLIMITED))
        b.create_queue(QueueSpec("orders", max_history=UNLIMITED))
        b.create_selector(
            SelectorSpec("orders", Pattern(templates=(template("order", 7),)), destination="moved")
        )
        b.create_selector(
            SelectorSpec("orders", Pattern(templates=(template("order", 8),)), op=Op.DELETE)
        )
        _day(b, 0, N * 10 // 11)
        b.snapshot(tmp_path / "snap1")
        night1 = board_rows(b)
        assert len(night1) >= N
        first = export.export(_no_spark, str(tmp_path / "snap1"), str(out))
        assert first.decoded == len(night1) and not first.spark
        assert dataset_rows(out) == night1

        _day(b, 10_000_000, N // 110)  # about 1% of the messages
        b.snapshot(tmp_path / "snap2")
        night2 = board_rows(b)
        second = export.export(_no_spark, str(tmp_path / "snap2"), str(out))
        assert 0 < second.decoded <= len(night2) // 50
        assert dataset_rows(out) == night2

        _day(b, 20_000_000, N // 2)  # big enough to be caught half-way
        b.snapshot(tmp_path / "snap3")
        night3 = board_rows(b)

    cmd = [MSGBOARD, "export", str(tmp_path / "snap3"), str(out), "--spark-log", "-"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if list(tmp_path.glob("history.partial-????????")):  # writing the new version
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the export ended before it could be killed"
    assert dataset_rows(out) == night2  # as it was
    third = export.export(_no_spark, str(tmp_path / "snap3"), str(out))
    assert not third.unchanged and third.decoded > 0
    assert dataset_rows(out) == night3
    assert not list(tmp_path.glob("history.partial-*"))


def test_a_message_is_followed_across_a_move(client: Any, tmp_path: Path) -> None:
    """Given a served board where a MOVE selector moves one message and an
    admin's MoveMessages another, I expect each source row of the night's
    dataset to name the destination queue, the seq it has there, what
    moved it (reason ``selector`` with the selector's id, or ``admin``),
    and that row there to be the same message (its tuple), both after the
    night that saw the moves and after a later one."""
    for name in ("inbox", "urgent", "parked"):
        client.create_queue(name, max_history=UNLIMITED)
    client.post("urgent", ("filler", 0))  # the destinations' seqs are not inbox's
    client.post("parked", ("filler", 0))
    client.post("parked", ("filler", 1))
    for i in range(5):
        client.post("inbox", ("job", i), key=f"k{i}")
    out = tmp_path / "history"
    client.snapshot(str(tmp_path / "snap1"))
    export.export(_no_spark, str(tmp_path / "snap1"), str(out))  # night 1: nothing moved yet
    s = client.create_selector("inbox", to="urgent", templates=[template("job", 3)])
    [moved] = client.move_messages("inbox", "parked", seqs=[2])
    assert (moved.seq, moved.queue, moved.new_seq) == (2, "parked", 3)
    client.snapshot(str(tmp_path / "snap2"))
    export.export(_no_spark, str(tmp_path / "snap2"), str(out))
    for night in (2, 3):
        if night == 3:  # a later night keeps the rows as they were
            client.post("inbox", ("job", 9))
            client.snapshot(str(tmp_path / "snap3"))
            export.export(_no_spark, str(tmp_path / "snap3"), str(out))
        t = ds.dataset(str(out), partitioning="hive", schema=export.schema()).to_table().to_pylist()
        rows = {(r["queue"], r["seq"]): r for r in t}
        for seq, to, at, why, by in (
            (4, "urgent", 2, "selector", s.id),
            (2, "parked", 3, "admin", None),
        ):
            src = rows["inbox", seq]
            assert src["section"] == "history" and src["exit"] == "moved", src
            got = (src["exit_queue"], src["exit_seq"], src["exit_reason"], src["exit_selector"])
            assert got == (to, at, why, by), night
            dst = rows[src["exit_queue"], src["exit_seq"]]
            assert dst["tuple"] == src["tuple"] and dst["section"] == "unprocessed"
        waiting = [r for r in t if r["exit"] is None]
        assert all(r["exit_seq"] is None and r["exit_selector"] is None for r in waiting)
