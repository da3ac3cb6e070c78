"""Idempotency keys: a queue holds one message per key; a post of a held key
stores nothing and answers the first seq (DUPLICATE), while the message is
on the board and for the queue's dedup window after it has left.

The store contract is tested on both backends with explicit times; the
engine on a real LMDB directory (restarts, selectors, check, the upgrade);
the wire through a real server (bad keys, the client, the CLI, the metric).
kill -9 between a post and its answer is in test_keys_crash.py."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.associative import EVERYTHING
from msgboard.cli.main import main
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, QueueFull
from msgboard.lmdbstore import DurableStore, MemoryStore
from msgboard.lmdbstore.check import check
from msgboard.lmdbstore.layout import HOLD, QID, U64
from msgboard.lmdbstore.store import Store
from msgboard.message import Message, Section
from msgboard.server.metrics import counters
from msgboard.spec import Disposition, Op, QueueSpec, SelectorSpec
from msgboard.testing import ServerThread
from tests import damage

W = 5_000_000  # a dedup window of 5 s, in µs


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = DurableStore(tmp_path / "board") if request.param == "lmdb" else MemoryStore()
    with s.begin() as txn:
        txn.create_queue(QueueSpec("q", dedup_window=W), 0)
        txn.create_queue(QueueSpec("h", dedup_window=W), 0)
    try:
        yield s
    finally:
        s.close()


def test_a_key_is_held_on_the_board_and_for_the_window_after(store: Store) -> None:
    """Given a keyed message, I expect its key held while it waits, from
    the moment it leaves (taken, no history) for the window, and no more;
    the sweep forgets it only once the window is over."""
    with store.begin() as txn:
        m = txn.append("q", Message(body=b"a", key="k"), now=1)
        assert txn.keyed("q", "k", 2) == m.seq and txn.keyed("q", "other", 2) == 0
    with store.begin() as txn:
        txn.process("q", m.seq, 10, 0)
        assert txn.keyed("q", "k", 10 + W - 1) == m.seq
        assert txn.keyed("q", "k", 10 + W) == 0
        assert txn.sweep_keys(10 + W - 1, 100) == (0, 10 + W)
    with store.begin() as txn:
        assert txn.keyed("q", "k", 11) == m.seq  # committed
        assert txn.sweep_keys(10 + W, 100) == (1, 0)
        assert txn.keyed("q", "k", 11) == 0  # swept: gone at any time


def test_a_key_in_history_is_held_until_trimmed_then_for_the_window(store: Store) -> None:
    """Given a queue keeping one message in history, I expect a taken keyed
    message's key held while in history, and for the window from its trim."""
    with store.begin() as txn:
        a = txn.append("h", Message(key="a"), now=1)
        b = txn.append("h", Message(key="b"), now=1)
        txn.process("h", a.seq, 5, 1)
        assert txn.keyed("h", "a", 5 + 10 * W) == a.seq  # in history: no end
        txn.process("h", b.seq, 7, 1)  # trims a
        assert txn.keyed("h", "a", 7 + W - 1) == a.seq
        assert txn.keyed("h", "a", 7 + W) == 0
        assert txn.keyed("h", "b", 7 + 10 * W) == b.seq


def test_a_restored_message_holds_its_key_again_and_an_abort_leaves_none(store: Store) -> None:
    """Given a taken message given back, I expect its key held with no end;
    an aborted append leaves no key."""
    with store.begin() as txn:
        m = txn.append("q", Message(key="k"), now=1)
        taken = txn.process("q", m.seq, 2, 0)
        txn.restore("q", taken)
        assert txn.keyed("q", "k", 2 + 10 * W) == m.seq
        assert txn.sweep_keys(2 + 10 * W, 100) == (0, 0)
    txn = store.begin()
    txn.append("q", Message(key="gone"), now=3)
    txn.abort()
    with store.begin() as txn:
        assert txn.keyed("q", "gone", 4) == 0


@pytest.mark.parametrize("transient", [False, True])
def test_a_repeated_key_is_a_duplicate_of_the_first(board: Board, transient: bool) -> None:
    """Given a queue, when I post a key twice in one batch and again later,
    I expect one message stored and DUPLICATE answering its seq each time,
    counted in msgboard_messages_duplicate_total."""
    board.create_queue(QueueSpec("jobs", transient=transient))
    got = board.post_receipts(
        "jobs", [Message(body=b"1", key="k"), Message(body=b"2", key="k"), Message(body=b"3")]
    )
    assert [(r.seq, r.disposition) for r in got] == [
        (1, Disposition.STORED),
        (1, Disposition.DUPLICATE),
        (2, Disposition.STORED),
    ]
    assert board.post("jobs", [Message(body=b"4", key="k")]) == [1]
    assert [m.body for m in board.read("jobs", max=10)] == [b"1", b"3"]
    assert board.read("jobs", max=1)[0].key == "k"
    [family] = [
        f
        for f in counters(board.traffic_async().result(), ["jobs"])
        if f.name == "msgboard_messages_duplicate"
    ]
    assert [s.value for s in family.samples if s.name.endswith("_total")] == [2]


def test_a_key_survives_a_restart_and_check_finds_it_filed(tmp_path: Path) -> None:
    """Given a keyed post on a durable queue, when the board restarts, I
    expect the same key answered DUPLICATE, and msgboard check clean."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs", max_history=10))
        assert b.post("jobs", [Message(key="k1"), Message(key="k2")]) == [1, 2]
        b.take("jobs", EVERYTHING)  # k1 into history
    with Board(path) as b:
        got = b.post_receipts("jobs", [Message(key="k1"), Message(key="k2"), Message(key="k3")])
        assert [(r.seq, r.disposition.value) for r in got] == [
            (1, "duplicate"),
            (2, "duplicate"),
            (3, "stored"),
        ]
    report = check(path)
    assert report.ok, list(report.lines())


def test_the_window_after_a_message_leaves_history(board: Board) -> None:
    """Given a queue with no history and a window of 0, I expect a key free
    again once its message is taken; with a window, held after it."""
    board.create_queue(QueueSpec("now", dedup_window=0))
    board.create_queue(QueueSpec("later", dedup_window=60_000_000))
    for q in ("now", "later"):
        assert board.post(q, [Message(key="k")]) == [1]
        board.take(q, EVERYTHING)
    assert board.post("now", [Message(key="k")]) == [2]
    assert board.post_receipts("later", [Message(key="k")])[0].disposition is (
        Disposition.DUPLICATE
    )


def test_a_selector_graph_forwards_the_key_and_never_stores_it_twice(board: Board) -> None:
    """Given a MOVE from "in" (no history, window 0) to "out", when the same
    key is posted to "in" after its first message moved on, I expect "in"
    to store it again but "out" to keep one message with that key."""
    board.create_queue(QueueSpec("in", dedup_window=0))
    board.create_queue(QueueSpec("out"))
    board.create_selector(SelectorSpec(source="in", destination="out", op=Op.MOVE))
    board.post("in", [Message(body=b"first", key="k")])
    board.post("in", [Message(body=b"again", key="k")])
    out = board.read("out", max=10)
    assert [(m.body, m.key) for m in out] == [(b"first", "k")]
    assert board.get_queue("in").unprocessed == 0
    assert board.traffic_async().result()["out"].duplicates == 1


def test_check_catches_each_kind_of_key_damage(tmp_path: Path) -> None:
    """Given a clean keyed board, I expect check to report a missing key, a
    key pointing at the wrong seq, an ended key without its keyends entry
    and a keyends entry without its key; each alone."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(key="a"), Message(key="b")])
    assert check(path).ok
    qid = QID.pack(1)
    cases = [
        (b"keys", qid + b"a", None, "seq 1 has key 'a', which keys does not hold"),
        (b"keys", qid + b"a", HOLD.pack(2, 0), "key 'a' is held by seq 2, but seq 1 has it"),
        (b"keys", qid + b"zz", HOLD.pack(9, 5), "key 'zz' has ended but is not filed"),
        (b"keyends", U64.pack(7) + qid + b"b", b"", "keyends has an entry for key b'b'"),
    ]
    damage.caught_alone(path, cases)


def test_a_schema_3_board_is_upgraded_to_4(tmp_path: Path) -> None:
    """Given a schema-3 board, when I open it, I expect schema 4 and keys
    working, and check clean."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(body=b"old")])
    damage.downgrade(path, b"3")
    assert check(path).schema == "3"
    with Board(path) as b:
        assert b.post("jobs", [Message(key="k"), Message(key="k")]) == [2, 2]
    report = check(path)
    assert report.ok and report.schema == "4", list(report.lines())


def test_bad_keys_and_windows_over_the_wire(client: Client) -> None:
    """Given a real server, I expect a 257-byte key and a negative window
    refused with INVALID_ARGUMENT naming the field, and nothing stored."""
    client.create_queue("jobs")
    with pytest.raises(InvalidArgument) as e:
        client.post("jobs", ("x",), key="é" * 129)
    assert e.value.field == "messages[0].key" and "258 bytes" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        client.create_queue("w", dedup_window=-1)
    assert e.value.field == "spec.dedup_window"
    assert client.get_queue("jobs").unprocessed == 0
    assert client.post("jobs", key="k" * 256) == 1


def test_keys_through_the_client_and_the_cli(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given a real server, I expect post(key=...) and the CLI's --key and
    NDJSON key to be answered with the first seq, and the key read back."""
    client.create_queue("jobs", dedup_window=0)
    assert client.post("jobs", ("a",), key="k1") == 1
    [r] = client.post_receipts("jobs", [Message(key="k1")])
    assert (r.seq, r.disposition) == (1, Disposition.DUPLICATE)
    with client.publisher(idempotent=True) as pub:
        assert pub.post("jobs", ("b",), key="k1") == 1
        assert pub.post_messages("jobs", [Message(tuple=("c",)), Message(key="k2")]) == [2, 3]
    assert main(["post", "jobs", "--key", "k2", "--server", server.address]) == 0
    assert capsys.readouterr().out == "3 duplicate (key 'k2' is held by seq 3)\n"
    lines = tmp_path / "in.ndjson"
    lines.write_text('{"key": "k1"}\n{"key": "k4", "body": "x"}\n')
    assert main(["post", "jobs", "--ndjson", str(lines), "--server", server.address]) == 0
    capsys.readouterr()
    assert main(["read", "jobs", "--max", "10", "--json", "--server", server.address]) == 0
    out = capsys.readouterr().out
    assert '"key": "k4"' in out and out.count('"key": "k1"') == 1
    msgs = client.read("jobs", max=10)
    keys = [m.key for m in msgs]
    assert keys[0] == "k1" and keys[2:] == ["k2", "k4"]
    assert len(keys[1]) == 32 and int(keys[1], 16) >= 0  # the publisher's own key for ("c",)
    assert all(m.section is Section.UNPROCESSED for m in msgs)


def test_the_sweep_forgets_keys_once_their_window_is_over(tmp_path: Path) -> None:
    """Given a queue with a window of 0.5 s and no history, when a keyed
    message is taken, I expect its key (and its end) gone from LMDB soon
    after the window (the sweep comes at most 10 s apart), as another
    process reading the board sees it."""
    path = tmp_path / "board"
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs", dedup_window=500_000))
        b.post("jobs", [Message(key="k")])
        assert _entries(path) == (1, 0)
        b.take("jobs", EVERYTHING)
        assert _entries(path) in ((1, 1), (0, 0))  # ended (swept only if 10 s went by)
        deadline = time.monotonic() + 60
        while _entries(path) != (0, 0):
            assert time.monotonic() < deadline, "the sweep never came"
            time.sleep(0.1)


def _entries(path: Path) -> tuple[int, int]:
    """The entries of ``keys`` and ``keyends``, read by another process."""
    code = (
        "import lmdb, sys; e = lmdb.open(sys.argv[1], readonly=True, max_dbs=16); "
        "t = e.begin(); print(*(t.stat(e.open_db(n, txn=t, create=False))['entries'] "
        "for n in (b'keys', b'keyends')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    keys, ends = out.stdout.split()
    return int(keys), int(ends)


def test_a_retry_to_a_full_queue_is_a_duplicate_not_queue_full(board: Board) -> None:
    """Given a queue of one message that refuses posts when full, when a
    keyed post is retried after the queue filled, I expect DUPLICATE with
    the first seq; a new message is still QueueFull."""
    board.create_queue(QueueSpec("jobs", max_unprocessed=1))
    assert board.post("jobs", [Message(key="k")]) == [1]
    [r] = board.post_receipts("jobs", [Message(key="k")])
    assert (r.seq, r.disposition) == (1, Disposition.DUPLICATE)
    with pytest.raises(QueueFull):
        board.post("jobs", [Message(key="other")])
