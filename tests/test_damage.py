"""Damage is found and reported, never fatal, never silent (issue 23).

Given a stopped board of a few thousand messages in two queues, damaged on
a copy (``tests/sweep.py``): a page of each kind zeroed, the corruption
table's damages. I expect ``msgboard check`` never to die by a signal, and
a real server (a subprocess serving the copy over gRPC, read back by a
client) to serve the board intact, refuse it in one line saying what to do,
or serve what it can with the rest counted as damaged: never a crash, never
a message with other bytes than the clean board's, never a loss nobody
reports. ``judge`` holds those invariants, and is shown first to catch each
violation it looks for. ``bench/damage.py`` runs the full sweep.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.cli import main
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import DataFileDamaged, FailedPrecondition, NotFound, StoreDamaged
from msgboard.message import Section, now_us
from msgboard.spec import Disposition
from msgboard.testing import ServerThread
from tests import damage, sweep

# -- the judge catches what it looks for -------------------------------------

CLEAN: dict[str, Any] = {
    "queues": {
        "jobs": {"messages": {"unprocessed:1": "a", "unprocessed:2": "b"}, "read": {}},
    },
    "errors": [],
}


def served(**jobs: Any) -> dict[str, Any]:
    q = {"messages": {"unprocessed:1": "a", "unprocessed:2": "b"}, "damaged": 0, "read": {}}
    q.update(jobs)
    return {"queues": {"jobs": q}, "errors": []}


OK = sweep.Checked(1)


@pytest.mark.parametrize(
    ("outcome", "check", "broken"),
    [
        ({"crash": "SIGABRT"}, OK, "the server died by SIGABRT"),
        ({"hang": True}, OK, "the server hung"),
        (served(), sweep.Checked(None, "SIGABRT"), "check died by SIGABRT"),
        (served(), sweep.Checked(-6), "check exited -6"),
        ({"refused": "damaged\nsecond line"}, OK, "not in one line"),
        ({"refused": "damaged, nothing to do"}, OK, "saying what to do"),
        (served(messages={"unprocessed:1": "a", "unprocessed:2": "X"}), OK, "other bytes"),
        (served(messages={"unprocessed:1": "a", "unprocessed:7": "b"}), OK, "other bytes"),
        (served(read={"unprocessed:2": "X"}), OK, "other bytes"),
        (served(messages={"unprocessed:1": "a"}), OK, "1 message(s) not served, none"),
        ({"queues": {}, "errors": []}, OK, "queue 'jobs' is gone"),
        (served(messages={"unprocessed:1": "a"}, damaged=1), sweep.Checked(0), "check says clean"),
        ({**served(), "errors": ["take jobs: INTERNAL: boom"]}, OK, "must be DATA_LOSS"),
    ],
)
def test_the_judge_catches_each_violation(
    outcome: dict[str, Any], check: sweep.Checked, broken: str
) -> None:
    verdict = sweep.judge(CLEAN, outcome, check)
    assert any(broken in v for v in verdict.violations), verdict


def test_the_judge_passes_what_is_allowed() -> None:
    # Intact; refused in one line naming check; a loss that is counted.
    assert sweep.judge(CLEAN, served(), sweep.Checked(0)) == sweep.Verdict("intact")
    line = "DIR/data.mdb is damaged: page 7; msgboard check DIR lists them"
    assert sweep.judge(CLEAN, {"refused": line}, OK) == sweep.Verdict("refused")
    lost = served(messages={"unprocessed:1": "a"}, damaged=1)
    assert sweep.judge(CLEAN, lost, OK) == sweep.Verdict("counted")


# -- the page sweep, sampled -------------------------------------------------


@pytest.fixture(scope="module")
def board(sweep_board: Path) -> Path:
    return sweep_board


@pytest.fixture(scope="module")
def pages(board: Path) -> dict[int, str]:
    return sweep.kinds(board)


@pytest.fixture(scope="module")
def clean(board: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = sweep.run_serve(sweep.copy(board, tmp_path_factory.mktemp("clean") / "b"))
    assert not out["errors"] and set(out["queues"]) == {"jobs", "logs"}, out
    assert len(out["queues"]["jobs"]["messages"]) == 1500
    return out


KINDS = [
    "meta",
    "free leaf",
    "main leaf",
    "queues leaf",
    "state leaf",
    "meta leaf",
    "times leaf",
    "unprocessed branch",
    "unprocessed leaf",
    "history leaf",
    "index branch",
    "index leaf",
    "index(dups) leaf",
    "unused",
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_zeroed_page_of_each_kind(
    kind: str, board: Path, pages: dict[int, str], clean: dict[str, Any], tmp_path: Path
) -> None:
    # Given one page of this kind zeroed (a seeded pick among them)
    pick = sweep.pick({p: k for p, k in pages.items() if k == kind}, 1, seed=23)
    assert pick, f"the board has no {kind} page: {sorted(set(pages.values()))}"
    copy = sweep.copy(board, tmp_path / "b")
    sweep.zero(copy, pick[0])
    # When check and a server meet it
    checked, verdict = sweep.run_check(copy), None
    verdict = sweep.judge(clean, sweep.run_serve(copy), checked)
    # I expect no invariant broken; a used page is never served as intact
    # with check saying clean
    assert not verdict.violations, (pick, checked.lines[:5], verdict)
    if kind == "unused":
        assert verdict.outcome == "intact"
    else:
        assert checked.rc == 1 and verdict.outcome == "refused", (checked.lines[:5], verdict)


# -- the corruption table ----------------------------------------------------


#: The table's rows but the zeroed tree pages, which the sampled sweep
#: above covers (the full table runs in bench/damage.py).
ROWS = [row for row in sweep.TABLE if not row[0].endswith(("leaf zeroed", "branch zeroed"))]
ROWS = [row for row in ROWS if "page zeroed" not in row[0] or "meta" in row[0]]


@pytest.mark.parametrize(("name", "damage", "allowed"), ROWS, ids=[row[0] for row in ROWS])
def test_the_corruption_table(
    name: str,
    damage: Any,
    allowed: set[str],
    board: Path,
    pages: dict[int, str],
    clean: dict[str, Any],
    tmp_path: Path,
) -> None:
    copy = sweep.copy(board, tmp_path / "b")
    damage(copy, pages)
    checked = sweep.run_check(copy)
    verdict = sweep.judge(clean, sweep.run_serve(copy), checked)
    assert not verdict.violations, (checked.lines[:8], verdict)
    assert verdict.outcome in allowed, verdict
    assert checked.rc == 1, checked.lines[:8]  # every damage here is reported by check


# -- the board's own records: marker, sidecar, --init ------------------------


def test_a_lost_data_file_is_refused_and_init_makes_a_new_board(tmp_path: Path) -> None:
    path = tmp_path / "board"
    Board(path).close()
    (path / "data.mdb").unlink()
    with pytest.raises(DataFileDamaged, match=r"held a board .* data.mdb is missing.*--init"):
        Board(path)
    with Board(path, init=True) as b:
        assert b.list_queues() == []
    Board(path).close()  # the new board is a board: no --init needed


def test_a_key_whose_seq_is_damaged_is_named_by_its_place(
    board: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = sweep.copy(board, tmp_path / "b")
    sweep.flip_key(copy, 1, 874)  # the key now reads seq 874 + 2**32
    with Board(copy) as b:
        seqs = [m.seq for m in b.browse("jobs", section=Section.UNPROCESSED, limit=1000).messages]
        assert 874 not in seqs and 873 in seqs
        assert {q.name: q.damaged for q in b.stats().queues}["jobs"] >= 1
    assert "queue 'jobs' the record after seq 873: the stored record is damaged" in caplog.text
    assert str(874 + 2**32) not in caplog.text


def test_a_walk_that_ends_short_of_the_counters_is_counted_and_logged(
    board: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the last record of logs (qid 2) under a key whose queue id lost
    # a bit (qid 3): it sorts past the queue's end
    copy = sweep.copy(board, tmp_path / "b")
    damage.flip(copy, damage.key(2, 900), offset=3)
    with Board(copy) as b:
        # When whole walks of the queue end one short of its counters
        for _ in range(2):
            assert len(b.browse("logs", section=Section.UNPROCESSED, limit=1000).messages) == 899
        # I expect the gap counted and logged once
        assert {q.name: q.damaged for q in b.stats().queues}["logs"] == 1
    assert caplog.text.count("found 899 of the 900 records its counters say") == 1


def test_a_stray_key_inside_a_queue_is_walked_over_and_named_by_place(
    board: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given logs seq 500 under a key of queue id 3, between seqs 499 and 501
    copy = sweep.copy(board, tmp_path / "b")
    damage.flip(copy, damage.key(2, 500), offset=3)
    with Board(copy) as b:
        # When the queue is walked, I expect the rest of it served and the
        # one record counted as damaged, named by its place
        page = b.browse("logs", section=Section.UNPROCESSED, limit=1000)
        assert [m.seq for m in page.messages] == [s for s in range(1, 901) if s != 500]
        assert {q.name: q.damaged for q in b.stats().queues}["logs"] == 1
    assert "queue 'logs' seq 500: the stored record is damaged" in caplog.text


def test_damage_met_while_serving_is_data_loss_for_that_call_only(
    board: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a served board whose unprocessed leaves of logs (where posts to
    # logs go) are zeroed under it
    copy = sweep.copy(board, tmp_path / "b")
    with Board(copy) as b:
        for pgno in sweep.leaves_of(copy, "unprocessed leaf", 2):
            sweep.zero(copy, pgno)
        # When a post to logs meets it
        with pytest.raises(StoreDamaged) as e:
            b.post("logs", [Message(tuple=("log", 1), body=b"after")])
        # I expect DATA_LOSS naming the queue, logged; and the rest served
        assert (e.value.code, e.value.queue) == ("DATA_LOSS", "logs")
        assert "LMDB met damage in queue 'logs'" in caplog.text
        assert b.post("jobs", [Message(tuple=("job", 1, "x"), body=b"after")])
        assert b.take("jobs")


# -- repair ------------------------------------------------------------------


def test_check_repair_sets_the_damage_aside_and_the_rest_serves(
    board: Path, pages: dict[int, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a board with a zeroed unprocessed leaf of jobs and a damaged record of logs
    copy = sweep.copy(board, tmp_path / "b")
    leaf = min(p for p, k in pages.items() if k == "unprocessed leaf")
    sweep.zero(copy, leaf)
    damage.flip(copy, sweep.body_of("logs", 7))
    with pytest.raises(DataFileDamaged):
        Board(copy)
    # When it is repaired offline
    assert main(["check", "--repair", str(copy)]) == 1
    out = capsys.readouterr().out
    # I expect the damaged file kept, the losses named (never "clean"), and
    # the board served with the damage in $damaged: the lost range, and the
    # record's raw bytes
    assert re.search(r"lost: queue 'jobs' waiting: \d+ of the 1,000 records", out), out
    assert "unprocessed seqs" in out and "lost: queue 'logs' waiting: 1 of the 900" in out
    assert out.rstrip().endswith("not whole: the lost, restored and set-aside lines above say what")
    assert list(copy.glob("data.mdb.damaged-*"))
    with Board(copy) as b:
        aside = b.browse("$damaged", limit=100).messages
        assert {m.headers.get("db", "lost") for m in aside} == {"unprocessed", "lost"}
        record = next(m for m in aside if "db" in m.headers)
        assert record.headers["queue"] == "logs" and record.headers["after_seq"] == "7"
        assert sweep.body_of("logs", 7)[:7] not in record.body  # one bit flipped
        logs = b.get_queue("logs")
        assert (logs.unprocessed, logs.next_seq) == (899, 901)
        jobs = b.get_queue("jobs")
        assert jobs.unprocessed < 1000 and jobs.next_seq == 1501
        pattern = Pattern(templates=(template("log", int),))
        assert b.take("logs", pattern)  # the rebuilt index serves


def test_an_admin_drops_a_damaged_record_through_the_board(board: Path, tmp_path: Path) -> None:
    # Given a served board with a record of logs that fails its check (seq
    # 8) and one of jobs whose key is damaged too (seq 874, named by place)
    copy = sweep.copy(board, tmp_path / "b")
    damage.flip(copy, sweep.body_of("logs", 7))
    sweep.flip_key(copy, 1, 874)
    server = ServerThread(copy).start()
    try:
        with Client(server.address, timeout=30) as c:
            # When an admin drops them, by seq and by place
            with pytest.raises(FailedPrecondition, match="passes its check"):
                c.drop_damaged("logs", 9)
            assert c.drop_damaged("logs", 8) == 8
            assert c.drop_damaged("jobs", 873, after=True) == 874 + 2**32
            with pytest.raises(NotFound):
                c.drop_damaged("jobs", 873, after=True)
            # I expect the counters to follow and every walk whole again
            assert c.get_queue("logs").unprocessed == 899
            assert c.get_queue("jobs").unprocessed == 999
            got = c.browse("logs", limit=1000, section="unprocessed").messages
            assert len(got) == 899 and 8 not in [m.seq for m in got]
    finally:
        server.stop()


def test_check_beside_a_live_board_that_writes_finds_nothing(tmp_path: Path) -> None:
    # Given a board that posts and takes all the while (LMDB frees and
    # reuses pages under check's walk)
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("churn", max_history=0))
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                b.post("churn", [Message(tuple=("c", i), body=b"x" * 300) for i in range(200)])
                b.take("churn", max=150)

        t = threading.Thread(target=churn)
        t.start()
        try:
            # When check runs beside it (as an operator would: its own
            # process), I expect it clean every time
            for _ in range(4):
                checked = sweep.run_check(path)
                assert checked.rc == 0, checked.lines
        finally:
            stop.set()
            t.join(60)


def test_a_rollback_is_refused_and_served_when_accepted(
    board: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an older data.mdb put back (5 commits behind the board's last)
    copy = sweep.copy(board, tmp_path / "b")
    sweep.older_copy(copy)
    # I expect it refused, saying by how much, then served once accepted
    # (logged), and from then on the board's own again
    with pytest.raises(DataFileDamaged, match=r"is 5 commit\(s\) behind .* --accept-rollback"):
        Board(copy)
    with Board(copy, accept_rollback=True) as b:
        assert b.get_queue("logs").unprocessed == 900
    assert "5 commit(s) behind" in caplog.text and "accepted" in caplog.text
    Board(copy).close()
    # A board that commits without fsync may lose its last commits in a
    # machine crash: behind is a warning there, not a refusal
    sweep.older_copy(copy)
    with Board(copy, sync=False) as b:
        assert b.get_queue("logs").unprocessed == 900


def test_check_repair_keeps_scheduled_messages_and_idempotency_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a board with a scheduled, keyed message and a damaged record
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("q"))
        b.post("q", [Message(body=b"BODY-%03d" % i) for i in range(20)])
        b.post("q", [Message(body=b"LATER", not_before=now_us() + 2_000_000, key="k1")])
    damage.flip(path, b"BODY-007")
    # When it is repaired (1: a record was lost, set aside)
    assert main(["check", "--repair", str(path)]) == 1
    # I expect the scheduled message due as before, and its key still held
    with Board(path) as b:
        q = b.get_queue("q")
        assert (q.unprocessed, q.scheduled, q.next_seq) == (19, 1, 22)
        receipt = b.post_receipts("q", [Message(body=b"again", key="k1")])
        assert receipt[0].disposition is Disposition.DUPLICATE and receipt[0].seq == 21
        deadline = time.monotonic() + 60
        while b.get_queue("q").scheduled and time.monotonic() < deadline:
            time.sleep(0.1)
        assert b"LATER" in [m.body for m in b.take("q", max=100)]


def test_a_dropped_damaged_record_ends_its_key_and_may_be_scheduled(tmp_path: Path) -> None:
    # Given keyed messages, each damaged: one waiting and one scheduled an
    # hour ahead on a queue without a dedup window, one waiting on a queue
    # with an hour's window
    from msgboard.lmdbstore.check import check

    path = tmp_path / "board"
    hour = 3600 * 1_000_000
    with Board(path, sync=False) as b:
        b.create_queue(QueueSpec("q", dedup_window=0))
        b.create_queue(QueueSpec("w", dedup_window=hour))
        b.post("q", [Message(body=b"WAIT-1", key="k1")])
        b.post("q", [Message(body=b"SOON-2", key="k2", not_before=now_us() + hour)])
        b.post("w", [Message(body=b"WIND-1", key="k3")])
    for body in (b"WAIT-1", b"SOON-2", b"WIND-1"):
        damage.flip(path, body)
    with Board(path, sync=False) as b:
        # When an admin drops them
        assert b.drop_damaged("q", 1) == (1, Section.UNPROCESSED)
        assert b.drop_damaged("q", 2) == (2, Section.SCHEDULED)
        assert b.drop_damaged("w", 1) == (1, Section.UNPROCESSED)
        # I expect the scheduled count to follow, the keys of q free at
        # once (no window), and k3 held through its window as when a
        # message leaves: answered with the seq it had
        q = b.get_queue("q")
        assert (q.unprocessed, q.scheduled, q.next_seq) == (0, 0, 3)
        again = b.post_receipts("q", [Message(body=b"a", key="k1"), Message(body=b"b", key="k2")])
        assert [(r.disposition, r.seq) for r in again] == [
            (Disposition.STORED, 3),
            (Disposition.STORED, 4),
        ]
        held = b.post_receipts("w", [Message(body=b"c", key="k3")])
        assert [(r.disposition, r.seq) for r in held] == [(Disposition.DUPLICATE, 1)]
    # and the board whole: no key held by a seq that is gone, no due entry
    # without its record, the counters right, k3 filed under its end
    # nor index entries of a dropped seq
    report = check(path)
    assert report.ok, "\n".join(report.lines())
