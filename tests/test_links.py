"""Links between boards, told as stories with two real boards on loopback
(each a ServerThread over its own LMDB directory, port 0): a link is
created, listed, connected, kept across a restart and deleted; bad links
and selectors to unknown links are refused with the right status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgboard.cli import main
from msgboard.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from tests.browser import ConsoleBoard
from tests.faults import wait_for
from tests.twoboards import Boards


def test_a_link_is_created_connects_is_listed_and_deleted(boards: Boards) -> None:
    """Given two boards, when I link the site to central, I expect the link
    listed, connected (a link.connected event on the site's $sys), its token
    never shown, the same spec again accepted, another refused; deleting it
    leaves no link."""
    v = boards.s.create_link("central", boards.central.address, token="secret")
    assert v.spec.name == "central" and v.spec.server == boards.central.address
    assert v.spec.token == ""  # write-only
    wait_for(lambda: boards.link().connected, "the link connected")
    v = boards.link()
    assert v.state == "connected" and v.last_error == "" and v.spec.token == ""
    events = boards.s.read("$sys", ("link.connected", str, str), max=10)
    assert [m.tuple[1] for m in events] == ["central"]
    assert boards.s.create_link("central", boards.central.address, token="secret")
    with pytest.raises(AlreadyExists, match="central"):
        boards.s.create_link("central", "127.0.0.1:9")
    boards.s.delete_link("central")
    assert boards.s.list_links() == []
    with pytest.raises(NotFound, match="central"):
        boards.s.delete_link("central")


def test_a_link_is_kept_across_a_restart(boards: Boards) -> None:
    """Given a link, when the site board restarts, I expect the link loaded
    from the store and connected again."""
    boards.s.create_link("central", boards.central.address)
    boards.restart_site()
    wait_for(lambda: boards.link().connected, "the link connected after the restart")


def test_a_link_to_an_unreachable_address_is_created_and_says_why(boards: Boards) -> None:
    """Given nothing listening at an address, when I link to it, I expect
    the link created (it will connect when the board is there) but shown
    disconnected with the reason, and a link.disconnected event saying it."""
    dead = _dead_address()
    boards.s.create_link("nowhere", dead)
    wait_for(lambda: boards.link("nowhere").state == "disconnected", "disconnected")
    v = boards.link("nowhere")
    assert not v.connected and v.last_error.startswith("UNAVAILABLE"), v.last_error
    [event] = boards.s.read("$sys", ("link.disconnected", "nowhere", str), max=10)
    assert "UNAVAILABLE" in str(event.tuple[2])


@pytest.mark.parametrize(
    ("name", "server", "field"),
    [
        ("", "127.0.0.1:1", "spec.name"),
        ("a b", "127.0.0.1:1", "spec.name"),
        ("ok", "", "spec.server"),
        ("ok", "no-port", "spec.server"),
        ("ok", "127.0.0.1:99999", "spec.server"),
        ("ok", "127.0.0.1:1,", "spec.server"),
    ],
)
def test_a_bad_link_is_refused_naming_its_field(
    boards: Boards, name: str, server: str, field: str
) -> None:
    with pytest.raises(InvalidArgument) as e:
        boards.s.create_link(name, server)
    assert e.value.field == field
    assert boards.s.list_links() == []


def test_a_selector_to_an_unknown_link_is_refused_naming_it(boards: Boards) -> None:
    """Given no link named "hq", a selector to "hq:jobs" is FAILED_PRECONDITION
    naming the link and the field; nothing is created."""
    boards.s.create_queue("out")
    with pytest.raises(FailedPrecondition, match=r"spec\.destination_link: no link named 'hq'"):
        boards.s.create_selector("out", to="jobs", link="hq")
    assert boards.s.list_selectors() == []
    assert [q.spec.name for q in boards.s.list_queues()] == ["out"]


def test_a_link_crossed_by_a_selector_cannot_be_deleted(boards: Boards) -> None:
    boards.s.create_queue("out")
    boards.s.create_link("central", boards.central.address)
    sel = boards.s.create_selector("out", to="in", link="central")
    with pytest.raises(FailedPrecondition, match=sel.id):
        boards.s.delete_link("central")
    boards.s.delete_selector(sel.id)  # and its outbox with it
    assert [q.spec.name for q in boards.s.list_queues()] == ["out"]
    boards.s.delete_link("central")


def test_a_crossing_selector_lists_as_created(boards: Boards) -> None:
    """The selector shows its remote queue and link, and its outbox is a
    queue of the board's own ($link.ID) that no one may post to."""
    boards.s.create_queue("out")
    boards.s.create_link("central", boards.central.address)
    sel = boards.s.create_selector("out", to="in", link="central", op="copy")
    [v] = boards.s.list_selectors("out")
    assert (v.spec.destination, v.spec.destination_link) == ("in", "central")
    assert f"$link.{sel.id}" in {q.spec.name for q in boards.s.list_queues()}
    with pytest.raises(InvalidArgument):
        boards.s.post(f"$link.{sel.id}", ("x",))


def _dead_address() -> str:
    """A loopback address where nothing listens (a port bound, then freed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_links_from_the_command_line(
    boards: Boards, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """msgboard link create|list|delete, and selector create --to LINK:QUEUE
    crossing only when the board has that link (else a local queue with a
    ':' in its name); a bad link file is named."""
    site = ["--server", boards.site.address, "--json"]

    def run(*args: str) -> tuple[int, list[dict[str, object]]]:
        code = main([*args, *site])
        out = capsys.readouterr().out
        return code, [json.loads(x) for x in out.splitlines() if x.strip()]

    boards.c.create_queue("in")
    boards.s.create_queue("out")
    boards.s.create_queue("hq:in")
    code, [made] = run("link", "create", "central", boards.central.address, "--link-token", "t")
    assert code == 0 and made["name"] == "central" and made["address"] == boards.central.address
    assert main(["link", "create", "x", "127.0.0.1:1", "--link-tls-ca", str(tmp_path / "no")]) == 2
    capsys.readouterr()
    code, [crossing] = run("selector", "create", "out", "--to", "central:in")
    assert crossing["to"] == "central:in"
    code, [local] = run("selector", "create", "out", "--op", "copy", "--to", "hq:in")
    assert local["to"] == "hq:in"
    [v] = [s for s in boards.s.list_selectors("out") if s.id == local["id"]]
    assert (v.spec.destination_link, v.spec.destination) == ("", "hq:in")
    wait_for(lambda: boards.link().connected, "connected")
    code, [listed] = run("link", "list")
    assert (listed["name"], listed["state"], listed["selectors"]) == (
        "central",
        "connected",
        crossing["id"],
    )
    assert main(["link", "delete", "central", *site]) == 1  # a selector crosses it
    assert "FailedPrecondition" in capsys.readouterr().err
    assert run("selector", "delete", str(crossing["id"]))[0] == 0
    assert run("link", "delete", "central") == (0, [{"deleted": "central"}])
    assert run("link", "list") == (0, [])


def test_the_console_lists_the_links_with_their_state(tmp_path: Path) -> None:
    """A served board's console (Cluster and links) lists each link, its
    remote board and state, once the board has one."""
    board = ConsoleBoard(tmp_path)
    try:
        assert "No links." in board.get("/cluster/body")[1]
        with board.client() as c:
            c.create_link("self", board.address)
            wait_for(lambda: c.list_links()[0].connected, "connected")
        status, body = board.get("/cluster/body")
        assert status == 200 and "No links." not in body
        assert "self" in body and board.address in body and "connected" in body
    finally:
        board.stop()
