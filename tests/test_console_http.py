"""The console over plain HTTP (no browser): one listener for ``/metrics``
and the console, its sessions, sign-in, CSRF and permissions, its TLS.

Each test serves a real board (``tests/browser.py``'s ``ConsoleBoard``) and
speaks HTTP to it as a browser or a forger would, headers and all.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import pytest

from msgboard.console.auth import Sessions
from tests.browser import ADMIN, OPERATOR, READER, USERS, ConsoleBoard, User
from tests.pki import CA


class Browser:
    """A cookie jar and the CSRF token of the last page, over HTTP."""

    def __init__(self, board: ConsoleBoard) -> None:
        self.board = board
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def send(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> http.client.HTTPResponse:
        host, _, port = self.board.http.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        h = {k.replace("_", "-"): v for k, v in headers.items()}
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            h["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        r.text = r.read().decode()  # type: ignore[attr-defined]
        for raw in r.headers.get_all("Set-Cookie") or []:
            c = SimpleCookie(raw)
            for k, morsel in c.items():
                if morsel["max-age"] == "0" or morsel.value == "":
                    self.cookies.pop(k, None)
                else:
                    self.cookies[k] = morsel.value
        found = re.search(r'"X-CSRF-Token": "([^"]+)"', r.text)  # type: ignore[attr-defined]
        if found:
            self.csrf = found.group(1)
        conn.close()
        return r

    def sign_in(self, token: str) -> http.client.HTTPResponse:
        self.send("GET", "/signin")
        return self.send("POST", "/signin", {"csrf": self.csrf, "token": token, "next": "/"})


def text(r: http.client.HTTPResponse) -> str:
    return str(r.text)  # type: ignore[attr-defined]


@pytest.fixture
def open_board(tmp_path: Path) -> Iterator[ConsoleBoard]:
    b = ConsoleBoard(tmp_path)
    yield b
    b.stop()


@pytest.fixture
def users_board(tmp_path: Path) -> Iterator[ConsoleBoard]:
    b = ConsoleBoard(tmp_path, USERS)
    yield b
    b.stop()


def test_one_listener_serves_the_metrics_and_the_console(open_board: ConsoleBoard) -> None:
    """Given a board served with --metrics-listen, I expect Prometheus's text
    at /metrics (no cookie, no session) and the console's page at / on the
    same port, with its security headers and its assets from the package."""
    b = Browser(open_board)
    r = b.send("GET", "/metrics")
    assert r.status == 200 and "msgboard_lmdb_map_bytes" in text(r)
    assert r.getheader("Content-Type", "").startswith("text/plain")
    assert not b.cookies
    r = b.send("GET", "/")
    assert r.status == 200 and "<title>Overview" in text(r)
    csp = r.getheader("Content-Security-Policy", "")
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    scripts = csp.split("script-src")[1].split(";")[0]
    assert "unsafe-eval" not in csp and "unsafe-inline" not in scripts
    assert r.getheader("X-Frame-Options") == "DENY"
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', text(r)):
        assert b.send("GET", asset).status == 200, asset


def test_the_open_board_needs_no_sign_in_but_every_post_its_token(
    open_board: ConsoleBoard,
) -> None:
    """Given the open board, I expect its pages without sign-in, a session
    cookie that is HttpOnly and SameSite=Strict, and every POST refused
    without the session's CSRF token (header or form field)."""
    with open_board.client() as c:
        c.create_queue("jobs")
    b = Browser(open_board)
    r = b.send("GET", "/")
    cookie = r.getheader("Set-Cookie", "")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "Max-Age=" in cookie
    assert "jobs" in text(r) and "open board" in text(r)
    assert b.send("POST", "/queues/jobs/delete").status == 403
    assert b.send("POST", "/queues/jobs/delete", {"csrf": "nope"}).status == 403
    other = Browser(open_board)
    other.send("GET", "/")
    # Another session's token is not this one's.
    assert b.send("POST", "/queues/jobs/delete", X_CSRF_Token=other.csrf).status == 403
    with open_board.client() as c:
        assert c.get_queue("jobs").spec.name == "jobs"
    assert b.send("POST", "/queues/jobs/delete", {"csrf": b.csrf}).status == 200
    with open_board.client() as c:
        assert [q.spec.name for q in c.list_queues()] == []


def test_a_board_with_users_asks_for_a_token(users_board: ConsoleBoard) -> None:
    """Given a board with users, I expect every page to send me to sign in
    (htmx: 401 with HX-Redirect), a wrong token refused without saying why,
    the sign-in form itself to need its CSRF token, and the right token to
    open a new session (not the visit's id) that shows my name."""
    b = Browser(users_board)
    r = b.send("GET", "/events")
    assert r.status == 302 and r.getheader("Location") == "/signin?next=/events"
    r = b.send("GET", "/overview/rows", HX_Request="true")
    assert r.status == 401 and r.getheader("HX-Redirect") == "/signin"
    assert b.send("GET", "/metrics").status == 200  # as before: no sign-in for Prometheus
    r = b.send("GET", "/signin?next=/events")
    assert r.status == 200 and 'name="token"' in text(r)
    visit = b.cookies["msgboard_session"]
    r = b.send("POST", "/signin", {"token": OPERATOR.token, "next": "/"})
    assert r.status == 403  # no CSRF token: the form is a POST like any other
    r = b.send("POST", "/signin", {"csrf": b.csrf, "token": "wrong", "next": "/"})
    assert r.status == 401 and "not one this board knows" in text(r)
    r = b.send("POST", "/signin", {"csrf": b.csrf, "token": OPERATOR.token, "next": "/events"})
    assert r.status == 303 and r.getheader("Location") == "/events"
    assert b.cookies["msgboard_session"] != visit
    r = b.send("GET", "/events")
    assert r.status == 200 and f'<span id="me">{OPERATOR.name}</span>' in text(r)
    # Signed out, the session is gone: its cookie no longer opens anything.
    old = dict(b.cookies)
    assert b.send("POST", "/signout", {"csrf": b.csrf}).status == 303
    b.cookies = old
    assert b.send("GET", "/events").status == 302


def test_sign_in_sends_back_only_to_this_console(users_board: ConsoleBoard) -> None:
    b = Browser(users_board)
    b.send("GET", "/signin")
    for where in ("//evil.example/", "https://evil.example/", "\\\\evil", "events"):
        r = b.send("POST", "/signin", {"csrf": b.csrf, "token": ADMIN.token, "next": where})
        assert r.status == 303 and r.getheader("Location") == "/", where
        b.send("GET", "/signin")  # signed in: the form sends to / ; a fresh visit
        b.cookies.clear()
        b.send("GET", "/signin")


def test_what_a_user_sees_and_may_do_is_the_permission_table(
    users_board: ConsoleBoard,
) -> None:
    """Given queues jobs1 and other, and Rita who may read jobs* only, I
    expect her overview, its rows and its chart data to list jobs1 alone,
    a peek at other refused 403, and a forged delete of jobs1 refused 403
    (she may not manage it) with the queue still there."""
    with users_board.client(ADMIN) as c:
        c.create_queue("jobs1")
        c.create_queue("other")
        c.post("other", ("secret",))
    rita = Browser(users_board)
    assert rita.sign_in(READER.token).status == 303
    page = text(rita.send("GET", "/"))
    assert 'data-queue="jobs1"' in page and "other" not in page
    assert 'class="delete"' not in page
    assert "other" not in text(rita.send("GET", "/overview/rows", HX_Request="true"))
    deadline = time.monotonic() + 60
    while "jobs1" not in (series := text(rita.send("GET", "/overview/series.json"))):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert "other" not in series
    assert rita.send("GET", "/overview/peek?queue=other").status == 403
    assert rita.send("GET", "/overview/peek?queue=jobs1").status == 200
    r = rita.send("POST", "/queues/jobs1/delete", X_CSRF_Token=rita.csrf)
    assert r.status == 403 and "may not manage queue 'jobs1'" in text(r)
    with users_board.client(ADMIN) as c:
        assert c.get_queue("jobs1").spec.name == "jobs1"
    # Olga manages jobs*: she sees the button, and may not delete other.
    olga = Browser(users_board)
    olga.sign_in(OPERATOR.token)
    assert 'class="delete"' in text(olga.send("GET", "/"))
    assert olga.send("POST", "/queues/other/delete", X_CSRF_Token=olga.csrf).status == 403


def test_a_session_ends_when_it_expires() -> None:
    """Sessions are bounded in time and in number."""
    s = Sessions(limit=3)
    gone = s.open("alice", -1)  # already past its end
    assert s.find(gone.id) is None
    kept = [s.open(f"u{i}", 60) for i in range(4)]
    assert len(s) == 3 and s.find(kept[0].id) is None  # the oldest went first
    assert s.find(kept[3].id) is kept[3]
    assert s.find("made-up") is None
    # Visits (anyone may open the sign-in page) never push a session out.
    for _ in range(10):
        s.open("", 60)
    assert s.find(kept[3].id) is kept[3]
    assert len(s) == 6


def test_over_tls_with_client_certificates(tmp_path: Path) -> None:
    """Given a board with TLS, --tls-client-ca and a user known by her
    certificate's name, I expect the console over HTTPS to a client with a
    certificate signed by that CA, as that user without signing in, with
    a Secure session cookie; and no answer to a client without one."""
    ca = CA(tmp_path / "ca")
    cert = ca.issue("localhost", server=True)
    client = ca.issue("someone")
    certy = User("certy", "certy-token-1234567890", [("jobs*", ["read"])], cert_cn="someone")
    board = ConsoleBoard(
        tmp_path,
        (ADMIN, certy),
        *("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
        *("--tls-client-ca", str(ca.pem)),
    )
    try:
        port = int(board.http.rpartition(":")[2])
        tls = ssl.create_default_context(cafile=str(ca.pem))
        tls.load_cert_chain(str(client.cert), str(client.key))
        conn = http.client.HTTPSConnection("localhost", port, context=tls, timeout=30)
        conn.request("GET", "/")
        r = conn.getresponse()
        page = r.read().decode()
        assert r.status == 200 and "<title>Overview" in page
        assert '<span id="me">certy</span>' in page
        assert "Secure" in r.getheader("Set-Cookie", "")
        conn.close()
        bare = ssl.create_default_context(cafile=str(ca.pem))
        with pytest.raises((ssl.SSLError, OSError)):
            conn = http.client.HTTPSConnection("localhost", port, context=bare, timeout=30)
            conn.request("GET", "/")
            conn.getresponse().read()
    finally:
        board.stop()


def test_every_post_route_refuses_a_request_without_the_token(tmp_path: Path) -> None:
    """Walk every route the console registers (every page module's, now and
    later): each unsafe one is refused 403 without the session's CSRF token,
    before its page runs, on the open board where nothing else would stop
    it; and the queue named in its path is still there."""
    from aiohttp.test_utils import TestClient, TestServer

    from msgboard.console import Console, create_app
    from msgboard.engine import Board
    from msgboard.spec import QueueSpec

    async def walk(board: Board) -> list[str]:
        app = create_app(Console(board))
        unsafe = [
            r.resource.canonical
            for r in app.router.routes()
            if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.resource is not None
        ]
        assert "/queues/{name}/delete" in unsafe and "/signout" in unsafe
        async with TestClient(TestServer(app)) as client:
            page = await client.get("/")
            assert page.status == 200
            for path in unsafe:
                url = re.sub(r"\{[^}]+\}", "q", path)
                r = await client.post(url, data={"x": "1"})
                assert r.status == 403, (path, r.status)
                r = await client.post(url, headers={"X-CSRF-Token": "forged"})
                assert r.status == 403, (path, r.status)
        return unsafe

    with Board(tmp_path / "board") as board:
        board.create_queue(QueueSpec("q"))
        assert len(asyncio.run(walk(board))) >= 2
        assert board.get_queue("q").spec.name == "q"
