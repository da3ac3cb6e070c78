"""Filters end to end: Take, Read and Browse with a filter through a real
server, a bad filter refused with its column, a blocked Take woken only by
a message its filter accepts, and --filter on the command line."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from msgboard.cli import main
from msgboard.client import Client
from msgboard.errors import InvalidArgument
from msgboard.testing import ServerThread

# ---------------------------------------------------------------- end to end


def test_take_read_and_browse_filter_through_the_server(client: Client) -> None:
    """Given a queue of jobs with priorities, headers and tuples, when I
    Take, Read and Browse with filters over the real server, I expect only
    what the filter accepts, after the address and templates matched."""
    client.create_queue("jobs", max_history=100)
    for i in range(1, 7):
        client.post(
            "jobs",
            ("job", i),
            address=f"img.{'big' if i % 2 else 'small'}",
            priority=i,
            headers={"color": "red" if i <= 3 else "blue"},
        )
    flt = "priority > 2 AND color IN ('red', 'green')"
    assert [m.seq for m in client.read("jobs", filter=flt, max=10)] == [3]
    assert [m.seq for m in client.read("jobs", filter="t[1] BETWEEN 2 AND 5", max=10)] == [
        2,
        3,
        4,
        5,
    ]
    got = client.read("jobs", ("job", int), address="topic:img.big", filter="t[1] >= 3", max=9)
    assert [m.seq for m in got] == [3, 5]
    [taken] = client.take("jobs", filter="color = 'blue' AND NOT t[1] = 4")
    assert taken.seq == 5
    page = client.browse("jobs", filter="address LIKE '%small' OR seq = 5")
    assert [m.seq for m in page.messages] == [2, 4, 5, 6]  # history included
    assert client.read("jobs", filter="missing = 'x' OR missing <> 'x'") == []


def test_a_bad_filter_is_invalid_argument_and_the_board_carries_on(client: Client) -> None:
    """Given a filter that does not parse, expect INVALID_ARGUMENT naming the
    column for Take, Read and Browse, the board unchanged and serving."""
    client.create_queue("q")
    client.post("q", (1,))
    for call in (
        lambda: client.take("q", filter="t[0] = = 1"),
        lambda: client.read("q", filter="t[0] = = 1"),
        lambda: client.browse("q", filter="t[0] = = 1"),
    ):
        with pytest.raises(InvalidArgument, match=r"pattern\.filter: expected a value, found = at"):
            call()
    with pytest.raises(InvalidArgument, match="nested more than"):
        client.take("q", filter="(" * 2000 + "TRUE" + ")" * 2000)
    assert client.get_queue("q").unprocessed == 1
    assert [m.tuple for m in client.take("q", filter="t[0] = 1")] == [(1,)]


def test_a_blocked_take_wakes_only_for_a_message_its_filter_accepts(client: Client) -> None:
    """Given a Take waiting with a filter, when I post a message it refuses
    and then one it accepts, I expect it to take the second."""
    client.create_queue("q")
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.take, "q", filter="priority >= 5", timeout=60)
        while client.get_queue("q").waiting == 0:
            time.sleep(0.01)
        client.post("q", ("low",), priority=1)
        client.post("q", ("high",), priority=9)
        [m] = waiting.result()
    assert m.tuple == ("high",)
    assert [x.tuple for x in client.read("q")] == [("low",)]


def test_filter_on_the_command_line(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given --filter on take, read and browse, expect it applied; given a
    bad one, exit status 2 with the column on standard error."""

    def run(*args: str) -> tuple[int, str]:
        code = main([*args, "--server", server.address])
        out, err = capsys.readouterr()
        return code, out + err

    run("queue", "create", "q", "--max-history", "10")
    run("post", "q", "--tuple", '["a", 1]', "--priority", "1")
    run("post", "q", "--tuple", '["b", 2]', "--priority", "7", "--header", "color=red")
    code, out = run("read", "q", "--filter", "priority > 5", "--json")
    assert code == 0 and '"seq": 2' in out and '"seq": 1' not in out
    code, out = run("take", "q", "--filter", "color IS NULL", "--json")
    assert code == 0 and '"seq": 1' in out
    code, out = run("browse", "q", "--filter", "t[1] = 1", "--json")
    assert code == 0 and '"seq": 1' in out and '"seq": 2' not in out
    code, out = run("take", "q", "--filter", "priority >")
    assert code == 2 and "INVALID_ARGUMENT" in out and "at column 11" in out and "^" in out
