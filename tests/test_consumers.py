"""Who is connected, over the wire: ListConsumers and KickConsumer, from the
client and from `msgboard consumer list|kick`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgboard.cli import main
from msgboard.client import Client
from msgboard.config import ServeConfig
from msgboard.errors import Kicked, NotFound
from msgboard.security import Security
from msgboard.security.auth import token_hash
from msgboard.testing import ServerThread


def test_a_consumer_is_listed_then_kicked_and_its_message_goes_back(
    server: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a consumer holding one unacked delivery, I expect `consumer list`
    to show it with its peer, credit and counts, and `consumer kick` to end
    its stream with Kicked and give the message back to the queue."""
    c = Client(server.address)
    c.create_queue("jobs")
    c.post("jobs", ("job", 1))
    with c.subscribe("jobs", credit=5) as sub:
        d = next(iter(sub))
        [v] = c.list_consumers("jobs")
        assert (v.queue, v.op, v.credit, v.outstanding, v.delivered) == ("jobs", "move", 5, 1, 1)
        assert v.peer.startswith("ipv4:127.0.0.1:") and v.since > 0

        assert main(["consumer", "list", "jobs", "--json", "--server", server.address]) == 0
        [row] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert (row["id"], row["credit"], row["outstanding"]) == (v.id, 5, 1)

        assert main(["consumer", "kick", v.id, "--server", server.address]) == 0
        assert f"id={v.id}" in capsys.readouterr().out
        with pytest.raises(Kicked):
            for _ in sub:
                pass
    assert d.message.tuple == ("job", 1)
    [back] = c.take("jobs", timeout=5)
    assert back.tuple == ("job", 1)
    assert c.list_consumers() == []


def test_unknown_consumers_and_queues_are_not_found(server: ServerThread) -> None:
    c = Client(server.address)
    with pytest.raises(NotFound, match="con-999"):
        c.kick_consumer("con-999")
    with pytest.raises(NotFound):
        c.list_consumers("no-such-queue")


def test_a_consumer_shows_who_it_is_and_where_it_calls_from(tmp_path: Path) -> None:
    """Given a board with a users file, when alice subscribes, I expect
    ListConsumers to show her name and her address, and the consumer.attached
    event on $sys to carry both."""
    users = tmp_path / "users.toml"
    users.write_text(
        "\n".join(
            [
                "[[user]]",
                'name = "alice"',
                f'token_sha256 = "{token_hash("alice-t")}"',
                "[[user.allow]]",
                'queues = "*"',
                'verbs = ["admin", "read", "write", "manage"]',
            ]
        )
    )
    config = ServeConfig(listen="127.0.0.1:0", users=str(users))
    server = ServerThread(tmp_path / "board", security=Security.build(config)).start()
    try:
        with Client(server.address, token="alice-t", timeout=20) as c:
            c.create_queue("jobs")
            with c.subscribe("jobs", credit=1):
                [v] = c.list_consumers("jobs")
                assert v.identity == "alice"
                assert v.peer.startswith("ipv4:127.0.0.1:")
            [event] = c.read("$sys", address="consumer.attached", timeout=10)
            assert event.tuple[1:] == (v.id, "jobs", v.selector, v.peer, "alice")
    finally:
        server.stop()


def test_on_an_open_board_the_identity_is_empty(server: ServerThread) -> None:
    with Client(server.address) as c:
        c.create_queue("jobs")
        with c.subscribe("jobs"):
            [v] = c.list_consumers()
        assert v.identity == ""
