"""What a newcomer trips on in the CLI and the Python client (issue 35,
items 9 to 12): a read that finds nothing says so, an unknown address kind
or a misspelt filter field is told, a server without a port is the board's
port, a CLI formal written in Python warns, a bad policy lists the good."""

from __future__ import annotations

import re
import warnings

import pytest

from msgboard.cli.main import main
from msgboard.client import Client, NotationWarning
from msgboard.client.failover import addresses_of
from msgboard.errors import InvalidArgument
from msgboard.testing import ServerThread
from tests.test_commands import run


def test_a_take_that_finds_nothing_says_so_on_stderr(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given an empty queue, I expect `take` and `read` to exit 3 and say on
    stderr (not a terminal here) that nothing matched, and within how long."""
    client.create_queue("jobs")
    for cmd in ("take", "read"):
        code, out, err = run(server, capsys, cmd, "jobs", "--timeout", "0.2")
        assert (code, out) == (3, "")
        assert f"{cmd}: no message matches in 'jobs' within 0.2 s" in err


def test_an_unknown_address_kind_is_an_error(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    client.create_queue("img")
    client.post("img", ("x",), address="img.png")
    code, _, err = run(server, capsys, "read", "img", "--address", "regex:img.*")
    assert code == 2
    assert "'regex' is not a kind of address pattern" in err
    code, _, _ = run(server, capsys, "read", "img", "--address", "prefix:img.")
    assert code == 0


def test_a_filter_on_a_field_no_message_has_warns_once(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given messages with addresses, a filter `adress = 'a'` (a misspelt
    field, read as a header) matches nothing: I expect one warning naming
    the name, the field meant and how a header is written; none for a
    header the messages have."""
    client.create_queue("q")
    client.post("q", ("x",), address="a", headers={"color": "red"})
    code, _, err = run(server, capsys, "read", "q", "--filter", "adress = 'a' OR adress = 'b'")
    assert code == 3
    warned = [x for x in err.splitlines() if "warning" in x]
    assert len(warned) == 1, err
    assert "'adress' (did you mean 'address'?)" in warned[0]
    assert "header['adress']" in warned[0]
    code, _, err = run(server, capsys, "browse", "q", "--filter", "color = 'red'")
    assert code == 0 and "warning" not in err


def test_a_server_without_a_port_is_the_boards_port() -> None:
    assert addresses_of("127.0.0.1") == ["127.0.0.1:7878"]
    assert addresses_of("localhost,b:9,[::1]") == ["localhost:7878", "b:9", "[::1]:7878"]


def test_the_cli_reaches_a_board_named_without_its_port(
    tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a board on the default port's stand-in, I expect `--server HOST`
    to add the board's port, not gRPC's 443: the client is told where."""
    monkeypatch.setattr("msgboard.client.failover.DEFAULT_PORT", 1)  # nothing listens on 1
    code = main(["queue", "list", "--server", "127.0.0.1", "--failover", "0"])
    _, err = capsys.readouterr()
    assert code != 0
    assert "127.0.0.1:1" in err and ":443" not in err


@pytest.mark.parametrize(
    ("spelled", "python"),
    [("?int", "int"), ("?", "ANY"), ("?str", "str"), ("?null", "type(None)")],
)
def test_a_cli_formal_in_a_python_template_warns(client: Client, spelled: str, python: str) -> None:
    client.create_queue("jobs")
    with pytest.warns(
        NotationWarning, match=rf"in Python that pattern is {re.escape(python)} "
    ) as got:
        client.read("jobs", ("resize", spelled))
    assert got[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.read("jobs", ("resize", int))  # the Python spelling: no warning
        client.read("jobs", ("resize", "int"))  # a plain string: none either


def test_a_bad_policy_lists_the_valid_ones(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="overflow: 'drop-old' is not one of 'reject', "):
        client.create_queue("q", overflow="drop-old")
    with pytest.raises(InvalidArgument, match="unmatched: 'drop' is not one of 'hold'"):
        client.create_queue("q", unmatched="drop")
    with pytest.raises(InvalidArgument, match="dedup_window: 1e-07 s is under 1 µs"):
        client.create_queue("q", dedup_window=1e-7)
