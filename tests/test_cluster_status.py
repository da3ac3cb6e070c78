"""Operating a cluster: ``msgboard cluster status`` and the ``$sys`` events
of a primary's standbys, told with real processes on loopback (a primary
and a standby of static roles, each a ``msgboard serve`` of its own), and,
for what lives in etcd, three real etcd members (tests/cluster.py).

The stories: the status names the primary, its log index and each standby's
acknowledged index and lag; a standby that stops (SIGSTOP) shows its lag in
entries and seconds growing and is announced ``standby.lost`` (lagging),
then ``standby.joined`` again once it is back and caught up, and
``standby.lost`` (disconnected) when it is killed; a standby refuses the
status with NotPrimary and the primary's address; the cluster's token is
needed; with etcd, the status reads the primary, its epoch, the in-sync set
and the members' published positions from there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from msgboard.cli import main
from msgboard.client import Client
from msgboard.cluster import Etcd, Keys, Leadership, Role, SyncGate, write_sync
from msgboard.cluster.etcd import encode
from msgboard.cluster.status import KEPT, Lag, Standbys
from msgboard.engine import Board
from msgboard.lmdbstore import Log
from msgboard.server.metrics import ClusterCollector
from tests.cluster import TOKEN as BOARDS_TOKEN
from tests.cluster import Boards, EtcdCluster, etcd_cluster
from tests.served import Served, free_port

TOKEN = "cluster-secret"

etcd = pytest.fixture(scope="module")(etcd_cluster)


def primary(tmp: Path, *args: str) -> Served:
    (tmp / "p").mkdir(exist_ok=True)
    return Served(tmp / "p", "--replication-token", TOKEN, *args)


def standby(tmp: Path, of: Served) -> Served:
    (tmp / "s").mkdir(exist_ok=True)
    (tmp / "s" / "ready.json").unlink(missing_ok=True)
    return Served(tmp / "s", "--replication-token", TOKEN, "--standby-of", of.address)


@pytest.fixture
def stopped() -> Iterator[list[Served]]:
    """Every process a test starts, killed at its end whatever happened."""
    procs: list[Served] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            os.kill(p.proc.pid, signal.SIGCONT)
        p.kill()


def wait_for(cond: Callable[[], Any], what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)
    return found


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``msgboard cluster status ARGS``: its exit status, stdout and stderr."""
    code = main(["cluster", "status", *args])
    out, err = capsys.readouterr()
    return code, out, err


def status_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = status(capsys, *args, "--json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def events(c: Client, name: str) -> list[tuple[Any, ...]]:
    """The fields of each ``name`` event on ``$sys`` so far, oldest first."""
    page = c.browse("$sys", limit=1000)
    return [tuple(m.tuple[1:]) for m in page.messages if m.tuple and m.tuple[0] == name]


def test_status_shows_each_standbys_lag_and_events_follow_it(
    tmp_path: Path, stopped: list[Served], capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a primary (writes answered without a standby after 0.3 s) and
    its standby, I expect the status to show the standby caught up and a
    ``standby.joined`` event; when the standby is stopped (SIGSTOP) and I
    post, I expect its lag to grow in entries and seconds and a
    ``standby.lost`` (lagging); continued, it catches up and is announced
    joined again; killed, it is announced lost (disconnected) and the status
    shows no standby."""
    p = primary(tmp_path, "--allow-async", "--sync-timeout-ms", "300")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    server = ("--server", p.address, "--replication-token", TOKEN)
    with Client(p.address, timeout=30) as c:
        c.create_queue("q")
        c.post("q", body=b"first")

        def caught_up() -> dict[str, Any] | None:
            found = status_json(capsys, *server)
            standbys = found["standbys"]
            ok = standbys and standbys[0]["acked"] == found["last"]
            return found if ok else None

        found = wait_for(caught_up, "the standby caught up")
        assert found["primary"]["address"] == p.address
        assert found["epoch"] == 0 and found["cluster"] is None
        (s_row,) = found["standbys"]
        assert s_row["board"] == s.address
        # Beside its address, the id the primary keeps its acks under.
        assert s_row["board_id"] == (s.data / "board-id").read_text().strip()
        assert s_row["lag_entries"] == 0 and s_row["lag_seconds"] == 0
        joined = wait_for(lambda: events(c, "standby.joined"), "standby.joined")
        assert joined[0][0] == s.address

        os.kill(s.proc.pid, signal.SIGSTOP)
        for i in range(3):
            c.post("q", body=f"while stopped {i}".encode())
        # Each post waited the 0.3 s sync timeout: the oldest is 0.9 s old.
        found = status_json(capsys, *server)
        (s_row,) = found["standbys"]
        assert s_row["lag_entries"] >= 3
        assert s_row["lag_entries"] == found["last"] - s_row["acked"]
        assert s_row["lag_seconds"] > 0.3
        lost = wait_for(lambda: events(c, "standby.lost"), "standby.lost (lagging)")
        assert lost[0][0] == s.address and lost[0][2] == "lagging"
        code, out, _ = status(capsys, *server)
        assert code == 0
        assert f"primary  {p.address}, static roles, log index {found['last']}" in out
        assert s.address in out and "lag entries" in out
        assert s_row["board_id"] in out  # the id column

        os.kill(s.proc.pid, signal.SIGCONT)
        wait_for(caught_up, "the standby caught up again")
        wait_for(lambda: len(events(c, "standby.joined")) == 2, "standby.joined again")

        s.kill()
        gone = wait_for(
            lambda: [e for e in events(c, "standby.lost") if e[2] == "disconnected"],
            "standby.lost (disconnected)",
        )
        assert gone[0][0] == s.address
        assert status_json(capsys, *server)["standbys"] == []
        code, out, _ = status(capsys, *server)
        assert "standbys none connected" in out


def test_status_needs_the_token_and_finds_the_primary_among_addresses(
    tmp_path: Path, stopped: list[Served], capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a primary and its standby, I expect the status asked of the
    standby, or of a list starting with an address where nothing listens,
    to be the primary's; asked of the standby alone once the primary is
    gone, UNAVAILABLE; and the token needed."""
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    nowhere = f"127.0.0.1:{free_port()}"
    for server in (s.address, f"{nowhere},{s.address}"):
        found = status_json(capsys, "--server", server, "--replication-token", TOKEN)
        assert found["primary"]["address"] == p.address
    code, _, err = status(capsys, "--server", p.address, "--replication-token", "guess")
    assert code == 1 and "UNAUTHENTICATED" in err
    code, _, err = status(capsys, "--server", p.address)
    assert code == 2 and "--server needs --replication-token" in err
    code, _, err = status(capsys, "--cluster", "demo")
    assert code == 2 and "--cluster and --etcd go together" in err
    p.kill()
    code, _, err = status(capsys, "--server", s.address, "--replication-token", TOKEN)
    assert code == 1 and "UNAVAILABLE" in err


def test_status_reads_the_primary_epoch_and_in_sync_set_from_etcd(
    tmp_path: Path,
    stopped: list[Served],
    capsys: pytest.CaptureFixture[str],
    etcd: EtcdCluster,
) -> None:
    """Given a primary whose leadership of cluster ``ops`` is held in etcd,
    an in-sync set naming its standby, and a member's published position, I
    expect the status to show them all with the primary's own figures; for
    a cluster with no primary, I expect it to say so and exit 1."""
    p = primary(tmp_path, "--allow-async")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    lead = Leadership(etcd.endpoints, "ops", "alpha", p.address).start()
    client = Etcd(etcd.endpoints)
    try:
        term = lead.wait(30)
        assert term is not None
        keys = Keys("ops")
        assert write_sync(client, keys, term.epoch, ["beta"], None) is not None
        member = json.dumps({"index": 7, "epoch": term.epoch, "address": s.address})
        client.call(
            "kv/put", {"key": encode(keys.prefix + "members/beta"), "value": encode(member)}
        )
        cluster = ("--cluster", "ops", "--etcd", etcd.endpoints)

        def connected() -> dict[str, Any] | None:
            found = status_json(capsys, *cluster, "--replication-token", TOKEN)
            return found if found["standbys"] else None

        found = wait_for(connected, "the standby connected")
        assert found["cluster"] == "ops"
        assert found["primary"] == {"board": "alpha", "address": p.address}
        assert found["epoch"] == term.epoch
        assert found["in_sync"] == ["beta"]
        assert found["members"] == [
            {"board": "beta", "index": 7, "epoch": term.epoch, "address": s.address}
        ]
        assert found["standbys"][0]["in_sync"] is False  # named by address, not "beta"
        code, out, _ = status(capsys, *cluster)
        assert code == 0
        assert f"primary  {p.address} (board alpha), epoch {term.epoch}" in out
        assert "in sync  beta" in out and "standbys not asked" in out
        code, out, _ = status(capsys, "--cluster", "nobody", "--etcd", etcd.endpoints)
        assert code == 1 and "primary  none" in out
        nowhere = f"127.0.0.1:{free_port()}"
        ghost = Leadership(etcd.endpoints, "ghost", "gamma", nowhere).start()
        try:
            assert ghost.wait(30) is not None
            ask = ("--cluster", "ghost", "--etcd", etcd.endpoints, "--replication-token", TOKEN)
            code, out, _ = status(capsys, *ask)
            assert code == 1
            assert f"primary  {nowhere} (board gamma)" in out
            assert "the primary did not answer: UNAVAILABLE" in out
        finally:
            ghost.stop()
    finally:
        lead.stop()
        client.close()


# -- metrics ------------------------------------------------------------------


def scrape(at: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{at}/metrics", timeout=30) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metrics_at(served: Served) -> str:
    ready = json.loads(served.ready_file.read_text())
    return str(ready["metrics"])


def boards_metrics(boards: Boards, name: str) -> str:
    served = boards.procs[name]
    assert served is not None
    return metrics_at(served)


CLUSTER_SERIES = ("msgboard_role", "msgboard_epoch", "msgboard_replication_lag")


def test_a_primary_s_metrics_show_its_role_and_each_standby_s_lag(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary serving metrics and its standby, I expect role 1,
    epoch 0 and the standby's lag 0; with the standby stopped (SIGSTOP)
    and writes answered without it, I expect its lag in entries to count
    them and its lag in seconds to grow."""
    p = primary(
        tmp_path, "--allow-async", "--sync-timeout-ms", "300", "--metrics-listen", "127.0.0.1:0"
    )
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    at = metrics_at(p)
    lag = ("msgboard_replication_lag_entries", (("standby", s.address),))
    seconds = ("msgboard_replication_lag_seconds", (("standby", s.address),))
    with Client(p.address, timeout=30) as c:
        c.create_queue("q")
        found = wait_for(lambda: (m := scrape(at)).get(lag) == 0 and m, "the standby's lag 0")
        assert found["msgboard_role", ()] == 1
        assert found["msgboard_epoch", ()] == 0
        assert found[seconds] == 0
        os.kill(s.proc.pid, signal.SIGSTOP)
        for i in range(3):
            c.post("q", body=f"while stopped {i}".encode())
        found = scrape(at)
        assert found[lag] >= 3
        assert found[seconds] > 0
        os.kill(s.proc.pid, signal.SIGCONT)
        wait_for(lambda: scrape(at).get(lag) == 0, "the standby caught up")


def test_a_board_with_no_cluster_settings_serves_no_cluster_metrics_nor_loads_it(
    tmp_path: Path,
) -> None:
    """Given a board with metrics and no replication, I expect none of the
    cluster's series on /metrics, and msgboard.cluster never imported by
    the serving process."""
    (tmp_path / "b").mkdir()
    plain = Served(tmp_path / "b", "--metrics-listen", "127.0.0.1:0")
    try:
        names = {name for name, _ in scrape(metrics_at(plain))}
        assert "msgboard_disk_free_bytes" in names
        assert not [n for n in names if n.startswith(CLUSTER_SERIES)]
    finally:
        plain.stop()
    code = (
        "import asyncio, os, signal, sys\n"
        "from msgboard.config import ServeConfig\n"
        "from msgboard.server import serve\n"
        "def ready(port):\n"
        "    print(sorted(m for m in sys.modules if m.startswith('msgboard.cluster')))\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "c = ServeConfig(data=sys.argv[1], listen='127.0.0.1:0', metrics_listen='127.0.0.1:0')\n"
        "asyncio.run(serve(c, ready=ready))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stderr


# -- a cluster through etcd ---------------------------------------------------


def test_a_cluster_s_status_metrics_and_events_follow_a_failover(
    tmp_path: Path, etcd: EtcdCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given three boards of a cluster serving metrics, I expect the status
    to name the primary, its epoch and both standbys in sync with no lag;
    the primary's metrics role 1 and its epoch, each standby's lag; a
    standby's role 0 and the same epoch; ``cluster.promoted`` and two
    ``standby.joined`` on the primary's ``$sys``. When I kill -9 the
    primary, I expect a survivor promoted in a later epoch, and the status,
    metrics and events to say so."""
    boards = Boards(tmp_path, etcd.endpoints, "watched", "--metrics-listen", "127.0.0.1:0")
    try:
        boards.start()
        cluster = ("--cluster", "watched", "--etcd", etcd.endpoints)
        token = ("--replication-token", BOARDS_TOKEN)

        def settled(among: list[str]) -> dict[str, Any] | None:
            found = status_json(capsys, *cluster, *token)
            rows = found["standbys"]
            ok = (
                found["primary"]["board"] in among
                and len(rows) == len(among) - 1
                and all(r["in_sync"] and r["lag_entries"] == 0 for r in rows)
            )
            return found if ok else None

        p = boards.primary()
        with Client(boards.address(p), timeout=30) as c:
            c.create_queue("q")
            c.post("q", body=b"first")
        found = wait_for(lambda: settled(boards.names), "both standbys in sync")
        epoch = found["epoch"]
        assert found["primary"] == {"board": p, "address": boards.address(p)}
        assert epoch > 0
        standbys = sorted(n for n in boards.names if n != p)
        assert sorted(r["board"] for r in found["standbys"]) == standbys
        assert all(r["board_id"] == r["board"] for r in found["standbys"])  # its name
        assert sorted(found["in_sync"]) == standbys
        assert {m["board"] for m in found["members"]} == set(boards.names)

        m = scrape(boards_metrics(boards, p))
        assert (m["msgboard_role", ()], m["msgboard_epoch", ()]) == (1, epoch)
        for s in standbys:
            assert m["msgboard_replication_lag_entries", (("standby", s),)] == 0
            sm = scrape(boards_metrics(boards, s))
            assert (sm["msgboard_role", ()], sm["msgboard_epoch", ()]) == (0, epoch)
            assert not [k for k in sm if k[0].startswith("msgboard_replication_lag")]
        with Client(boards.address(p), timeout=30) as c:
            assert events(c, "cluster.promoted") == [(epoch,)]
            wait_for(lambda: len(events(c, "standby.joined")) == 2, "both standbys joined")
            assert sorted(e[0] for e in events(c, "standby.joined")) == standbys

        boards.kill(p)
        q = boards.primary(among=standbys)
        found = wait_for(lambda: settled(standbys), "the new primary and its standby in sync")
        assert found["primary"]["board"] == q and found["epoch"] > epoch
        m = scrape(boards_metrics(boards, q))
        assert (m["msgboard_role", ()], m["msgboard_epoch", ()]) == (1, found["epoch"])
        with Client(boards.address(q), timeout=30) as c:
            assert events(c, "cluster.promoted") == [(found["epoch"],)]
    finally:
        boards.stop()


def test_a_standby_s_lag_in_seconds_is_the_age_of_the_oldest_entry_it_lacks() -> None:
    """Given entries 1, 2 and 5 committed at 10, 20 and 30 s (the clock is
    the test's), I expect a standby that acked 0 to be 40 s behind at 50 s,
    one that acked 1 30 s behind, one that acked 2 (3 and 4 are not
    remembered) 20 s behind, one that acked 5 not at all, and a standby
    behind everything remembered at least as old as the oldest."""
    now = [10.0]
    lag = Lag(clock=lambda: now[0])
    logged = lag.after(lambda index, entry: None)
    for index, at in ((1, 10.0), (2, 20.0), (5, 30.0)):
        now[0] = at
        logged(index, b"")
    now[0] = 50.0
    assert [lag.seconds(acked, 5) for acked in (0, 1, 2, 4, 5)] == [40.0, 30.0, 20.0, 20.0, 0.0]
    for index in range(6, 6 + KEPT):
        logged(index, b"")
    assert lag.seconds(0, 5 + KEPT) == 0.0  # all remembered entries are from now


def test_standbys_are_shown_by_name_and_followed_by_id(tmp_path: Path) -> None:
    """Given a primary's gate with three standbys connected under their
    ids, two of which said the same address (both listening on
    0.0.0.0:7878), I expect the view to name each by its address with its
    id beside it, the metrics to label each once (the id appended where
    two share an address), and the events to name them by address; a
    standby back under the same id on another port between two looks is
    not announced, and its loss names its new address."""
    said: list[tuple[Any, ...]] = []
    with Board(tmp_path / "board", log=Log()) as board:
        oplog = board.log
        assert oplog is not None
        gate = SyncGate(oplog, board.call_soon, timeout=60.0)
        try:
            last = oplog.last
            gate.connected("id-a", last, "10.0.0.1:7878")
            gate.connected("id-c", last, "0.0.0.0:7878")
            gate.connected("id-b", last, "0.0.0.0:7878")
            view = Standbys(oplog, gate, Lag(), Role(), lambda *f: said.append(f))
            shown = [(s.board, s.board_id) for s in view.report().standbys]
            assert shown == [
                ("0.0.0.0:7878", "id-b"),
                ("0.0.0.0:7878", "id-c"),
                ("10.0.0.1:7878", "id-a"),
            ]
            labels = {
                (sample.name, sample.labels["standby"])
                for family in ClusterCollector(Role(), view).collect()
                for sample in family.samples
                if "standby" in sample.labels
            }
            expected = {"10.0.0.1:7878", "0.0.0.0:7878/id-b", "0.0.0.0:7878/id-c"}
            assert labels == {
                (f"msgboard_replication_lag_{what}", label)
                for what in ("entries", "seconds")
                for label in expected
            }

            view.look()
            joined = [("standby.joined", board, last) for board, _ in shown]
            assert said == joined
            gate.gone("id-a")
            gate.connected("id-a", last, "10.0.0.1:7979")  # restarted on another port
            view.look()
            assert said == joined
            assert ("10.0.0.1:7979", "id-a") in [
                (s.board, s.board_id) for s in view.report().standbys
            ]
            gate.gone("id-a")
            view.look()
            assert said[len(joined) :] == [("standby.lost", "10.0.0.1:7979", last, "disconnected")]
        finally:
            gate.close()
