"""Nothing stored is lost or mangled unseen: one board per data directory,
records that carry their checksum, data files checked before they are
mapped, and ``msgboard check`` (issue 11, sections 1 and 2).

Boards are damaged on purpose through ``tests/damage.py``: bits flipped in
``data.mdb``, a record put under another key, index entries and counters
changed behind the board's back, files cut short.
"""

from __future__ import annotations

import logging
import os
import random
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from msgboard import cli
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import (
    DataFileDamaged,
    DataLoss,
    DirectoryLocked,
    RecordDamaged,
    StoreError,
)
from msgboard.lmdbstore import DurableStore, datafile, record
from msgboard.lmdbstore.check import check
from msgboard.lmdbstore.pages import DB, Tree
from msgboard.lmdbstore.verify import verify
from msgboard.message import Message, Section
from msgboard.results import Start
from msgboard.spec import UNLIMITED, QueueSpec
from msgboard.testing import ServerProcess, ServerThread
from tests import damage


def body(i: int) -> bytes:
    """A body that names its message, to find it in data.mdb."""
    return b"BODY-%04d-" % i + b"x" * 40


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A closed board: queue "jobs" (qid 1) with seqs 1-10 posted, seq 1
    taken into history."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        b.post("jobs", [Message(tuple=("job", i), body=body(i)) for i in range(1, 11)])
        assert [m.seq for m in b.take("jobs")] == [1]
    return path


def serve(path: Path) -> subprocess.CompletedProcess[str]:
    """``msgboard serve`` on ``path``, expected to exit at once."""
    return subprocess.run(
        [sys.executable, "-m", "msgboard", "serve", "--data", str(path), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_cli(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = cli.main(["check", str(path)])
    return rc, capsys.readouterr().out


# -- one board per data directory --------------------------------------------


def test_a_second_server_on_one_directory_exits_with_one_line(tmp_path: Path) -> None:
    """Given a server on a directory, when I start a second on it, I expect
    it to exit at once, non-zero, with one line naming the directory and the
    first server's PID, and the first to carry on."""
    path = tmp_path / "board"
    first = ServerProcess(path)
    try:
        second = serve(path)
        assert second.returncode != 0
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert str(path) in lines[0] and f"process {first.proc.pid}" in lines[0]
        with Client(first.address) as c:
            c.create_queue("q")
            assert c.post("q", ("still",)) == 1
    finally:
        assert first.stop() == 0


def test_an_embedded_board_in_another_process_is_refused(tmp_path: Path) -> None:
    """Given a board open in this process, when a child process opens an
    embedded Board on the same directory, I expect DirectoryLocked there,
    and here too for a second store in the same process."""
    path = tmp_path / "board"
    with Board(path):
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\n"
                "from msgboard.engine import Board\n"
                "from msgboard.errors import DirectoryLocked\n"
                "try:\n"
                f"    Board({str(path)!r})\n"
                "except DirectoryLocked as e:\n"
                "    print(e)\n"
                "    sys.exit(3)\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode == 3, child.stderr
        assert f"process {os.getpid()}" in child.stdout
        with pytest.raises(DirectoryLocked, match=str(path)):
            DurableStore(path)
    DurableStore(path).close()  # released with the board


def test_after_kill_9_a_new_server_starts(tmp_path: Path) -> None:
    """Given a server killed with SIGKILL (no chance to clean up), I expect a
    new server to start on its directory at once, with what was posted."""
    path = tmp_path / "board"
    first = ServerProcess(path)
    with Client(first.address) as c:
        c.create_queue("q")
        c.post("q", ("kept",))
    first.kill()
    assert (path / "msgboard.lock").exists()  # left behind, but not held
    second = ServerProcess(path)
    try:
        with Client(second.address) as c:
            assert [m.tuple for m in c.read("q")] == [("kept",)]
    finally:
        assert second.stop() == 0


def test_a_new_data_directory_is_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "board"
    DurableStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE((path / "data.mdb").stat().st_mode) & 0o077 == 0


def test_read_only_openers_take_no_lock(filled: Path) -> None:
    """Given a board open on a directory, I expect msgboard check and the
    snapshot reader, in other processes, to read it beside the board."""
    reader = "from pyspark_msgboard import snapshot; snapshot.check({!r})"
    with Board(filled) as b:
        for cmd in (["-m", "msgboard", "check"], ["-c", reader.format(str(filled))]):
            run = subprocess.run(
                [sys.executable, *cmd, str(filled)], capture_output=True, text=True, timeout=120
            )
            assert run.returncode == 0, run.stdout + run.stderr
        assert b.post("jobs", [Message()]) == [11]


# -- checksums ---------------------------------------------------------------


def test_records_are_sealed_with_a_crc32c_of_key_and_payload() -> None:
    key = damage.key(1, 7)
    sealed = record.seal(key, b"payload")
    assert record.unseal(key, sealed) == b"payload"
    grown = record.append(sealed, b"+more")
    assert grown == record.seal(key, b"payload+more")
    for bad, why in [
        (sealed[:4], "shorter than"),
        (b"\x02" + sealed[1:], "unknown record format 2"),
        (sealed[:-1] + b"X", "checksum mismatch"),
    ]:
        with pytest.raises(record.Damaged, match=why):
            record.unseal(key, bad)
    with pytest.raises(record.Damaged, match="checksum mismatch"):
        record.unseal(damage.key(1, 8), sealed)  # the same bytes under another seq


def test_a_flipped_byte_is_skipped_logged_and_counted(
    filled: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a bit flipped in the body of seq 4 and in history's seq 1, when
    I browse, read, take and subscribe, I expect every other message served
    whole, the damaged ones skipped, a DATA_LOSS log line naming queue and
    seq, and Stats counting them; the queue stays usable."""
    damage.flip(filled, b"BODY-0004")
    damage.flip(filled, b"BODY-0001")
    server = ServerThread(filled).start()
    try:
        with caplog.at_level(logging.ERROR), Client(server.address) as c:
            page = c.browse("jobs", limit=100)
            assert [m.seq for m in page.messages] == [2, 3, 5, 6, 7, 8, 9, 10]
            assert all(m.body == body(m.seq) for m in page.messages)
            assert [m.seq for m in c.read("jobs", max=3)] == [2, 3, 5]
            assert [m.seq for m in c.take("jobs", max=3)] == [2, 3, 5]
            with c.subscribe("jobs", credit=10) as sub:
                got = []
                for d in sub:
                    got.append(d.message.seq)
                    sub.ack(d)
                    if len(got) == 5:
                        break
            assert got == [6, 7, 8, 9, 10]
            [q] = c.stats("jobs").queues
            assert q.damaged == 2 and q.unprocessed == 1  # seq 4 is still there, unread
            assert c.post("jobs", ("after",)) == 11
            assert [m.seq for m in c.take("jobs")] == [11]
        assert "DATA_LOSS: queue 'jobs' seq 4" in caplog.text
        assert "DATA_LOSS: queue 'jobs' seq 1" in caplog.text
    finally:
        server.stop()


def test_fetching_a_damaged_record_is_data_loss(filled: Path) -> None:
    damage.flip(filled, b"BODY-0004")
    s = DurableStore(filled)
    try:
        with s.begin() as txn:
            assert txn.fetch("jobs", 3) is not None
            with pytest.raises(RecordDamaged, match=r"queue 'jobs' seq 4: .*checksum") as e:
                txn.fetch("jobs", 4)
            assert isinstance(e.value, DataLoss) and e.value.code == "DATA_LOSS"
            assert (e.value.queue, e.value.seq) == ("jobs", 4)
            # Processing it (without the message in hand) refuses and keeps it.
            with pytest.raises(RecordDamaged):
                txn.process("jobs", 4, now=1, max_history=UNLIMITED)
            assert txn.counts("jobs").unprocessed == 9
        assert s.damaged("jobs") == 0  # asked for, not met on a walk
    finally:
        s.close()


def test_a_record_under_another_key_is_damaged(filled: Path) -> None:
    """Given seq 3's record copied over seq 5's (as a damaged page might
    show it), I expect seq 5 reported, not served as seq 3's message."""
    damage.put(
        filled,
        b"unprocessed",
        damage.key(1, 5),
        damage.get(filled, b"unprocessed", damage.key(1, 3)),
    )
    with Board(filled) as b:
        assert [m.seq for m in b.read("jobs", max=10)] == [2, 3, 4, 6, 7, 8, 9, 10]
        assert b.stats("jobs").queues[0].damaged == 1


def test_a_damaged_last_record_does_not_stop_posting(filled: Path) -> None:
    """Given the queue's last record damaged, I expect a post to get the
    next seq and a posted_at not before the damaged one's second."""
    damage.flip(filled, b"BODY-0010")
    with Board(filled) as b:
        [last] = b.browse("jobs", Start.LATEST, reverse=True, limit=1).messages
        assert last.seq == 9
        assert b.post("jobs", [Message()]) == [11]
        [new] = b.browse("jobs", Start.LATEST, reverse=True, limit=1).messages
        assert new.seq == 11 and new.posted_at >= last.posted_at


# -- schema upgrade ------------------------------------------------------------


def test_a_schema_2_directory_is_sealed_once_when_opened(
    filled: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a schema-2 board (records without checksums), when I open it, I
    expect one log line, every record sealed, schema 4 on disk, and the
    board whole; a second open upgrades nothing."""
    damage.downgrade(filled, b"2")
    assert check(filled).notes == ["schema 2 has no checksums; opening it as a board upgrades it"]
    with caplog.at_level(logging.WARNING, logger="msgboard.lmdbstore.upgrade"):
        DurableStore(filled).close()
        assert "upgraded schema 2 to 4: indexed 0 unprocessed messages, sealed 10 records" in (
            caplog.text
        )
        caplog.clear()
        with Board(filled) as b:
            assert [m.body for m in b.read("jobs", max=10)] == [body(i) for i in range(2, 11)]
            assert [m.seq for m in b.browse("jobs", section=Section.HISTORY).messages] == [1]
        assert "upgraded" not in caplog.text
    report = check(filled)
    assert report.ok and report.schema == "4"
    raw = damage.get(filled, b"unprocessed", damage.key(1, 2))
    assert record.unseal(damage.key(1, 2), raw)


# -- the data file -------------------------------------------------------------


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """A closed board whose data file is a few hundred pages."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(body=b"y" * 8000) for _ in range(100)])
    return path


def test_a_truncated_data_file_is_refused_with_one_line(
    big: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given data.mdb cut to half, I expect the store, the server and
    msgboard check each to refuse it with one line (no SIGBUS)."""
    size = (big / "data.mdb").stat().st_size
    damage.truncate(big, size // 2)
    with pytest.raises(DataFileDamaged, match=f"truncated: {size // 2} bytes, its meta page"):
        DurableStore(big)
    run = serve(big)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "truncated" in run.stderr
    rc, out = check_cli(big, capsys)
    assert rc == 1 and "truncated" in out


def test_a_file_that_is_not_lmdb_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "board"
    path.mkdir()
    (path / "data.mdb").write_bytes(os.urandom(3 * 4096))
    with pytest.raises(DataFileDamaged, match="not an LMDB data file"):
        DurableStore(path)
    run = serve(path)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "not an LMDB data file" in run.stderr


# -- msgboard check ------------------------------------------------------------


def test_check_passes_a_healthy_board_and_its_snapshot(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Board(filled) as b:
        b.create_queue(QueueSpec("gone"))
        b.post("gone", [Message()])
        b.delete_queue("gone")
        b.snapshot(tmp_path / "snap")
    for path in (filled, tmp_path / "snap"):
        rc, out = check_cli(path, capsys)
        assert rc == 0, out
        assert "queue 'jobs': 9 unprocessed, 1 history, next seq 11: ok" in out
        assert out.endswith("clean\n")


def test_check_finds_flipped_bytes(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damage.flip(filled, b"BODY-0004")
    damage.flip(filled, b"BODY-0001")
    rc, out = check_cli(filled, capsys)
    assert rc == 1
    assert "problem: seq 4 (unprocessed): damaged record (checksum mismatch)" in out
    assert "problem: seq 1 (history): damaged record (checksum mismatch)" in out
    assert "2 problem(s) found" in out


def test_check_finds_a_missing_and_a_stale_index_entry(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgboard.associative.keys import message_keys

    k = damage.key(1, 6)
    [first, *_] = message_keys("", ("job", 6))
    damage.put(filled, b"index", k[:4] + first, None, dup=k[4:])
    rc, out = check_cli(filled, capsys)
    assert rc == 1 and "seq 6 (unprocessed) is missing from the index" in out
    damage.put(filled, b"index", k[:4] + first, k[4:])  # put back: clean again
    assert check(filled).ok
    damage.put(filled, b"index", k[:4] + first, damage.key(0, 42)[4:])
    rc, out = check_cli(filled, capsys)
    assert rc == 1 and "the index points at seq 42, which is not an unprocessed record" in out


def test_check_passes_an_index_whose_keys_came_and_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Hundreds of messages under the same index keys give each key a
    # duplicates sub-tree with branch pages; taking them all drops those
    # sub-trees, and LMDB 0.9.36 leaves their pages in the index's page
    # counters (they only drift up). The check read that as damage ("index
    # keys unreadable") on a board LMDB reads whole.
    path = tmp_path / "board"
    n = 700
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs", max_history=UNLIMITED))
        b.post("jobs", [Message(tuple=("job", i % 3)) for i in range(n)])
        b.post("jobs", [Message(tuple=("other",))])
        assert len(b.take("jobs", max=n)) == n
    index = verify(str(path)).named[b"index"]
    # What is left: "other"'s address, shape and field keys, one value
    # each, on one leaf page; LMDB's counters still hold the dropped pages.
    assert (index.depth, index.entries) == (1, 3)
    assert index.branch_pages + index.leaf_pages > 1
    rc, out = check_cli(path, capsys)
    assert rc == 0, out
    assert f"queue 'jobs': 1 unprocessed, {n} history, next seq {n + 2}: ok" in out


def test_check_finds_an_index_counter_below_its_pages_or_off_its_entries(
    filled: Path,
) -> None:
    # What the drift leaves checked: a dupsort tree's page counters are
    # never below its own pages, and its entries are exact.
    def packed(t: Tree) -> bytes:
        fields = (t.pad, t.flags, t.depth, t.branch_pages, t.leaf_pages, t.overflow_pages)
        return DB.pack(*fields, t.entries, t.root)

    index = verify(str(filled)).named[b"index"]
    data = filled / datafile.FILE
    original = data.read_bytes()
    assert original.count(packed(index)) == 1
    for wrong in (
        replace(index, leaf_pages=index.leaf_pages - 1),
        replace(index, entries=index.entries + 1),
    ):
        data.write_bytes(original.replace(packed(index), packed(wrong)))
        out = "\n".join(check(filled).lines())
        assert "index keys unreadable (page -1: counters say" in out, out
    data.write_bytes(original)
    assert check(filled).ok


def test_check_finds_a_wrong_counter(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import struct

    damage.put(filled, b"state", struct.pack(">I", 1), struct.pack(">QQQ", 11, 8, 1))
    rc, out = check_cli(filled, capsys)
    assert rc == 1
    assert "counters say 8 unprocessed and 1 history; the records are 9 and 1" in out


def test_check_finds_an_unparseable_selector_and_an_orphan_record(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage.put(filled, b"selectors", b"s9", b"\xff\xff\xff")
    damage.put(filled, b"unprocessed", damage.key(7, 1), record.seal(damage.key(7, 1), b""))
    rc, out = check_cli(filled, capsys)
    assert rc == 1
    assert "selector s9: does not parse" in out
    assert "records of queue id 7, which no queue has" in out


def test_the_spark_reader_refuses_a_damaged_record(filled: Path) -> None:
    """A history export does not silently leave a message out."""
    from pyspark_msgboard import snapshot

    parts = snapshot.plan(str(filled))
    rows = sum(b.num_rows for p in parts for b in snapshot.read(str(filled), p))
    assert rows == 10
    damage.flip(filled, b"BODY-0004")
    with pytest.raises(RecordDamaged, match="queue 'jobs' seq 4"):
        for p in parts:
            list(snapshot.read(str(filled), p))


def test_lmdb_is_untouched_by_check(filled: Path) -> None:
    """check opens read-only: the data file is the same bytes after."""
    before = (filled / "data.mdb").read_bytes()
    assert check(filled).ok
    assert (filled / "data.mdb").read_bytes() == before


def test_a_queue_entry_that_does_not_parse_is_refused_with_one_line(filled: Path) -> None:
    damage.put(filled, b"queues", b"jobs", b'{"id": 1, "spec": ')
    with pytest.raises(DataFileDamaged, match="queue 'jobs': its stored entry does not parse"):
        DurableStore(filled)
    assert "queue 'jobs': its entry in queues does not parse" in "\n".join(check(filled).lines())


def test_check_finds_stray_state_entries(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import struct

    damage.put(filled, b"state", struct.pack(">I", 5), struct.pack(">QQQ", 1, 0, 0))
    rc, out = check_cli(filled, capsys)
    assert rc == 1 and "state: an entry of queue id 5, no queue's" in out


def test_a_file_that_ends_early_only_by_free_pages_opens(tmp_path: Path) -> None:
    """LMDB never writes a page a transaction allocated and freed again, so
    a healthy data file may end before its last page number: given such a
    file, I expect it to open (its missing pages are all free), and a cut
    one still refused."""
    path = tmp_path / "board"
    rnd = random.Random(1)
    s = DurableStore(path, sync=False)
    try:
        with s.begin() as txn:
            for n in range(4):
                txn.create_queue(QueueSpec(f"q{n}", max_history=50), 1)
        for _ in range(2000):
            with s.begin() as txn:
                name = f"q{rnd.randrange(4)}"
                if rnd.random() < 0.5:
                    for _ in range(rnd.randint(1, 200)):
                        txn.append(name, Message(body=b"z" * rnd.choice([10, 500, 5000])), 1)
                else:
                    for m in list(txn.scan(name, Section.UNPROCESSED))[: rnd.randint(1, 300)]:
                        txn.process(name, m.seq, 2, 50)
            need, size = datafile.expected_size(str(path / "data.mdb"))
            if need > size:
                break
        else:
            pytest.fail("no transaction left the file short of its last page")
    finally:
        s.close()
    datafile.check(str(path))
    with Board(path) as b:
        assert b.stats().queues
    damage.truncate(path, size // 2)
    with pytest.raises(DataFileDamaged, match="truncated"):
        datafile.check(str(path))


def test_a_lock_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "board"
    (path / "msgboard.lock").mkdir(parents=True)
    with pytest.raises(StoreError, match=r"msgboard\.lock: cannot open the lock file"):
        DurableStore(path)
    run = serve(path)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr


def test_the_spark_reader_reads_a_schema_2_snapshot(filled: Path) -> None:
    """Snapshots taken before checksums stay readable."""
    from pyspark_msgboard import snapshot

    damage.downgrade(filled, b"2")
    parts = snapshot.plan(str(filled))
    batches = [b for p in parts for b in snapshot.read(str(filled), p)]
    assert sorted(s for b in batches for s in b.column("seq").to_pylist()) == list(range(1, 11))


def test_a_selector_that_does_not_parse_is_refused_with_one_line(filled: Path) -> None:
    damage.put(filled, b"selectors", b"s9", b"\xff\xff\xff")
    with pytest.raises(DataFileDamaged, match="selector s9: its stored spec does not parse"):
        Board(filled)
    run = serve(filled)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
