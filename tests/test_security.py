"""Start-up, TLS and credentials, against real servers.

Given throw-away CAs and certificates, I expect TLS and mutual TLS to work on
loopback, every bad credential to be refused with the right status (and one
UNAUTHENTICATED message whatever the cause), certificates to be re-read on
SIGHUP without dropping a connection, and a server that cannot or must not
start to say why in one line and exit non-zero.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard import cli, config
from msgboard.client import Client
from msgboard.config import ServeConfig
from msgboard.errors import (
    ConfigError,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from msgboard.security import Security
from msgboard.security.auth import UNAUTHENTICATED, token_hash
from msgboard.testing import ServerProcess, ServerThread
from tests.pki import CA

ROOT = Path(__file__).resolve().parent.parent


def _users(path: Path) -> Path:
    path.write_text(
        f"""
[[user]]
name = "alice"
token_sha256 = "{token_hash("alice-token")}"
[[user.allow]]
queues = "jobs*"
verbs = ["read", "write", "manage"]

[[user]]
name = "carol"
cert_cn = "carol"
[[user.allow]]
queues = "jobs*"
verbs = ["read"]
"""
    )
    return path


class Pki:
    def __init__(self, tmp: Path) -> None:
        self.ca = CA(tmp / "ca")
        self.foreign = CA(tmp / "foreign", "foreign-ca")
        self.server = self.ca.issue("localhost", server=True)
        self.carol = self.ca.issue("carol")
        self.stranger = self.ca.issue("stranger")
        self.expired = self.ca.issue("carol", expired=True, file="carol-expired")
        self.forged = self.foreign.issue("carol", file="carol-forged")


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def mtls(tmp_path: Path, pki: Pki) -> Iterator[ServerThread]:
    c = ServeConfig(
        listen="127.0.0.1:0",
        tls_cert=str(pki.server.cert),
        tls_key=str(pki.server.key),
        tls_client_ca=str(pki.ca.pem),
        users=str(_users(tmp_path / "users.toml")),
    )
    s = ServerThread(tmp_path / "board", security=Security.build(c)).start()
    try:
        yield s
    finally:
        s.stop()


def test_tls_with_a_token_and_mutual_tls_with_a_certificate(mtls: ServerThread, pki: Pki) -> None:
    ca = str(pki.ca.pem)
    cert, key = str(pki.carol.cert), str(pki.carol.key)
    # alice: a token, over a connection showing carol's certificate.
    with Client(mtls.address, token="alice-token", tls_ca=ca, tls_cert=cert, tls_key=key) as a:
        a.create_queue("jobs")
        assert a.post("jobs", ("x",)) == 1
    # carol: known by her certificate's CN alone; she may read, not write.
    with Client(mtls.address, tls_ca=ca, tls_cert=cert, tls_key=key) as c:
        assert [m.tuple for m in c.read("jobs")] == [("x",)]
        with pytest.raises(PermissionDenied, match="user 'carol' may not write queue 'jobs'") as e:
            c.post("jobs", ("y",))
        # The same facts for machines, from the error's ErrorInfo.
        assert (e.value.user, e.value.verb, e.value.queue) == ("carol", "write", "jobs")


def test_health_answers_without_a_credential_and_asyncio_clients_send_theirs(
    mtls: ServerThread, pki: Pki
) -> None:
    import asyncio

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    creds = grpc.ssl_channel_credentials(
        pki.ca.pem.read_bytes(), pki.stranger.key.read_bytes(), pki.stranger.cert.read_bytes()
    )
    with grpc.secure_channel(mtls.address, creds) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        r = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    kw = {"tls_ca": str(pki.ca.pem), "tls_cert": str(pki.carol.cert), "tls_key": str(pki.carol.key)}
    with (
        Client(mtls.address, token="alice-token", **kw) as a,
        Client(mtls.address, token="wrong", **kw) as w,
    ):
        a.create_queue("jobs")
        a.post("jobs", ("x",))

        async def consume() -> tuple[object, ...]:
            async with a.subscribe_async("jobs", credit=1) as sub:
                d = await anext(aiter(sub))
                await sub.ack(d)
            with pytest.raises(Unauthenticated):
                async with w.subscribe_async("jobs"):
                    pass
            return d.message.tuple

        # One event loop: grpc.aio keeps its state per process.
        assert asyncio.run(consume()) == ("x",)


def _call(address: str, **kw: str) -> None:
    with Client(address, timeout=10, **kw) as c:
        c.list_queues()


def test_bad_credentials(mtls: ServerThread, pki: Pki, tmp_path: Path) -> None:
    ca = str(pki.ca.pem)

    def mutual(who: object) -> dict[str, str]:
        i = who  # an Issued
        return {"tls_ca": ca, "tls_cert": str(i.cert), "tls_key": str(i.key)}  # type: ignore[attr-defined]

    unauthenticated = {
        "no token, unknown certificate CN": mutual(pki.stranger),
        "wrong token": {**mutual(pki.carol), "token": "not-alice"},
        "no token, no such user": mutual(pki.stranger) | {"token": ""},
        "a token that is a hash": {**mutual(pki.carol), "token": token_hash("alice-token")},
    }
    messages = set()
    for what, kw in unauthenticated.items():
        with pytest.raises(Unauthenticated) as e:
            _call(mtls.address, **kw)
        messages.add(str(e.value))
        assert "alice" not in str(e.value), what
    assert messages == {UNAUTHENTICATED}  # the same whatever the cause
    handshake_fails = {
        "plaintext to the TLS port": {},
        "a token in plaintext to the TLS port": {"token": "alice-token"},
        "TLS without a client certificate": {"tls_ca": ca, "token": "alice-token"},
        "an expired client certificate": mutual(pki.expired),
        "a client certificate of a foreign CA": mutual(pki.forged),
        "a server certificate the client does not trust": {
            "tls_ca": str(pki.foreign.pem),
            "tls_cert": str(pki.carol.cert),
            "tls_key": str(pki.carol.key),
        },
    }
    for what, kw in handshake_fails.items():
        with pytest.raises(Unavailable):
            _call(mtls.address, **kw)
            pytest.fail(what)


def test_the_client_never_sends_a_token_in_plaintext_to_another_host() -> None:
    # Nothing is sent: the client refuses before it opens a channel.
    for address in ("10.1.2.3:7878", "board.example.com:7878", "[2001:db8::1]:7878"):
        with pytest.raises(InvalidArgument, match="refusing to send a token in plaintext"):
            Client(address, token="t")
    for address in ("127.0.0.1:1", "localhost:1", "[::1]:1", "127.8.9.10:1"):
        Client(address, token="t").close()


def test_a_users_file_with_a_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "users.toml"
    bad.write_text('[[user]]\nname = "alice"\ntoken_sha256 = \n')
    out = _serve_fails(tmp_path, "--users", str(bad))
    assert str(bad) in out and "line 3" in out


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[user]]\nname = "a"\n', "give token_sha256, cert_cn or both"),
        ('[[user]]\nname = "a"\ntoken_sha256 = "abc"\n', "64 lowercase hex"),
        (
            '[[user]]\nname = "a"\ncert_cn = "a"\n[[user.allow]]\nqueues = "j*"\nverbs = ["all"]\n',
            "unknown verb 'all'",
        ),
        (
            '[[user]]\nname = "a"\ncert_cn = "a"\n'
            '[[user.allow]]\nqueues = "j*"\nverbs = ["admin"]\n',
            "admin is board-wide",
        ),
        (
            '[[user]]\nname = "a"\ncert_cn = "a"\n[[user]]\nname = "b"\ncert_cn = "a"\n',
            "the same cert_cn as user 'a'",
        ),
        ('[[user]]\nname = "a"\ncert_cn = "a"\npassword = "x"\n', "unknown key 'password'"),
    ],
)
def test_a_wrong_users_file_is_refused_naming_what(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "users.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        Security.build(ServeConfig(listen="127.0.0.1:0", users=str(path)))


def _serve_fails(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Runs ``msgboard serve`` expecting it to refuse: exit 1, one line, and
    no data directory made. Its --listen (unless ``args`` give another) is a
    port another socket holds, as when a second board starts beside a first
    one: a bad file must still be named (it is read before the port is
    tried), and the test never depends on the default port being free."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        data = tmp_path / "d"
        command = [sys.executable, "-m", "msgboard", "serve", "--data", str(data)]
        p = subprocess.run(
            [*command, "--listen", listen, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, p.stderr
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("msgboard serve: ")
    assert not data.exists(), "a refused start made the data directory"
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_listener_outside_loopback_needs_tls_and_users(tmp_path: Path, pki: Pki) -> None:
    port = _free_port()
    out = _serve_fails(tmp_path, "--listen", f"0.0.0.0:{port}")
    assert "TLS (--tls-cert, --tls-key) and --users" in out and "--insecure" in out
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    out = _serve_fails(tmp_path, "--listen", f"0.0.0.0:{port}", *tls)
    assert "without --users" in out
    users = str(_users(tmp_path / "users.toml"))
    out = _serve_fails(tmp_path, "--listen", f"[::]:{port}", "--users", users)
    assert "without TLS" in out
    assert not (tmp_path / "d").exists()  # refused before touching the data


def test_insecure_serves_outside_loopback_with_a_warning(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "msgboard", "serve", "--data", str(tmp_path / "d")],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MSGBOARD_LISTEN": f"0.0.0.0:{port}", "MSGBOARD_INSECURE": "1"},
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "serving on" in line:
                break
        assert any("WARNING: --insecure" in x and "without TLS and users" in x for x in lines)
        assert "open board" in lines[-1]
        with Client(f"127.0.0.1:{port}") as c:  # only ever over loopback
            assert c.list_queues() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_start_up_errors_are_one_line(tmp_path: Path) -> None:
    assert "not HOST:PORT" in _serve_fails(tmp_path, "--listen", ":7878")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _serve_fails(tmp_path, "--listen", f"127.0.0.1:{port}")
        assert f"cannot listen on 127.0.0.1:{port}" in out and "in use" in out
    assert "tls_key" in _serve_fails(tmp_path, "--tls-cert", "x.pem")
    out = _serve_fails(tmp_path, "--tls-cert", "nope.pem", "--tls-key", "nope.key")
    assert "nope.pem" in out
    out = _serve_fails(tmp_path, env={"MSGBOARD_MAX_STREAMS": "-1"})
    assert "MSGBOARD_MAX_STREAMS: must not be negative" in out
    out = _serve_fails(tmp_path, "--max-waits", "lots")
    assert "--max-waits: not a whole number: 'lots'" in out


def test_settings_come_from_flags_then_env_then_file(tmp_path: Path) -> None:
    f = tmp_path / "msgboard.toml"
    f.write_text('listen = "127.0.0.1:1"\ndata = "/from/file"\nmax_waits = 3\ninsecure = true\n')
    env = {"MSGBOARD_LISTEN": "127.0.0.1:2", "MSGBOARD_MAX_WAITS": "4"}
    c = config.load({"listen": "127.0.0.1:3"}, env, f)
    assert (c.listen, c.data, c.max_waits, c.insecure) == ("127.0.0.1:3", "/from/file", 4, True)
    c = config.load({}, {**env, "MSGBOARD_CONFIG": str(f)})
    assert (c.listen, c.max_waits) == ("127.0.0.1:2", 4)
    assert config.load({}, {}) == ServeConfig()
    f.write_text('listn = "x"\n')
    with pytest.raises(ConfigError, match="unknown key 'listn'"):
        config.load({}, {}, f)
    f.write_text("max_waits = 'many'\n")
    with pytest.raises(ConfigError, match="max_waits must be a int"):
        config.load({}, {}, f)
    f.write_text("max_waits = \n")
    with pytest.raises(ConfigError, match="line 1"):
        config.load({}, {}, f)


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs" / "operating.md").read_text()
    for s in config.SETTINGS:
        assert f"`{s.name}`" in text and s.flag in text and s.env in text, s.name
    assert "`--config FILE`" in text


def test_user_token_prints_a_token_and_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["user", "token"]) == 0
    token, line = capsys.readouterr().out.splitlines()
    assert len(token) >= 40 and line == f'token_sha256 = "{token_hash(token)}"'
    assert cli.main(["user", "token"]) == 0
    assert capsys.readouterr().out.splitlines()[0] != token


def _swap(pki: Pki, ca: CA) -> None:
    """Overwrites the server's certificate files with ones ``ca`` signed."""
    fresh = ca.issue("localhost", server=True, file="swap")
    pki.server.cert.write_bytes(fresh.cert.read_bytes())
    pki.server.key.write_bytes(fresh.key.read_bytes())


def test_sighup_rereads_certificates_and_users_without_dropping_connections(
    tmp_path: Path, pki: Pki
) -> None:
    users = _users(tmp_path / "users.toml")
    server = ServerProcess(
        tmp_path / "board",
        *("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)),
        *("--users", str(users)),
    )
    old, new = str(pki.ca.pem), str(pki.foreign.pem)
    try:
        with Client(server.address, token="alice-token", tls_ca=old) as a:
            a.create_queue("jobs")
            sub = a.subscribe("jobs", credit=10)
            a.post("jobs", ("before",))
            assert next(sub).message.tuple == ("before",)
            _swap(pki, pki.foreign)
            with users.open("a") as f:  # and a new user
                f.write(
                    f'[[user]]\nname = "bob"\ntoken_sha256 = "{token_hash("bob-token")}"\n'
                    '[[user.allow]]\nqueues = "jobs"\nverbs = ["write"]\n'
                )
            with pytest.raises(Unauthenticated):
                _call(server.address, token="bob-token", tls_ca=old)
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while "reloaded" not in server.log.read_text():
                assert time.monotonic() < deadline, server.log.read_text()
                time.sleep(0.05)
            # New connections get the new certificate...
            with pytest.raises(Unavailable):
                _call(server.address, token="alice-token", tls_ca=old)
            with Client(server.address, token="bob-token", tls_ca=new) as b:
                b.post("jobs", ("after",))
            # ...and the connection opened before carries on.
            assert next(sub).message.tuple == ("after",)
            a.post("jobs", ("still",))
            assert next(sub).message.tuple == ("still",)
            sub.close()
            # A bad file on the next SIGHUP is logged; the current one stays.
            pki.server.key.write_text("not a key")
            server.proc.send_signal(signal.SIGHUP)
            while "reload failed" not in server.log.read_text():
                assert time.monotonic() < deadline, server.log.read_text()
                time.sleep(0.05)
            _call(server.address, token="alice-token", tls_ca=new)
    finally:
        assert server.stop() == 0


def test_how_a_call_names_its_user(tmp_path: Path) -> None:
    from msgboard.security.auth import Users

    users = Users.load(_users(tmp_path / "users.toml"))
    assert users.authenticate([("authorization", "Bearer alice-token")], None).name == "alice"
    assert users.authenticate([("authorization", "bearer alice-token")], None).name == "alice"
    assert users.authenticate([], "carol").name == "carol"
    # A token wins over the certificate, and a bad token is not excused by one.
    assert users.authenticate([("authorization", "Bearer alice-token")], "carol").name == "alice"
    for metadata, cn in [
        ([("authorization", "Bearer wrong")], "carol"),
        ([("authorization", "Basic alice-token")], None),
        ([("authorization", "Bearer ")], None),
        ([("authorization", "Bearer alice-token")] * 2, None),
        ([], "stranger"),
        ([], None),
    ]:
        with pytest.raises(Unauthenticated, match=re.escape(UNAUTHENTICATED)):
            users.authenticate(metadata, cn)


def test_the_settings_table_and_the_config_agree() -> None:
    defaults = ServeConfig()
    for s in config.SETTINGS:
        assert getattr(defaults, s.name) == s.default, s.name
    assert {s.name for s in config.SETTINGS} == set(ServeConfig.__dataclass_fields__)


def test_serve_reads_a_config_file(tmp_path: Path) -> None:
    f = tmp_path / "msgboard.toml"
    f.write_text(
        f'users = "{_users(tmp_path / "users.toml")}"\n'
        f'snapshot_dir = "{tmp_path / "snaps"}"\nsync = "weaker-no-fsync"\n'
    )
    server = ServerProcess(tmp_path / "board", "--config", str(f))
    try:
        line = next(x for x in server.log.read_text().splitlines() if "serving on" in x)
        assert "sync weaker-no-fsync" in line and "2 users from" in line
        assert f"snapshots under {tmp_path / 'snaps'}" in line
        with Client(server.address) as c, pytest.raises(Unauthenticated):
            c.list_queues()
    finally:
        assert server.stop() == 0


def test_an_open_board_warns_once_that_tokens_are_ignored(tmp_path: Path) -> None:
    """Given an open board (no users file), when calls carry a token, I
    expect them allowed and one warning in the log saying tokens are ignored
    (not one per call); calls without a token log nothing of the kind."""
    server = ServerProcess(tmp_path / "board")
    try:
        with Client(server.address) as c:
            c.create_queue("jobs")
        assert "tokens are ignored" not in server.log.read_text()
        for _ in range(2):
            with Client(server.address, token="meant-for-a-secured-board") as c:
                c.post("jobs", ("n", 1))
        deadline = time.monotonic() + 10
        while "tokens are ignored" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    log = server.log.read_text()
    [line] = [x for x in log.splitlines() if "tokens are ignored" in x]
    assert "open board (no users file)" in line and "--users FILE" in line
    assert "/msgboard.v1.Board/Post" in line


def test_a_tls_mistake_names_the_likely_cause_and_the_flag(
    mtls: ServerThread, pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given each usual TLS mistake, I expect UNAVAILABLE saying what is
    likely wrong and which flag fixes it, gRPC's own text kept after it."""
    ca = str(pki.ca.pem)
    mistakes = {
        "plaintext to the TLS port": ({}, "it likely serves TLS (connect with --tls-ca FILE"),
        "no client certificate": ({"tls_ca": ca}, "wants a client certificate (--tls-cert FILE"),
        "a CA that did not sign the board's certificate": (
            {
                "tls_ca": str(pki.foreign.pem),
                "tls_cert": str(pki.carol.cert),
                "tls_key": str(pki.carol.key),
            },
            "not one this client trusts: --tls-ca",
        ),
    }
    for what, (kw, says) in mistakes.items():
        with pytest.raises(Unavailable) as e:
            _call(mtls.address, **kw)
        assert says in str(e.value), what
        assert "failed to connect to all addresses" in str(e.value), what
    plain = ServerThread(tmp_path / "plain").start()
    try:
        with pytest.raises(Unavailable) as e:
            _call(plain.address, tls_ca=ca)
        assert "the board speaks plaintext, not TLS: connect without --tls-ca" in str(e.value)
    finally:
        plain.stop()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(Unavailable) as e:
        _call(f"127.0.0.1:{free}")
    assert "nothing listens there: is the board running" in str(e.value)
    assert cli.main(["queue", "list", "--server", mtls.address]) == 1
    err = capsys.readouterr().err
    assert err.startswith("msgboard: UNAVAILABLE: the board closed the connection in the TLS")
