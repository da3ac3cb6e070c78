"""TLS between the boards of a cluster, told with real processes on
loopback and certificates of a test CA (tests/pki.py): a primary serving
mutual TLS that names its boards (``--cluster-cert-cn``), a standby that
reaches it with TLS (``--cluster-ca``) and shows its own certificate.

The stories: the standby follows over TLS (a write waits for it, and is
answered); a caller with a certificate of the same CA but another name is
refused the replication service whatever token it shows, while clients of
the Board service are not affected; a standby that dials in plaintext, or
shows a name the cluster does not list, never follows; the settings are
checked before the board starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from msgboard.cli import main
from msgboard.client import Client
from tests.cluster import TOKEN as BOARDS_TOKEN
from tests.cluster import Boards, EtcdCluster, etcd_cluster
from tests.pki import CA, Issued
from tests.served import Served

TOKEN = "cluster-secret"


@pytest.fixture
def stopped() -> Iterator[list[Served]]:
    procs: list[Served] = []
    yield procs
    for p in procs:
        p.kill()


def wait_for(cond: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def board(tmp: Path, name: str, cert: Issued, ca: CA, *args: str) -> Served:
    (tmp / name).mkdir(exist_ok=True)
    return Served(
        tmp / name,
        *("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
        *("--tls-client-ca", str(ca.pem), "--replication-token", TOKEN),
        *args,
    )


def test_a_standby_follows_its_primary_over_mutual_tls_and_strangers_are_refused(
    tmp_path: Path, stopped: list[Served], capsys: pytest.CaptureFixture[str]
) -> None:
    ca = CA(tmp_path / "pki")
    p_cert = ca.issue("board-p", server=True, client=True)
    s_cert = ca.issue("board-s", server=True, client=True)
    stranger = ca.issue("stranger", server=True, client=True)
    user = ca.issue("alice")
    p = board(
        tmp_path,
        "p",
        p_cert,
        ca,
        *("--cluster-cert-cn", "board-p, board-s", "--sync-timeout-ms", "60000"),
    )
    stopped.append(p)
    s = board(tmp_path, "s", s_cert, ca, "--cluster-ca", str(ca.pem), "--standby-of", p.address)
    stopped.append(s)
    tls = {"tls_ca": str(ca.pem), "tls_cert": str(user.cert), "tls_key": str(user.key)}
    with Client(p.address, timeout=60, **tls) as c:
        c.create_queue("q")
        assert c.post("q", body=b"replicated over TLS") == 1  # waited for the standby

    def asked(cert: Issued) -> tuple[int, str, str]:
        code = main(
            [
                *("cluster", "status", "--server", p.address, "--replication-token", TOKEN),
                *("--tls-ca", str(ca.pem), "--tls-cert", str(cert.cert)),
                *("--tls-key", str(cert.key)),
            ]
        )
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = asked(s_cert)
    assert code == 0 and s.address in out
    code, _, err = asked(stranger)
    assert code == 1
    assert "UNAUTHENTICATED" in err and "showed one named 'stranger'" in err

    # Standbys the primary must not serve: one in plaintext, one of another name.
    plain = board(tmp_path, "plain", s_cert, ca, "--standby-of", p.address)
    stopped.append(plain)
    odd = board(
        tmp_path, "odd", stranger, ca, "--cluster-ca", str(ca.pem), "--standby-of", p.address
    )
    stopped.append(odd)
    wait_for(lambda: "UNAUTHENTICATED" in odd.log.read_text(), "the stranger refused")
    wait_for(lambda: "UNAVAILABLE" in plain.log.read_text(), "the plaintext standby refused")
    code, out, _ = asked(s_cert)
    assert code == 0
    assert plain.address not in out and odd.address not in out


def test_cluster_settings_are_checked_before_the_board_starts(tmp_path: Path) -> None:
    ca = CA(tmp_path / "pki")
    cert = ca.issue("board-p", server=True, client=True)
    for args, said in (
        (
            ("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
            "cluster_cert_cn needs tls_client_ca",
        ),
        (
            ("--cluster-ca", str(tmp_path / "gone.pem")),
            f"cluster_ca {tmp_path / 'gone.pem'}: No such",
        ),
    ):
        run = subprocess.run(
            [
                *(sys.executable, "-m", "msgboard", "serve", "--data", str(tmp_path / "d")),
                *("--listen", "127.0.0.1:0", "--replication-token", TOKEN),
                *(("--cluster-cert-cn", "board-p") if "needs" in said else ()),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 1
        assert said in run.stderr
        assert not (tmp_path / "d").exists()


etcd = pytest.fixture(scope="module")(etcd_cluster)


def test_the_boards_of_a_cluster_follow_each_other_over_mutual_tls(
    tmp_path: Path, etcd: EtcdCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given three boards of a cluster with one board certificate, mutual
    TLS and the cluster's name for it, I expect the two standbys to follow
    the elected primary over TLS (both in sync, no lag), as the status,
    asked over TLS with the boards' certificate, shows."""
    ca = CA(tmp_path / "pki")
    cert = ca.issue("board", server=True, client=True)
    boards = Boards(
        tmp_path,
        etcd.endpoints,
        "sealed",
        *("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
        *("--tls-client-ca", str(ca.pem), "--cluster-ca", str(ca.pem)),
        *("--cluster-cert-cn", "board"),
    )
    ask = [
        *("cluster", "status", "--cluster", "sealed", "--etcd", etcd.endpoints, "--json"),
        *("--replication-token", BOARDS_TOKEN, "--tls-ca", str(ca.pem)),
        *("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
    ]

    def in_sync() -> bool:
        try:
            code = main(ask)
        finally:
            out, _ = capsys.readouterr()
        if code != 0:
            return False
        found = json.loads(out)
        rows = found["standbys"]
        return len(rows) == 2 and all(r["in_sync"] and r["lag_entries"] == 0 for r in rows)

    try:
        boards.start()
        wait_for(in_sync, "both standbys in sync over TLS")
        assert "UNAUTHENTICATED" not in "".join(boards.log(n) for n in boards.names)
    finally:
        boards.stop()
