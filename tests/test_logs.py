"""The server's logs: --log-format json, --log-level, and the access log
(--access-log), which never holds a message body or a token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.errors import PermissionDenied, Unauthenticated
from msgboard.security.auth import token_hash
from tests.served import Served

TOKEN = "alice-token-5b1f0c9e"
BODY = "body-never-logged-7d3a"


def _users(path: Path) -> Path:
    path.write_text(
        f"""
[[user]]
name = "alice"
token_sha256 = "{token_hash(TOKEN)}"
[[user.allow]]
queues = "jobs*"
verbs = ["read", "write", "manage"]
"""
    )
    return path


def test_json_log_lines_parse_and_carry_time_level_and_message(tmp_path: Path) -> None:
    """Given --log-format json with the access log on standard error, when a
    board serves a few calls and stops, I expect every line to be one JSON
    object with time and level, and a message (server lines) or the access
    fields (call lines)."""
    s = Served(tmp_path, "--log-format", "json", "--access-log")
    with Client(s.address) as c:
        c.create_queue("q")
        c.post("q", ("x",))
    assert s.stop() == 0
    lines = [json.loads(line) for line in s.log.read_text().splitlines()]
    assert lines and all({"time", "level", "logger"} <= set(x) for x in lines)
    messages = [x["message"] for x in lines if "message" in x]
    assert any("serving on" in m for m in messages)
    assert any("stopping" in m for m in messages)
    calls = [x for x in lines if "method" in x]
    assert [x["method"] for x in calls] == ["CreateQueue", "Post"]
    assert all(x["level"] == "info" and x["status"] == "OK" for x in calls)


@pytest.mark.parametrize(("level", "shown"), [("warning", False), ("info", True)])
def test_log_level_filters_lines_below_it(tmp_path: Path, level: str, shown: bool) -> None:
    """Given --log-level warning, I expect none of the info lines (serving
    on, stopping) that --log-level info shows."""
    s = Served(tmp_path, "--log-level", level)
    assert s.stop() == 0
    text = s.log.read_text()
    assert ("serving on" in text) is shown
    assert ("stopping" in text) is shown


def test_the_access_log_says_who_called_what_and_never_a_body_or_token(tmp_path: Path) -> None:
    """Given a board with users and --access-log FILE, when alice (a token)
    posts a distinctive body, takes it, and is denied another queue, and a
    caller with a wrong token is refused, I expect one access line per call
    with method, peer, identity, queue, status and duration, and neither the
    body nor either token (nor the token's hash) in any log."""
    access = tmp_path / "access.log"
    users = str(_users(tmp_path / "users.toml"))
    s = Served(tmp_path, "--users", users, "--access-log", str(access), "--log-level", "debug")
    try:
        with Client(s.address, token=TOKEN) as c:
            c.create_queue("jobs")
            c.post("jobs", ("x",), body=BODY, headers={"h": BODY})
            assert c.take("jobs")[0].body == BODY.encode()
            with pytest.raises(PermissionDenied):
                c.create_queue("other")
        with Client(s.address, token="wrong-token-1e2f") as w, pytest.raises(Unauthenticated):
            w.list_queues()
    finally:
        assert s.stop() == 0
    lines = access.read_text().splitlines()
    assert len(lines) == 5
    parts = [line.split(" ") for line in lines]
    methods = [line[4] for line in parts]
    assert methods == ["CreateQueue", "Post", "Take", "CreateQueue", "ListQueues"]
    fields = [dict(f.split("=", 1) for f in line[5:]) for line in parts]
    assert [f["identity"] for f in fields] == ["alice"] * 4 + ["?"]
    assert [f["queue"] for f in fields] == ["jobs", "jobs", "jobs", "other", "-"]
    assert [f["status"] for f in fields] == ["OK"] * 3 + ["PERMISSION_DENIED", "UNAUTHENTICATED"]
    assert all(f["peer"].startswith("ipv4:127.0.0.1:") for f in fields)
    assert all(float(f["duration_ms"]) >= 0 for f in fields)
    everything = access.read_text() + s.log.read_text()
    for secret in (BODY, TOKEN, "wrong-token-1e2f", token_hash(TOKEN)):
        assert secret not in everything
