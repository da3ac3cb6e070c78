"""Repair keeps everything it can read, and never loses anything silently
(issue 42).

Given a stopped board of a few thousand messages in two queues
(``tests/sweep.py``), damaged on a copy: one bit of the page listing the
sub-databases, a file cut to two pages or less, a damaged current meta
page, an older copy put back, a zeroed branch page, a bit of a leaf's
header. I expect ``msgboard check --repair`` to keep every record that is
whole anywhere in the file, to name every loss (queue, seqs or count) in
its output and in ``$damaged``, to refuse a rollback unless
``--accept-rollback``, never to crash or leave ``repair.tmp``, and to say
``clean`` only of a board that holds everything. ``repairsweep.judge``
holds those invariants and is shown first to catch each violation.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from msgboard import Message, QueueSpec
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.lmdbstore.check import check
from msgboard.lmdbstore.verify import DataFile
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests import repairsweep, sweep

# -- the judge catches what it looks for -------------------------------------

K1, K2, K3 = (b"\0\0\0\1" + seq.to_bytes(8, "big") for seq in (1, 2, 3))
CLEAN = {("unprocessed", K1): b"one", ("unprocessed", K2): b"two", ("history", K3): b"three"}
NAMES = {1: "jobs"}


def repaired(after: dict[tuple[str, bytes], bytes] | None = None, **kw: object) -> Any:
    r = repairsweep.Repaired(1, lines=["lost: something", "repaired, not whole"])
    r.after, r.names, r.damaged = dict(CLEAN if after is None else after), dict(NAMES), b""
    for k, v in kw.items():
        setattr(r, k, v)
    return r


WITHOUT_2 = {k: v for k, v in CLEAN.items() if k[1] != K2}


@pytest.mark.parametrize(
    ("result", "broken"),
    [
        (repaired(rc=None, signal="SIGABRT"), "repair died by SIGABRT"),
        (repaired(rc=2, lines=["Traceback (most recent call last):"]), "repair crashed"),
        (repaired(tmp_left=True), "repair.tmp left behind"),
        (repaired(behind=2), "a silent rollback of 2 commit(s)"),
        (repaired(refused=True, behind=2, lines=["refused"]), "without naming --accept"),
        (repaired(WITHOUT_2), "1 record(s) lost silently"),
        (repaired(WITHOUT_2, damaged=b"..two.."), "whole in the file, not kept"),
        (
            repaired(WITHOUT_2, lines=["lost: queue 'jobs' waiting: seqs 5 to 9"]),
            "1 record(s) lost silently",
        ),
        (repaired({**CLEAN, ("unprocessed", K2): b"older"}), "in another version"),
        (repaired({**CLEAN, ("unprocessed", K3): b"three"}), "in another version"),
        (
            repaired(WITHOUT_2, rc=0, lines=["lost: queue 'jobs' waiting: seqs 2 to 2", "clean"]),
            "says clean",
        ),
    ],
)
def test_the_judge_catches_each_violation(result: Any, broken: str) -> None:
    violations = repairsweep.judge(CLEAN, NAMES, result)
    assert any(broken in v for v in violations), violations


def test_the_judge_passes_what_is_allowed() -> None:
    # Whole; a loss named by range, or by count; an older copy named as
    # restored; a rollback refused naming the way out, or accepted and named
    assert repairsweep.judge(CLEAN, NAMES, repaired(rc=0, lines=["clean"])) == []
    by_range = ["lost: queue 'jobs' waiting: 1 of the 2 records ..., unprocessed seqs 2 to 4"]
    assert repairsweep.judge(CLEAN, NAMES, repaired(WITHOUT_2, lines=by_range)) == []
    by_count = ["lost: queue 'jobs' waiting: 1 of the 2 records its counters say, seqs unknown"]
    assert repairsweep.judge(CLEAN, NAMES, repaired(WITHOUT_2, lines=by_count)) == []
    older = {**CLEAN, ("unprocessed", K2): b"older"}
    said = ["restored: queue 'jobs' waiting: 1 older copies of seqs 2 to 2, from free pages"]
    assert repairsweep.judge(CLEAN, NAMES, repaired(older, lines=said)) == []
    refused = ["not repaired: a rollback of 2 commit(s)... or repair with --accept-rollback"]
    assert repairsweep.judge(CLEAN, NAMES, repaired(refused=True, behind=2, lines=refused)) == []
    named = ["lost: a rollback of 2 commit(s): ..."]
    assert repairsweep.judge(CLEAN, NAMES, repaired(WITHOUT_2, behind=2, lines=named)) == []


# -- the board ---------------------------------------------------------------


@pytest.fixture(scope="module")
def board(sweep_board: Path) -> Path:
    return sweep_board


@pytest.fixture(scope="module")
def pages(board: Path) -> dict[int, str]:
    return sweep.kinds(board)


@pytest.fixture(scope="module")
def clean(board: Path) -> tuple[repairsweep.Records, dict[int, str]]:
    return repairsweep.records(board)


def flip_bit(path: Path, pgno: int, offset: int, bit: int = 0) -> None:
    """Flips one bit of page ``pgno`` of ``path``'s data.mdb, at ``offset``."""
    size = sweep.psize(path)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(pgno * size + offset)
        byte = f.read(1)[0]
        f.seek(pgno * size + offset)
        f.write(bytes([byte ^ (1 << bit)]))


def repair_judged(
    path: Path, clean: tuple[repairsweep.Records, dict[int, str]], **kw: bool
) -> repairsweep.Repaired:
    r = repairsweep.run_repair(path, **kw)
    assert repairsweep.judge(*clean, r) == [], r.lines[-12:]
    return r


# -- 1. the page listing the sub-databases; a file cut to two pages ----------


@pytest.mark.parametrize("offset", [0, 12], ids=["its page number", "its node bounds"])
def test_a_flipped_bit_in_the_main_tree_empties_nothing(
    offset: int,
    board: Path,
    pages: dict[int, str],
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    # Given one bit flipped in the header of the page listing the
    # sub-databases (the server refuses the file)
    copy = sweep.copy(board, tmp_path / "b")
    flip_bit(copy, sweep.first(pages, "main leaf"), offset, 3)
    assert not check(copy).ok
    # When it is repaired
    r = repair_judged(copy, clean)
    # I expect every queue and record kept, byte for byte (the other nodes
    # of that page still say where each tree is)
    assert r.after == clean[0] and set(r.names.values()) == {"jobs", "logs"}, r.lines[-12:]
    assert r.rc == 0 and r.lines[-1] == "clean"


def test_a_lost_queues_root_is_found_again_by_its_pages(
    board: Path,
    pages: dict[int, str],
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    # Given the queues tree's root page number damaged in the main tree
    copy = sweep.copy(board, tmp_path / "b")
    main_leaf = sweep.first(pages, "main leaf")
    page = (copy / "data.mdb").read_bytes()[main_leaf * 4096 : (main_leaf + 1) * 4096]
    at = page.find(b"queues") + len(b"queues") + 40  # MDB_db's md_root
    flip_bit(copy, main_leaf, at, 6)
    # When it is repaired, I expect both queues found again on their page
    r = repair_judged(copy, clean)
    assert set(r.names.values()) >= {"jobs", "logs"} and r.after == clean[0], r.lines[-12:]


@pytest.mark.parametrize("pages_kept", [2, 1, 0])
def test_a_file_cut_short_is_never_repaired_silently(
    pages_kept: int,
    board: Path,
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    # Given data.mdb cut to 2 pages, 1 page or 0 bytes
    copy = sweep.copy(board, tmp_path / "b")
    before = (copy / "data.mdb").read_bytes()[: pages_kept * 4096]
    os.truncate(copy / "data.mdb", pages_kept * 4096)
    # When it is repaired, I expect no crash, no repair.tmp, and either a
    # refusal that leaves the file as it was, or a repair that names the
    # loss of everything (exit 1, never "clean")
    r = repair_judged(copy, clean)
    assert r.rc == 1 and not r.tmp_left and "Traceback" not in "\n".join(r.lines)
    if r.refused:
        assert (copy / "data.mdb").read_bytes() == before
        assert any("cannot repair" in line for line in r.lines), r.lines
    else:
        assert any(line.startswith("lost: queues:") for line in r.lines), r.lines
        assert r.lines[-1] != "clean"
        with Board(copy) as b:
            lost = [m.headers["lost"] for m in b.browse("$damaged", limit=100).messages]
            assert any(line.startswith("queues:") for line in lost), lost


# -- 2. rollbacks -------------------------------------------------------------


def newer_meta_zeroed(path: Path) -> None:
    with DataFile(str(path)) as f:
        assert f.report.meta is not None
        slot = f.report.meta.slot
    sweep.zero(path, slot)


def two_commits_behind(path: Path) -> None:
    """An older data.mdb put back: the board posted 10 and took 100 since."""
    shutil.copy(path / "data.mdb", path.parent / "older.mdb")
    with Board(path) as b:
        b.post("logs", [Message(tuple=("log", i), body=b"late") for i in range(10)])
        assert len(b.take("jobs", max=100)) == 100
    shutil.copy(path.parent / "older.mdb", path / "data.mdb")


@pytest.mark.parametrize(
    ("damage", "commits"),
    [(newer_meta_zeroed, 1), (two_commits_behind, 2)],
    ids=["the newer meta page zeroed", "a copy two commits behind"],
)
def test_a_rollback_is_refused_unless_accepted_and_then_named(
    damage: Any,
    commits: int,
    board: Path,
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    copy = sweep.copy(board, tmp_path / "b")
    damage(copy)
    # I expect check to report the rollback
    report = "\n".join(check(copy).lines())
    assert f"{commits} commit(s) behind" in report, report
    # and repair to refuse it, saying how many commits, leaving it all as it was
    before = (copy / "data.mdb").read_bytes()
    r = repair_judged(copy, clean)
    assert r.refused and r.rc == 1 and (copy / "data.mdb").read_bytes() == before
    assert f"a rollback of {commits} commit(s)" in "\n".join(r.lines), r.lines
    # With --accept-rollback: repaired, the rollback named (output, $damaged),
    # the sidecar kept as evidence, never "clean"
    r = repair_judged(copy, clean, accept_rollback=True)
    assert r.rc == 1 and not r.refused and r.lines[-1] != "clean"
    assert any(line.startswith(f"lost: a rollback of {commits} commit(s)") for line in r.lines)
    assert list(copy.glob("msgboard.commit.damaged-*"))
    with Board(copy) as b:
        lost = [m.headers.get("lost", "") for m in b.browse("$damaged", limit=100).messages]
        assert any(f"a rollback of {commits} commit(s)" in line for line in lost), lost


# -- 4. a damaged branch page, a bit of a leaf's header ----------------------


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        ("unprocessed branch", lambda c, p: sweep.zero(c, p)),
        ("history branch", lambda c, p: sweep.zero(c, p)),
        ("unprocessed leaf", lambda c, p: flip_bit(c, p, 12, 4)),  # its node count
        ("unprocessed leaf", lambda c, p: flip_bit(c, p, 10, 0)),  # its flags
    ],
    ids=["unprocessed branch zeroed", "history branch zeroed", "leaf lower", "leaf flags"],
)
def test_the_intact_leaves_below_a_damaged_page_are_kept(
    kind: str,
    damage: Any,
    board: Path,
    pages: dict[int, str],
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    copy = sweep.copy(board, tmp_path / "b")
    damage(copy, sweep.first(pages, kind))
    r = repair_judged(copy, clean)
    # Every record is whole somewhere in the file: all are kept, byte for byte
    assert r.after == clean[0], r.lines[-12:]
    assert r.rc == 0 and r.lines[-1] == "clean"


Clean = tuple[repairsweep.Records, dict[int, str]]


@pytest.fixture
def copy(board: Path, tmp_path: Path) -> Path:
    """A fresh copy of the module's board, to damage."""
    return sweep.copy(board, tmp_path / "b")


def damage_node(
    path: Path, pgno: int, first: int, last: int, every: bool = False
) -> tuple[bytes, bytes]:
    """Inverts bytes ``first`` to ``last`` (exclusive) of the middle node of
    leaf ``pgno`` (0-8: its header, 8-20: its 12-byte key, 20 on: its
    value), or of ``every`` node; the middle node's key and value as they
    were."""
    size = sweep.psize(path)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(pgno * size)
        page = bytearray(f.read(size))
        lower = int.from_bytes(page[12:14], sys.byteorder)
        offsets = sorted(
            int.from_bytes(page[i : i + 2], sys.byteorder) for i in range(16, lower, 2)
        )
        o = offsets[len(offsets) // 2]
        length = int.from_bytes(page[o : o + 2], sys.byteorder)
        key, value = bytes(page[o + 8 : o + 20]), bytes(page[o + 20 : o + 20 + length])
        for at in offsets if every else [o]:
            page[at + first : at + last] = bytes(b ^ 0xFF for b in page[at + first : at + last])
        f.seek(pgno * size)
        f.write(page)
    return key, value


@pytest.mark.parametrize(
    ("kind", "first", "last"),
    [
        ("unprocessed leaf", 0, 4),
        ("history leaf", 2, 8),
        ("unprocessed leaf", 0, 20),
        ("history leaf", 4, 18),
    ],
    ids=["its sizes", "its flags and key size", "its header and key", "history: key too"],
)
def test_a_record_under_a_damaged_node_header_is_found_by_its_checksum(
    kind: str, first: int, last: int, copy: Path, pages: dict[int, str], clean: Clean
) -> None:
    # Given a leaf node whose header (sizes, flags, key size), or its key
    # too, is damaged, its value whole (the page walk cannot read the node)
    key, value = damage_node(copy, sweep.first(pages, kind), first, last)
    assert not check(copy).ok
    # When it is repaired
    r = repair_judged(copy, clean)
    # I expect the record kept under its own key, byte for byte (its value's
    # checksum, which covers the key, proves both), and said so
    section = kind.split()[0]
    assert r.after is not None and r.after.get((section, key)) == value, r.lines[-12:]
    seq = int.from_bytes(key[4:], "big")
    said = [line for line in r.lines if line.startswith("recovered: ")]
    assert any(f"seqs {seq})" in line for line in said), r.lines


def test_every_record_of_a_leaf_whose_every_node_header_and_key_is_damaged_is_kept(
    copy: Path, pages: dict[int, str], clean: Clean
) -> None:
    # Given every node of a leaf with its header and key damaged (no node
    # start is left to read: each value ends where the next one's node starts)
    damage_node(copy, sweep.first(pages, "unprocessed leaf"), 0, 20, every=True)
    # When it is repaired, I expect every record kept, byte for byte: clean
    r = repair_judged(copy, clean)
    assert r.after == clean[0], r.lines[-12:]
    assert r.rc == 0 and r.lines[-1] == "clean", r.lines


def test_a_record_whose_value_is_damaged_too_is_named_lost_not_guessed(
    copy: Path, pages: dict[int, str], clean: Clean
) -> None:
    # Given a leaf node's header, key and the first bytes of its value damaged
    key, _ = damage_node(copy, sweep.first(pages, "unprocessed leaf"), 0, 30)
    # When it is repaired, I expect no record kept in its place under any
    # key (the checksum holds for none), and its loss named
    r = repair_judged(copy, clean)
    assert r.after is not None and ("unprocessed", key) not in r.after
    assert not any(line.startswith("recovered: ") for line in r.lines), r.lines
    assert any(line.startswith("lost: queue 'jobs' waiting: 1 of the") for line in r.lines)


# -- 5. check's counts and meta pages; a timestamp's nanos at the wire ---------


def test_check_counts_selectors_on_a_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "b"
    with Board(path) as b:
        b.create_queue(QueueSpec("a"))
        b.create_queue(QueueSpec("z"))
        b.post("a", [Message(tuple=("x", i), body=b"%04d" % i * 50) for i in range(400)])
    server = ServerThread(path).start()
    try:
        with Client(server.address) as c:
            c.create_selector("a", to="z", templates=[("nothing",)])
    finally:
        server.stop()
    assert check(path).selectors == 1
    sweep.zero(path, sweep.first(sweep.kinds(path), "unprocessed leaf"))
    report = check(path)
    assert not report.ok and report.selectors == 1, list(report.lines())


#: A byte of each field of MDB_meta after the page header: address, map
#: size, the free list's flags and leaf count, the main tree's pad, flags,
#: leaf count and root, the last page, the txn id; then the zeros after it.
META_FIELDS = [24, 32, 44, 56, 88, 92, 104, 128, 136, 144, 200]


@pytest.mark.timeout(600)  # a check per field, on a loaded machine
def test_check_checks_the_older_meta_page(board: Path, tmp_path: Path) -> None:
    # Given one bit flipped in each field of the older meta page in turn
    with DataFile(str(board)) as f:
        older = min(f.report.metas, key=lambda m: m.txnid).slot
    missed = []
    for offset in META_FIELDS:
        copy = sweep.copy(board, tmp_path / "b")
        flip_bit(copy, older, offset, 1)
        if check(copy).ok:
            missed.append(offset)
    # I expect each reported (and the untouched file clean)
    assert missed == [] and check(sweep.copy(board, tmp_path / "b")).ok


def test_a_timestamp_with_nanos_of_a_second_or_more_is_refused(tmp_path: Path) -> None:
    server = ServerThread(tmp_path / "board").start()
    try:
        stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
        stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")))
        bad = pb.Message(body=b"x")
        bad.expires_at.seconds, bad.expires_at.nanos = 4_000_000_000, 1_000_000_000
        with pytest.raises(grpc.RpcError) as e:
            stub.Post(pb.PostRequest(queue="q", messages=[pb.Message(body=b"ok"), bad]))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "messages[1].expires_at: nanos 1000000000" in str(e.value.details())
        with Client(server.address) as c:
            assert c.get_queue("q").unprocessed == 0  # nothing stored
    finally:
        server.stop()


# -- the repair sweep, sampled -----------------------------------------------


@pytest.mark.timeout(900)  # about 40 repairs, each a process, on a loaded machine
def test_the_repair_sweep_sampled(
    board: Path,
    pages: dict[int, str],
    clean: tuple[repairsweep.Records, dict[int, str]],
    tmp_path: Path,
) -> None:
    # Given a page of each kind zeroed, and two of each kind with 64 bytes
    # flipped, each on a fresh copy (a seeded sample: about three dozen),
    # and a leaf of each record tree whose flip ends in a node's header or
    # key (the page layout varies from build to build: chosen, not sampled)
    picks = [(p, "zero") for p in sweep.pick(pages, 1, seed=42)]
    picks += [(p, "flip") for p in sweep.pick(pages, 2, seed=43) if pages[p] != "unused"]
    for kind in ("unprocessed leaf", "history leaf"):
        hiding = repairsweep.hiding_flips(board, pages, kind, 42, tmp_path / "probe")
        assert hiding, f"no {kind} whose flip hides a node's header"
        picks.append((hiding[0], "flip"))
    results = []
    for pgno, how in picks:
        copy = sweep.copy(board, tmp_path / "b")
        if how == "zero":
            sweep.zero(copy, pgno)
        else:
            sweep.flip(copy, pgno, seed=42)
        r = repairsweep.run_repair(copy, accept_rollback=True)
        results.append((f"page {pgno} ({pages[pgno]}) {how}", r, repairsweep.judge(*clean, r)))
    # I expect no violation over the sample (a record whole in the file
    # under a damaged node header is kept too: found by its checksum)
    broken = [f"{name}: {v}" for name, _, vs in results for v in vs]
    assert broken == [], (broken, repairsweep.summary(results))
