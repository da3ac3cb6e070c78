"""Prometheus metrics (``--metrics-listen``): a served board's endpoint
parsed directly, and scraped by a real Prometheus server queried through its
HTTP API."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from msgboard.client import Client
from msgboard.testing import ServerProcess
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests.pki import CA
from tests.served import free_port

#: Seconds Prometheus gets to start, scrape and answer.
PROMETHEUS_DEADLINE = 90.0


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    """A board serving metrics on a loopback port; (server, HOST:PORT)."""
    s = ServerProcess(tmp_path / "board", "--metrics-listen", "127.0.0.1:0")
    try:
        found = re.search(r"metrics on http://(\S+)/metrics", s.log.read_text())
        assert found, s.log.read_text()
        yield s, found.group(1)
    finally:
        s.stop()


def traffic(c: Client) -> None:
    """Queue a (dead letters to dlq after two deliveries): 3 posts and one
    already expired, a take, an acked lease, a nacked one given back, and
    the same message nacked again and dead-lettered; queue b: 2 posts, one
    leased and not acked."""
    c.create_queue("dlq")
    c.create_queue("a", dead_letter="dlq", max_deliveries=2)
    c.create_queue("b")
    for i in range(3):
        c.post("a", ("job", i))
    c.post("a", ("old",), expires_at=1)
    c.take("a")
    c.ack("a", c.take_leased("a", lease=60))
    for _ in range(2):
        c.ack("a", c.take_leased("a", lease=60, timeout=30), nack=True)
    c.post("b", ("x",))
    c.post("b", ("y",))
    c.take_leased("b", lease=60)


#: (series, labels) -> value after ``traffic``.
EXPECTED = {
    ("msgboard_messages_published_total", (("queue", "a"),)): 4,
    ("msgboard_messages_published_total", (("queue", "b"),)): 2,
    ("msgboard_messages_published_total", (("queue", "dlq"),)): 2,
    ("msgboard_messages_delivered_total", (("queue", "a"),)): 4,
    ("msgboard_messages_delivered_total", (("queue", "b"),)): 1,
    ("msgboard_messages_acked_total", (("queue", "a"),)): 1,
    ("msgboard_messages_acked_total", (("queue", "b"),)): 0,
    ("msgboard_messages_redelivered_total", (("queue", "a"),)): 1,
    ("msgboard_messages_redelivered_total", (("queue", "b"),)): 0,
    ("msgboard_messages_expired_total", (("queue", "a"),)): 1,
    ("msgboard_messages_expired_total", (("queue", "b"),)): 0,
    ("msgboard_messages_dead_lettered_total", (("queue", "a"), ("reason", "expired"))): 1,
    ("msgboard_messages_dead_lettered_total", (("queue", "a"), ("reason", "max-deliveries"))): 1,
    ("msgboard_queue_messages_ready", (("queue", "a"),)): 0,
    ("msgboard_queue_messages_ready", (("queue", "b"),)): 1,
    ("msgboard_queue_messages_ready", (("queue", "dlq"),)): 2,
    ("msgboard_queue_messages_unacked", (("queue", "b"),)): 1,
    ("msgboard_queue_messages_history", (("queue", "a"),)): 0,
    ("msgboard_queue_consumers", (("queue", "a"),)): 0,
    ("msgboard_takes_blocked", ()): 0,
}


def scrape(at: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{at}/metrics", timeout=30) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_endpoint_counts_each_queue_s_traffic(metered: tuple[ServerProcess, str]) -> None:
    """Given a board with --metrics-listen, when two queues see posts, takes,
    acks, nacks, dead letters and an expiry, I expect /metrics (parsed with
    prometheus_client's parser) to hold every series of the issue with each
    queue's values, the commit histograms and the process collector."""
    s, at = metered
    with Client(s.address, timeout=30) as c:
        traffic(c)
        got = scrape(at)
        events = len(c.read("$sys", max=1000))
    assert {k: got.get(k) for k in EXPECTED} == EXPECTED
    commits = got[("msgboard_commit_seconds_count", ())]
    assert commits >= 10
    assert got[("msgboard_commit_messages_count", ())] == commits
    # The size of a group is the messages it stored: the 8 published on the
    # three queues, and the $sys events posted by then (a group of acks or
    # takes alone stores none).
    published = sum(
        v for (name, _), v in got.items() if name == "msgboard_messages_published_total"
    )
    assert published == 8
    assert published <= got[("msgboard_commit_messages_sum", ())] <= published + events
    assert got[("msgboard_lmdb_map_bytes", ())] >= got[("msgboard_lmdb_used_bytes", ())] > 0
    assert got[("msgboard_disk_free_bytes", ())] > 0
    assert ("msgboard_connections", ()) in got
    assert got[("process_resident_memory_bytes", ())] > 0


def _until(at: str, wanted: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
    """Scrapes until the series in ``wanted`` have those values."""
    deadline = time.monotonic() + 30
    while True:
        got = scrape(at)
        if all(got.get(k) == v for k, v in wanted.items()):
            return
        assert time.monotonic() < deadline, f"{ {k: got.get(k) for k in wanted} } != {wanted}"
        time.sleep(0.05)


def test_consumers_connections_and_blocked_takes(metered: tuple[ServerProcess, str]) -> None:
    """Given a board with metrics, while one client is blocked in a Take on
    q and another has a Subscribe consumer on s, I expect takes_blocked 1,
    consumers{s} 1 and connections 2; once the Take is answered and the
    subscription closed, 0 each."""
    s, at = metered
    with Client(s.address, timeout=30) as poster:
        poster.create_queue("q")
        poster.create_queue("s")
        # A Take on a connection of its own (channels of one process share
        # one by default): the board sees two peers.
        own = grpc.insecure_channel(s.address, options=[("grpc.use_local_subchannel_pool", 1)])
        req = pb.TakeRequest(queue="q")
        req.timeout.FromSeconds(60)
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(pb_grpc.BoardStub(own).Take(req)))
        t.start()
        with Client(s.address, timeout=30) as sub_client, sub_client.subscribe("s") as sub:
            poster.post("s", ("hello",))
            delivery = next(iter(sub))
            assert delivery.message.tuple == ("hello",)
            _until(
                at,
                {
                    ("msgboard_takes_blocked", ()): 1,
                    ("msgboard_queue_consumers", (("queue", "s"),)): 1,
                    ("msgboard_queue_messages_unacked", (("queue", "s"),)): 1,
                    ("msgboard_connections", ()): 2,
                },
            )
            sub.ack(delivery)
        poster.post("q", ("x",))
        t.join(30)
        own.close()
    assert got
    _until(
        at,
        {
            ("msgboard_takes_blocked", ()): 0,
            ("msgboard_queue_consumers", (("queue", "s"),)): 0,
            ("msgboard_messages_acked_total", (("queue", "s"),)): 1,
            ("msgboard_messages_delivered_total", (("queue", "s"),)): 1,
            ("msgboard_connections", ()): 0,
        },
    )


def test_with_tls_the_metrics_are_served_over_https(tmp_path: Path) -> None:
    """Given a board with --tls-cert and --tls-key and metrics on loopback,
    I expect /metrics over HTTPS (trusting the board's CA) and no answer to
    plain HTTP."""
    ca = CA(tmp_path / "ca")
    cert = ca.issue("localhost", server=True)
    s = ServerProcess(
        tmp_path / "board",
        *("--tls-cert", str(cert.cert), "--tls-key", str(cert.key)),
        *("--metrics-listen", "127.0.0.1:0"),
    )
    try:
        found = re.search(r"metrics on https://(\S+)/metrics", s.log.read_text())
        assert found, s.log.read_text()
        at = found.group(1)
        tls = ssl.create_default_context(cafile=str(ca.pem))
        url = f"https://{at.replace('127.0.0.1', 'localhost')}/metrics"
        with urllib.request.urlopen(url, context=tls, timeout=30) as r:
            assert b"msgboard_lmdb_map_bytes" in r.read()
        with pytest.raises(OSError):
            scrape(at)
    finally:
        s.stop()


def _serve_fails(tmp_path: Path, *args: str) -> str:
    """Runs msgboard serve with ``args``; expects exit 1 and gives its stderr."""
    r = subprocess.run(
        [
            *(sys.executable, "-m", "msgboard", "serve"),
            *("--data", str(tmp_path / "board"), "--listen", "127.0.0.1:0"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    return r.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--metrics-listen", "abc"), "--metrics-listen: not HOST:PORT or PORT: 'abc'"),
        (("--metrics-listen", "127.0.0.1:99999"), "not HOST:PORT or PORT: '127.0.0.1:99999'"),
        (("--log-format", "xml"), "--log-format: not text or json: 'xml'"),
        (("--log-level", "loud"), "--log-level: not one of debug, info, warning, error: 'loud'"),
    ],
)
def test_a_bad_observing_setting_stops_the_start_naming_it(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    """Given a bad --metrics-listen, --log-format or --log-level, I expect
    msgboard serve to exit 1 with one line naming the flag and the value."""
    assert says in _serve_fails(tmp_path, *args)


def test_a_metrics_port_in_use_stops_the_start(tmp_path: Path) -> None:
    """Given --metrics-listen on a port another socket holds, I expect exit 1
    with one line saying so, and no data directory made."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        at = f"127.0.0.1:{busy.getsockname()[1]}"
        out = _serve_fails(tmp_path, "--metrics-listen", at)
    assert f"cannot serve metrics on {at}: Address already in use" in out
    assert not (tmp_path / "board").exists()


def test_metrics_outside_loopback_need_tls_or_insecure(tmp_path: Path) -> None:
    """Given --metrics-listen on a non-loopback address without TLS or
    --insecure, I expect the board to refuse to start, saying why."""
    out = _serve_fails(tmp_path, "--metrics-listen", "0.0.0.0:0")
    assert "refusing to serve metrics on 0.0.0.0:0" in out


def _query(prometheus: str, expr: str) -> list[dict[str, object]]:
    url = f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.load(r)
    except OSError:
        return []  # not up yet
    return list(answer["data"]["result"])


def test_a_real_prometheus_scrapes_the_board(
    metered: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    """Given a board with traffic on two queues and Debian's prometheus
    started on loopback with a throw-away config scraping it every second,
    I expect its query API to answer the expected series and values."""
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed: scripts/setup --dev installs it")
        pytest.skip("prometheus is not installed (Debian: prometheus; scripts/setup --dev)")
    s, at = metered
    with Client(s.address, timeout=30) as c:
        traffic(c)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: msgboard\n    static_configs: [{{targets: ['{at}']}}]\n"
    )
    listen = f"127.0.0.1:{free_port()}"
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={listen}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wanted = {
            'msgboard_messages_published_total{queue="a"}': 4,
            'msgboard_messages_delivered_total{queue="a"}': 4,
            'msgboard_messages_dead_lettered_total{queue="a",reason="max-deliveries"}': 1,
            'msgboard_queue_messages_ready{queue="dlq"}': 2,
            'msgboard_queue_messages_unacked{queue="b"}': 1,
            'up{job="msgboard"}': 1,
        }
        seen: dict[str, float] = {}
        deadline = time.monotonic() + PROMETHEUS_DEADLINE
        while seen != wanted:
            assert p.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"{seen} != {wanted}\n{log.read_text()}"
            time.sleep(0.5)
            for expr in wanted:
                result = _query(listen, expr)
                if len(result) == 1:
                    value = result[0]["value"]
                    assert isinstance(value, list)
                    seen[expr] = float(value[1])
        rate = _query(listen, "sum(msgboard_commit_seconds_count)")
        assert rate and float(rate[0]["value"][1]) >= 10  # type: ignore[index]
    finally:
        p.terminate()
        p.wait(30)
