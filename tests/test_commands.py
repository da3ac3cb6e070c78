"""The msgboard commands added for operators, against a real server: bulk
posting from NDJSON, expiry, leased takes with ack and nack, and watch with
acks from standard input."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from msgboard.cli import build_parser, main
from msgboard.cli.commands import RPC_COMMANDS
from msgboard.client import Client
from msgboard.errors import QueueExists
from msgboard.message import now_us
from msgboard.spec import UNLIMITED
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb


def run(
    server: ServerThread, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main([*args, "--server", server.address])
    out, err = capsys.readouterr()
    return code, out, err


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def msgboard(
    server: ServerThread, *args: str, stderr: int = subprocess.PIPE
) -> subprocess.Popen[str]:
    """The command as a child process, its stdin and stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "msgboard", *args, "--server", server.address],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def test_post_ndjson_posts_every_line_through_one_stream(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given an NDJSON file of 1,201 messages (more than two batches), when I
    post it, I expect every message stored in order with its fields, a JSON
    summary, and no progress bar (stderr is not a terminal)."""
    client.create_queue("jobs")
    rows = [{"tuple": ["job", i], "address": "a.b"} for i in range(1200)]
    rows.append(
        {
            "tuple": ["last", {"bytes": "AAE="}, None, 2.5],
            "headers": {"k": "v"},
            "priority": 4,
            "body_base64": "/w==",
            "reply_to": "r",
            "content_type": "x/y",
        }
    )
    f = tmp_path / "in.ndjson"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    code, out, err = run(server, capsys, "post", "jobs", "--ndjson", str(f), "--json")
    [summary] = lines(out)
    assert (code, err) == (0, "")
    assert summary["posted"] == 1201 and summary["queue"] == "jobs" and summary["refused"] == 0
    assert float(summary["msgs_per_s"]) > 0  # type: ignore[arg-type]
    assert client.get_queue("jobs").unprocessed == 1201
    first = client.take("jobs")[0]
    assert (first.seq, first.tuple, first.address) == (1, ("job", 0), "a.b")
    [last] = client.read("jobs", ("last", bytes, None, float))
    assert (last.body, dict(last.headers), last.priority) == (b"\xff", {"k": "v"}, 4)
    assert (last.reply_to, last.content_type, last.tuple[1]) == ("r", "x/y", b"\x00\x01")

    code, out, _ = run(server, capsys, "post", "jobs", "--ndjson", str(f))
    assert code == 0 and out.startswith("posted 1201 messages in ") and "msgs/s" in out
    code, _, err = run(server, capsys, "post", "jobs", "--ndjson", str(f), "--address", "x")
    assert code == 2 and "--address: a single post's" in err


def test_what_read_json_prints_posts_again(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    client.create_queue("a")
    client.create_queue("b")
    client.post("a", ("x", 1), address="p.q", headers={"h": "1"}, body="hi")
    _, out, _ = run(server, capsys, "read", "a", "--json")
    (tmp_path / "copy.ndjson").write_text(out)
    assert run(server, capsys, "post", "b", "--ndjson", str(tmp_path / "copy.ndjson"))[0] == 0
    [m] = client.take("b")
    assert (m.tuple, m.address, dict(m.headers), m.body) == (("x", 1), "p.q", {"h": "1"}, b"hi")


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "line 3: not JSON"),
        ('{"tupel": [1]}', "line 3: unknown key 'tupel'"),
        ('{"tuple": ["?int"]}', "line 3: tuple[0]"),
        ('{"priority": "high"}', "line 3: priority: expected int"),
        ("[1, 2]", "line 3: expected a JSON object"),
    ],
)
def test_a_bad_line_is_named_and_the_lines_before_it_are_posted(
    server: ServerThread,
    client: Client,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    bad: str,
    says: str,
) -> None:
    client.create_queue("jobs")
    f = tmp_path / "in.ndjson"
    f.write_text(f'{{"tuple": [1]}}\n{{"tuple": [2]}}\n{bad}\n{{"tuple": [4]}}\n')
    code, out, err = run(server, capsys, "post", "jobs", "--ndjson", str(f), "--json")
    error = json.loads(err)["error"]
    assert (code, out, error["code"]) == (2, "", "INVALID_ARGUMENT")
    assert says in error["message"] and "the 2 messages before it are posted" in error["message"]
    assert [m.tuple for m in client.take("jobs", max=10)] == [(1,), (2,)]


def test_post_ndjson_reads_stdin_and_draws_a_progress_bar_on_a_terminal(
    server: ServerThread, client: Client, tmp_path: Path
) -> None:
    """Given stderr on a terminal (a pty), I expect a progress bar there, and
    the summary line on stdout; with stderr a pipe, nothing on stderr."""
    client.create_queue("jobs")
    data = "".join(json.dumps({"tuple": [i]}) + "\n" for i in range(50))
    master, slave = pty.openpty()
    with os.fdopen(master, "rb", buffering=0) as tty:
        proc = msgboard(server, "post", "jobs", "--ndjson", "-", stderr=slave)
        os.close(slave)
        out, _ = proc.communicate(data, timeout=60)
        drawn = _read_all(tty)
    assert proc.returncode == 0 and out.startswith("posted 50 messages")
    assert "\r" in drawn and "50 posted" in drawn
    piped = subprocess.run(
        [
            sys.executable,
            "-m",
            "msgboard",
            "post",
            "jobs",
            "--ndjson",
            "-",
            "--server",
            server.address,
        ],
        input=data,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (piped.returncode, piped.stderr) == (0, "")
    assert client.get_queue("jobs").unprocessed == 100


def _read_all(tty: IO[bytes]) -> str:
    chunks = []
    while True:
        try:
            chunk = tty.read(4096)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_post_expires_in(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--expires-in sets the expiry of a single post and of every NDJSON line
    that has none of its own."""
    client.create_queue("jobs")
    before = now_us()
    assert run(server, capsys, "post", "jobs", "--expires-in", "3600")[0] == 0
    f = tmp_path / "in.ndjson"
    f.write_text('{"tuple": [1]}\n{"tuple": [2], "expires_at": "2100-01-01T00:00:00Z"}\n')
    assert run(server, capsys, "post", "jobs", "--ndjson", str(f), "--expires-in", "60")[0] == 0
    after = now_us()
    one, two, three = client.read("jobs", max=3)
    assert before + 3600e6 <= one.expires_at <= after + 3600e6
    assert before + 60e6 <= two.expires_at <= after + 60e6
    assert three.expires_at == 4102444800_000_000
    code, _, err = run(server, capsys, "post", "jobs", "--expires-in", "0")
    assert code == 2 and "--expires-in: must be positive" in err


def test_queue_create_says_a_conflict_in_its_own_flags(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a queue, when I create it again with other properties, I expect
    the wire's words (the proto's fields, which the client keeps) said by
    the CLI as its flags, each with what exists and what was asked."""
    client.create_queue("jobs", max_history=1000, dead_letter="", auto_delete=False)
    with pytest.raises(QueueExists, match=r"max_history 1000 \(asked: 500\)$"):
        client.create_queue("jobs", max_history=500)
    code, _, err = run(
        server, capsys, "queue", "create", "jobs", "--max-history", "500", "--transient"
    )
    assert code == 1 and err == (
        'msgboard: ALREADY_EXISTS: queue "jobs" exists with no --transient (asked: '
        "--transient), --max-history 1000 (asked: 500)\n"
    )
    client.create_queue("dlq")
    client.create_queue("all", max_history=UNLIMITED, dead_letter="dlq", overflow="drop-new")
    code, _, err = run(server, capsys, "queue", "create", "all", "--json")
    said = json.loads(err)["error"]
    assert (said["name"], said["message"]) == (
        "QueueExists",
        'queue "all" exists with --overflow drop-new (asked: reject), --max-history '
        "unlimited (asked: 0), --dead-letter dlq (asked: none)",
    )
    code, _, err = run(
        server, capsys, "queue", "create", "r", "--dedup-window", "0", "--redelivery", "1,2,300"
    )
    code, _, err = run(server, capsys, "queue", "create", "r")
    assert code == 1 and err.endswith(
        "--dedup-window 0 (asked: 120), --redelivery 1,2,300 (asked: none)\n"
    )


def test_take_with_a_lease_then_ack_and_nack(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given three leased takes, I expect ack to process one for good, nack
    to give one back (after the nack backoff), and unknown or used lease ids reported one by one
    (exit status 1) while the good ones in the same command go through."""
    client.create_queue("jobs")
    client.post_many("jobs", [("n", i) for i in range(3)])
    code, out, _ = run(server, capsys, "take", "jobs", "--lease", "60", "--max", "2", "--json")
    first, second = lines(out)
    assert code == 0 and [first["seq"], second["seq"]] == [1, 2]
    code, out, _ = run(server, capsys, "take", "jobs", "--lease", "60")
    where, tag, _ = out.split("  ", 2)  # the lease after the seq: it must not read as one
    assert where == "jobs#3" and tag.startswith("lease=")
    lease3 = tag.removeprefix("lease=")

    code, out, err = run(server, capsys, "ack", "jobs", str(first["lease"]))
    assert (code, out, err) == (0, f"acked {first['lease']}\n", "")
    code, out, err = run(server, capsys, "nack", "jobs", str(second["lease"]), "--json")
    assert (code, lines(out)) == (0, [{"lease": second["lease"], "nacked": True}])
    code, out, err = run(
        server, capsys, "ack", "jobs", str(first["lease"]), "999", lease3, "--json"
    )
    assert code == 1 and lines(out) == [{"lease": int(lease3), "acked": True}]
    assert [x["lease"] for x in lines(err)] == [first["lease"], 999]
    used, never = (x["error"] for x in lines(err))
    assert used["code"] == "NOT_FOUND" and f"lease {first['lease']}" in used["message"]  # type: ignore[index]
    assert never["code"] == "INVALID_ARGUMENT" and "lease 999" in never["message"]  # type: ignore[index]

    [back] = client.take("jobs", timeout=30)
    assert back.seq == 2 and back.delivery_count == int(second.get("delivery_count", 0)) + 1  # type: ignore[call-overload]


def test_watch_with_manual_acks_from_stdin(server: ServerThread, client: Client) -> None:
    """Given three deliveries printed by watch --manual-ack --nack-on-exit,
    when I ack the first, send a bad line and an ack of the same delivery
    again, then close stdin, I expect the watch to end with status 1 (two
    lines rejected, each reported), the first message processed, and the
    other two nacked back to the queue."""
    client.create_queue("jobs", max_history=10)
    client.post_many("jobs", [("n", i) for i in range(3)])
    proc = msgboard(server, "watch", "jobs", "--manual-ack", "--nack-on-exit", "--json")
    assert proc.stdin is not None and proc.stdout is not None
    shown = [json.loads(proc.stdout.readline()) for _ in range(3)]
    assert [d["tuple"] for d in shown] == [["n", i] for i in range(3)]
    ids = [d["delivery"] for d in shown]
    out, err = proc.communicate(f"ack {ids[0]}\nplease ack\nack {ids[0]}\n", timeout=60)
    assert proc.returncode == 1
    assert lines(out) == [{"nacked": ids[1:]}]
    errors = [e["error"] for e in lines(err)]
    assert [e["code"] for e in errors] == ["INVALID_ARGUMENT", "NOT_FOUND"]  # type: ignore[index]
    assert "stdin line 2" in errors[0]["message"]  # type: ignore[index]
    back = client.take("jobs", timeout=30, max=2)
    while len(back) < 2:
        back += client.take("jobs", timeout=30)
    counts = [int(d.get("delivery_count", 0)) + 1 for d in shown[1:]]  # type: ignore[call-overload]
    assert [(m.seq, m.delivery_count) for m in back] == list(zip([2, 3], counts, strict=True))
    assert client.get_queue("jobs").history == 3  # the acked one, then the two taken


def test_watch_max_with_manual_acks_waits_for_the_acks(
    server: ServerThread, client: Client
) -> None:
    """An ack line read before its delivery is printed waits for it, and
    --max ends the watch once the deliveries printed are acked."""
    client.create_queue("jobs", max_history=10)
    proc = msgboard(server, "watch", "jobs", "--manual-ack", "--max", "2")
    assert proc.stdin is not None
    proc.stdin.write("ack 1\nack 2\n")
    proc.stdin.flush()
    client.post_many("jobs", [("n", 1), ("n", 2)])
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, "")
    assert [x.split("  ")[:2] for x in out.splitlines()] == [["1", "jobs#1"], ["2", "jobs#2"]]
    q = client.get_queue("jobs")
    assert (q.unprocessed, q.history) == (0, 2)


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    for word in words:
        [subs] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert word in subs.choices, f"no command {word!r}"
        parser = subs.choices[word]
    return parser


def test_every_rpc_has_a_command() -> None:
    """Every RPC of the Board service (from the proto's descriptor) is in
    RPC_COMMANDS, each command there exists in the parser with its options,
    and docs/operating.md lists each pair."""
    rpcs = {m.name for m in pb.DESCRIPTOR.services_by_name["Board"].methods}
    assert set(RPC_COMMANDS) == rpcs
    parser = build_parser()
    doc = (Path(__file__).parent.parent / "docs" / "operating.md").read_text()
    for rpc, commands in RPC_COMMANDS.items():
        for command in commands:
            words = command.split()
            sub = _subparser(parser, [w for w in words if not w.startswith("--")])
            options = {o for a in sub._actions for o in a.option_strings}
            assert {w for w in words if w.startswith("--")} <= options, command
            assert "--json" in options, command
            assert f"| {rpc} |" in doc and f"`msgboard {command}`" in doc, (rpc, command)


def test_watch_manual_ack_ends_at_the_end_of_input(server: ServerThread, client: Client) -> None:
    """Given a queue of one message and ``printf 'ack 1\\nack 2\\n' | msgboard
    watch Q --manual-ack --max 2``, I expect the watch to end soon after its
    input does: the first delivery acked, the line waiting for a second one
    reported (status 1), and no consumer left attached."""
    client.create_queue("jobs", max_history=10)
    client.post("jobs", ("n", 1))
    proc = msgboard(server, "watch", "jobs", "--manual-ack", "--max", "2")
    try:
        out, err = proc.communicate("ack 1\nack 2\n", timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert [x.split("  ")[:2] for x in out.splitlines()] == [["1", "jobs#1"]]
    assert "stdin line 2: delivery 2 had not come" in err
    q = client.get_queue("jobs")
    assert (q.unprocessed, q.history) == (0, 1)
    for _ in range(100):
        if not client.list_consumers():
            break
        time.sleep(0.1)
    assert client.list_consumers() == []


def on_terminal(server: ServerThread, *args: str, stdout_too: bool = True) -> tuple[int, str, str]:
    """The command with stderr (and stdout, unless ``stdout_too`` is False:
    then piped) on a pseudo-terminal: (status, what the terminal showed, stdout
    if piped)."""
    master, slave = pty.openpty()
    with os.fdopen(master, "rb", buffering=0) as tty:
        proc = subprocess.Popen(
            [sys.executable, "-m", "msgboard", *args, "--server", server.address],
            stdin=subprocess.DEVNULL,
            stdout=slave if stdout_too else subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        os.close(slave)
        out, _ = proc.communicate(timeout=60)
        shown = _read_all(tty).replace("\r\n", "\n")
    return proc.returncode, shown, out or ""


def piped(server: ServerThread, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "msgboard", *args, "--server", server.address],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_take_or_read_that_finds_nothing_says_so_on_a_terminal(
    server: ServerThread, client: Client
) -> None:
    """Given an empty queue, I expect take and read to exit 3, saying so on
    stderr, on a terminal and to a pipe alike (issue 35 item 9: a script's
    log says why), never on stdout."""
    client.create_queue("jobs")
    code, shown, out = on_terminal(server, "take", "jobs", stdout_too=False)
    assert (code, out) == (3, "")
    assert shown == "msgboard: take: no message matches in 'jobs' (exit status 3)\n"
    code, shown, _ = on_terminal(server, "read", "jobs", "--timeout", "0.2")
    assert code == 3 and "read: no message matches in 'jobs' within 0.2 s" in shown
    code, shown, _ = on_terminal(server, "take", "jobs", "--lease", "5")
    assert code == 3 and "no message matches" in shown
    piped_ = piped(server, "take", "jobs")
    assert (piped_.returncode, piped_.stdout) == (3, "")
    assert piped_.stderr == "msgboard: take: no message matches in 'jobs' (exit status 3)\n"


def test_empty_lists_say_so_on_a_terminal(server: ServerThread, client: Client) -> None:
    """Given no consumers and no queues, I expect consumer list and queue
    list to say so on a terminal, and print nothing to a pipe."""
    assert on_terminal(server, "queue", "list")[:2] == (0, "msgboard: no queues\n")
    assert on_terminal(server, "consumer", "list")[:2] == (0, "msgboard: no consumers\n")
    for args in (("consumer", "list"), ("queue", "list")):
        quiet = piped(server, *args)
        assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    client.create_queue("jobs")
    code, shown, _ = on_terminal(server, "consumer", "list", "jobs")
    assert (code, shown) == (0, "msgboard: no consumers of 'jobs'\n")


def test_stats_and_queue_list_are_tables_on_a_terminal(
    server: ServerThread, client: Client
) -> None:
    """Given two queues, I expect stats and queue list as a table on a
    terminal (a header, one aligned row a queue, numbers to the right),
    key=value lines to a pipe, and JSON under --json."""
    client.create_queue("jobs")
    client.create_queue("a-much-longer-name", max_unprocessed=5)
    client.post_many("jobs", [("n", i) for i in range(12)])
    code, shown, _ = on_terminal(server, "queue", "list")
    header, *rows = shown.splitlines()
    assert code == 0 and header.split()[:3] == ["name", "transient", "max_unprocessed"]
    assert "=" not in shown and [r.split()[0] for r in rows] == ["a-much-longer-name", "jobs"]
    end = header.index(" unprocessed ") + len(" unprocessed")  # its column's right edge
    assert [r[:end].split()[-1] for r in rows] == ["0", "12"]  # numbers to the right
    code, shown, _ = on_terminal(server, "stats")
    board, blank, header, *rows = shown.splitlines()
    assert (code, blank) == (0, "") and board.startswith("sync=")
    assert header.split()[:3] == ["queue", "transient", "unprocessed"]
    assert [r.split()[:3] for r in rows] == [
        ["a-much-longer-name", "no", "0"],
        ["jobs", "no", "12"],
    ]
    listed = piped(server, "queue", "list").stdout.splitlines()
    assert [x.split("  ")[0] for x in listed] == ["name=a-much-longer-name", "name=jobs"]
    as_json = piped(server, "stats", "--json").stdout.splitlines()
    assert [json.loads(x).get("queue") for x in as_json] == [None, "a-much-longer-name", "jobs"]


def test_one_posted_message_is_singular(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    client.create_queue("jobs")
    f = tmp_path / "one.ndjson"
    f.write_text('{"tuple": [1]}\n')
    code, out, _ = run(server, capsys, "post", "jobs", "--ndjson", str(f))
    assert code == 0 and out.startswith("posted 1 message in ")


def test_purge_move_delete_and_release_commands(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given dead letters of an overflowing queue, I expect `move --to-origin`
    to put them back, `move`, `delete` and `release` to print a row per
    message, `queue purge` its counts, and a bad choice refused with
    status 2 before any call."""
    client.create_queue("shop.dlq")
    client.create_queue(
        "shop", max_unprocessed=2, overflow="dead-letter", dead_letter="shop.dlq", max_history=9
    )
    client.create_queue("shop.parked")
    for i in range(4):
        client.post("shop", ("order", i))
    client.take("shop", max=2)
    code, out, _ = run(server, capsys, "move", "shop.dlq", "--to-origin", "--all", "--json")
    assert code == 0
    assert lines(out) == [
        {"seq": 1, "to": "shop", "new_seq": 3},
        {"seq": 2, "to": "shop", "new_seq": 4},
    ]
    code, out, _ = run(server, capsys, "move", "shop", "shop.parked", "--seq", "4", "--json")
    assert (code, lines(out)) == (0, [{"seq": 4, "to": "shop.parked", "new_seq": 1}])
    code, out, _ = run(server, capsys, "delete", "shop", "--tuple", '["order", "?int"]', "--json")
    assert (code, lines(out)) == (0, [{"deleted": 3}])
    client.post("shop", ("order", 9))
    [d] = client.take_leased("shop", lease=3600)
    code, out, _ = run(server, capsys, "lease", "list", "shop", "--json")
    [row] = lines(out)
    assert (code, row["lease"], row["queue"], row["seq"]) == (0, d.id, "shop", d.message.seq)
    code, out, _ = run(server, capsys, "release", "shop", str(d.message.seq), "--json")
    assert (code, lines(out)) == (0, [{"released": d.message.seq}])
    code, out, _ = run(server, capsys, "queue", "purge", "shop", "--history", "--json")
    assert (code, lines(out)) == (0, [{"queue": "shop", "purged": 1, "history_purged": 3}])
    assert client.get_queue("shop.parked").unprocessed == 1
    for bad in (
        ["move", "shop.parked"],
        ["move", "shop.parked", "shop", "--to-origin"],
        ["delete", "shop.parked"],
        ["delete", "shop.parked", "--all", "--seq", "1"],
        ["move", "shop.parked", "shop", "--seq", "1", "--filter", "t[1] > 1"],
    ):
        code, _, err = run(server, capsys, *bad)
        assert code == 2, bad
    code, _, err = run(server, capsys, "move", "shop.parked", "shop", "--seq", "7", "--json")
    assert code == 1 and json.loads(err)["error"]["code"] == "NOT_FOUND"
    assert client.get_queue("shop.parked").unprocessed == 1
