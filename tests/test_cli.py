"""The msgboard command, in-process against a real server."""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from msgboard.cli import build_parser, main
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.testing import ServerThread


def run(server: ServerThread, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main([*args, "--server", server.address])
    out, err = capsys.readouterr()
    return code, out + err


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def test_a_session_from_the_command_line(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a running board, when I create a queue, post tuples and take,
    read and browse them with --json, I expect one JSON object per line."""
    assert run(server, capsys, "queue", "create", "jobs", "--max-history", "unlimited")[0] == 0
    code, out = run(
        server,
        capsys,
        "post",
        "jobs",
        "--tuple",
        '["job", 7, 2.5, null]',
        "--address",
        "rec.pets.cats",
        "--header",
        "owner=ann",
        "--body",
        "hello",
    )
    assert (code, out.strip()) == (0, "1")
    run(server, capsys, "post", "jobs", "--tuple", '["job", 8, 1.0, null]')
    code, out = run(
        server,
        capsys,
        "read",
        "jobs",
        "--tuple",
        '["job", "?int", {"range": [2, 3]}, "?"]',
        "--json",
    )
    [m] = lines(out)
    assert m["seq"] == 1 and m["tuple"] == ["job", 7, 2.5, None] and m["body"] == "hello"
    assert m["headers"] == {"owner": "ann"} and m["address"] == "rec.pets.cats"
    code, out = run(server, capsys, "take", "jobs", "--address", "topic:rec.#", "--json")
    assert [x["seq"] for x in lines(out)] == [1]
    code, out = run(server, capsys, "take", "jobs", "--max", "5", "--json")
    assert [x["seq"] for x in lines(out)] == [2]
    code, out = run(server, capsys, "take", "jobs", "--timeout", "0.1")
    assert (
        code == 3
        and out == "msgboard: take: no message matches in 'jobs' within 0.1 s (exit status 3)\n"
    )
    code, out = run(server, capsys, "browse", "jobs", "--backward", "--json")
    assert [x["seq"] for x in lines(out)] == [2, 1]
    assert all(x["section"] == "history" for x in lines(out))
    code, out = run(server, capsys, "queue", "list", "--json")
    [q] = lines(out)
    assert q["name"] == "jobs" and q["history"] == 2 and q["max_history"] == "unlimited"
    code, out = run(server, capsys, "stats", "--json")
    board, row = lines(out)
    assert board["board"]["sync"] == "fsync"  # type: ignore[index]
    assert row["posted"] == 2 and row["taken"] == 2
    assert run(server, capsys, "queue", "delete", "jobs")[0] == 0
    code, out = run(server, capsys, "queue", "get", "jobs")
    assert code == 1 and "NOT_FOUND" in out


def test_bad_input_on_the_command_line_says_what_and_where(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    run(server, capsys, "queue", "create", "q")
    code, out = run(server, capsys, "take", "q", "--tuple", '["a", {"range": [5, 1]}]')
    assert code == 2 and "INVALID_ARGUMENT" in out and "range" in out
    code, out = run(server, capsys, "post", "q", "--tuple", "[1, 2")
    assert code == 2 and "--tuple" in out and "JSON" in out
    code, out = run(server, capsys, "post", "q", "--header", "novalue")
    assert code == 2 and "KEY=VALUE" in out
    code, out = run(server, capsys, "take", "q", "--address", "topic:a.b*")
    assert code == 2 and "INVALID_ARGUMENT" in out


def test_seed_patterns_from_the_command_line(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wolfpack, Parrot and Housecat from the CLI: selectors print their ids,
    watch prints deliveries (acking them) and exits after --max."""
    for q in ("pets", "cats", "dogs"):
        assert run(server, capsys, "queue", "create", q)[0] == 0
    # Housecat: address EQ selectors.
    for animal in ("cat", "dog"):
        code, out = run(
            server, capsys, "selector", "create", "pets", "--to", animal + "s",
            "--address", f"eq:{animal}",
        )  # fmt: skip
        assert code == 0 and out.strip().startswith("sel-")
    for animal in ("cat", "dog", "cat"):
        run(server, capsys, "post", "pets", "--address", animal, "--tuple", f'["{animal}"]')
    code, out = run(server, capsys, "watch", "cats", "--max", "2", "--json")
    assert code == 0
    assert [d["tuple"] for d in lines(out)] == [["cat"], ["cat"]]
    assert [d["delivery"] for d in lines(out)] == [1, 2]
    code, out = run(server, capsys, "selector", "list", "pets", "--json")
    assert [d["to"] for d in lines(out)] == ["cats", "dogs"]
    code, out = run(server, capsys, "stats", "cats", "--json")
    assert lines(out)[1]["unprocessed"] == 0  # watch acked both

    # Wolfpack: MOVE selectors share the work; Parrot: COPY gets everything.
    run(server, capsys, "queue", "create", "work", "--unmatched", "hold")
    run(server, capsys, "queue", "create", "w1")
    run(server, capsys, "queue", "create", "w2")
    run(server, capsys, "queue", "create", "tap")
    for dest in ("w1", "w2"):
        run(server, capsys, "selector", "create", "work", "--to", dest)
    run(server, capsys, "selector", "create", "work", "--op", "copy", "--to", "tap")
    for i in range(4):
        run(server, capsys, "post", "work", "--tuple", f"[{i}]")
    code, out = run(server, capsys, "read", "w1", "--max", "9", "--json")
    assert [d["tuple"] for d in lines(out)] == [[0], [2]]
    code, out = run(server, capsys, "read", "w2", "--max", "9", "--json")
    assert [d["tuple"] for d in lines(out)] == [[1], [3]]
    code, out = run(server, capsys, "read", "tap", "--max", "9", "--json")
    assert [d["tuple"] for d in lines(out)] == [[0], [1], [2], [3]]


def test_selector_errors_from_the_command_line(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    run(server, capsys, "queue", "create", "a")
    code, out = run(server, capsys, "selector", "create", "a", "--to", "missing")
    assert code == 1 and "NOT_FOUND" in out
    code, out = run(server, capsys, "selector", "create", "a", "--to", "a")
    assert code == 1 and "FAILED_PRECONDITION" in out and "cycle" in out
    code, out = run(server, capsys, "selector", "create", "a", "--credit", "-3")
    assert code == 2 and "credit" in out
    code, out = run(server, capsys, "selector", "delete", "sel-77")
    assert code == 1 and "NOT_FOUND" in out


def _helps(parser: argparse.ArgumentParser) -> Iterator[str]:
    """The help text of a parser and of every command under it."""
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _helps(sub)


def test_help_is_plain_text() -> None:
    """msgboard --help, and every command's --help, reads as plain text: no
    reStructuredText markup; the top page explains the notation."""
    helps = list(_helps(build_parser()))
    assert len(helps) > 15
    for text in helps:
        assert "``" not in text and ":class:" not in text and "::" not in text, text
    top = helps[0]
    assert "$MSGBOARD_SERVER" in top and '"?int"' in top and "topic:" in top


@pytest.mark.parametrize(
    "command",
    [["watch", "q"], ["take", "q", "--timeout", "60"], ["read", "q", "--timeout", "60"]],
    ids=["watch", "take", "read"],
)
def test_ctrl_c_ends_a_long_running_command_quietly(
    server: ServerThread, client: Client, command: list[str]
) -> None:
    """Given a command that waits on the board (watch after printing three
    deliveries, a take or read with a timeout), when I press Ctrl-C, I expect
    exit status 130, nothing on standard error, and for watch, the three
    messages it printed acked (they do not come back)."""
    client.create_queue("q")
    watching = command[0] == "watch"
    if watching:
        client.post_many("q", [("n", i) for i in range(3)])
    # Ctrl-C raises KeyboardInterrupt in the child as in a terminal, whatever
    # the test run inherited: a shell starts background commands (`cmd &`)
    # with SIGINT ignored. Set in the child after exec: a preexec_fn would
    # run Python between fork and exec of this multi-threaded process (gRPC's
    # threads), which can deadlock the child before it ever runs.
    interruptible = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'msgboard'; runpy.run_module('msgboard', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", interruptible, *command, "--server", server.address, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if watching:
        printed = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert [m["tuple"] for m in printed] == [["n", i] for i in range(3)]
    else:  # the call is waiting on the board once the queue has a blocked caller
        while client.get_queue("q").waiting == 0:
            time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "")
    if watching:
        q = client.get_queue("q")
        assert (q.unprocessed, q.history) == (0, 0)


def test_a_closed_pipe_ends_a_listing_quietly(server: ServerThread, client: Client) -> None:
    """Given ``msgboard queue list | head -3`` over more queues than a pipe
    holds, expect three lines, no traceback on stderr, and the exit status
    of a command ended by SIGPIPE (141)."""
    for i in range(600):
        client.create_queue(f"queue-with-a-longish-name-{i:04d}", transient=True)
    shell = subprocess.run(
        f"{sys.executable} -m msgboard queue list --server {server.address} | head -3;"
        ' echo "status=${PIPESTATUS[0]}"',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = shell.stdout.splitlines()
    assert len(out) == 4 and out[0].startswith("name=queue-with-a-longish-name-")
    assert (out[3], shell.stderr) == ("status=141", "")


def _every_action(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_action(sub, (*words, name))
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield " ".join(words), action


def test_every_option_and_positional_has_help_with_its_default() -> None:
    """Given every command's options and positionals, expect a help text for
    each, and the defaults shown (--max, --limit, --credit...)."""
    undocumented = [
        f"{cmd} {a.option_strings or a.dest}"
        for cmd, a in _every_action(build_parser())
        if not a.help
    ]
    assert undocumented == []
    flat = {}
    for text in _helps(build_parser()):
        words = text.split()[1:]
        command = " ".join(itertools.takewhile(lambda w: not w.startswith("["), words))
        flat[command] = " ".join(words)
    assert "--max N messages at most (default: 1)" in flat["msgboard take"]
    assert "--limit N messages on the page at most (default: 100)" in flat["msgboard browse"]
    assert (
        "--credit N deliveries in flight at most (unacked) (default: 100)" in flat["msgboard watch"]
    )
    assert "--op {move,copy,delete,bounce} what it does" in flat["msgboard selector create"]
    assert "(default: move)" in flat["msgboard selector create"]
    assert "--role {normal,default,overflow} default:" in flat["msgboard selector create"]
    assert "(default: reject)" in flat["msgboard queue create"]
    assert "[env MSGBOARD_DATA; default './msgboard-data']" in flat["msgboard serve"]


def test_version_and_a_commands_own_usage_on_a_bad_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Given --version, expect the version; given a misspelt option of a
    command, expect that command's usage, not the list of commands; given
    check --json, expect the report as one JSON object."""
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"msgboard {version('msgboard')}\n"
    with pytest.raises(SystemExit) as e:
        main(["serve", "--listne", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("usage: msgboard serve ")
    assert "msgboard serve: error: unrecognized arguments: --listne 127.0.0.1:0" in err
    with pytest.raises(SystemExit):
        main(["queue", "list", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: msgboard queue list ")
    Board(tmp_path / "b").close()
    assert main(["check", str(tmp_path / "b"), "--json"]) == 0
    [report] = lines(capsys.readouterr().out)
    assert report["ok"] is True and report["queues"] == [] and report["path"] == str(tmp_path / "b")


def test_start_oldest_replays_from_the_oldest_message(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a message already on a queue, a COPY watch with --start oldest
    (the proto's POSITION_OLDEST; `head` stays accepted) replays it."""
    assert run(server, capsys, "queue", "create", "news")[0] == 0
    assert run(server, capsys, "post", "news", "--tuple", '["first"]')[0] == 0
    for start in ("oldest", "head"):
        code, out = run(
            server, capsys, "watch", "news", "--copy", "--start", start, "--max", "1", "--json"
        )
        assert code == 0
        assert [d["tuple"] for d in lines(out)] == [["first"]]
