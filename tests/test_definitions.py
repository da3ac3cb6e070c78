"""A board's definitions as one JSON file (issue 35 item 8), from the CLI.

Given a board with queues (one dead-lettering into another), durable
selectors (a MOVE with a pattern, a terminal one, one across a link) and a
link, when I export its definitions with ``msgboard definitions export``
and import the file into an empty board, I expect the same queues with the
same properties, the same selectors and the link (without its token), and
importing it again to create nothing; a file that does not read is refused
naming the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgboard import definitions as defs
from msgboard.cli.main import main
from msgboard.client import Client
from msgboard.errors import InvalidArgument
from msgboard.testing import ServerThread


def specs(c: Client) -> tuple[list[object], list[object], list[str]]:
    queues = sorted((v.spec for v in c.list_queues()), key=lambda s: s.name)
    selectors = sorted((v.spec for v in c.list_selectors() if v.durable), key=repr)
    return queues, selectors, sorted(v.spec.name for v in c.list_links())


def test_export_then_import_into_an_empty_board(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = ServerThread(tmp_path / "a").start()
    b = ServerThread(tmp_path / "b").start()
    try:
        with Client(a.address, timeout=30) as c:
            c.create_link("central", "127.0.0.1:1", token="secret-token")
            c.create_queue("orders.dlq", max_history=100)
            c.create_queue("orders", dead_letter="orders.dlq", max_deliveries=3, max_unprocessed=50)
            c.create_queue("orders.eu", transient=True)
            c.create_selector("orders", op="move", to="orders.eu", templates=[("eu", int)])
            c.create_selector("orders", op="copy", credit=10)
            c.create_selector("orders.dlq", to="all.dlq", link="central")
            with c.subscribe("orders"):  # a session selector: not a definition
                out = tmp_path / "defs.json"
                assert main(["definitions", "export", str(out), "--server", a.address]) == 0
            want = specs(c)
        body = json.loads(out.read_text())
        assert body["format"] == defs.FORMAT
        assert "secret-token" not in out.read_text()
        assert [q["name"] for q in body["queues"]] == ["orders", "orders.dlq", "orders.eu"]
        assert len(body["selectors"]) == 3 and len(body["links"]) == 1
        capsys.readouterr()
        assert main(["definitions", "import", str(out), "--server", b.address]) == 0
        said = capsys.readouterr().out
        assert "created 3 queue(s), 3 selector(s), 1 link(s); 0 already there" in said
        with Client(b.address, timeout=30) as c:
            assert specs(c) == want
            # Again: nothing new.
            assert main(["definitions", "import", str(out), "--server", b.address]) == 0
            assert "created 0 queue(s), 0 selector(s), 0 link(s); 7 already there" in (
                capsys.readouterr().out
            )
            assert len(c.list_selectors()) == 3
    finally:
        a.stop()
        b.stop()


def test_a_file_that_does_not_read_names_the_entry() -> None:
    with pytest.raises(InvalidArgument) as e:
        defs.loads('{"format": "msgboard.definitions/1", "queues": [{"name": "a"}, {"nam": 1}]}')
    assert e.value.field == "queues[1]" and str(e.value).startswith("queues[1]: ")
    with pytest.raises(InvalidArgument, match="not a definitions file"):
        defs.loads('{"queues": []}')
