"""bench/replication.py's board cluster, run for real with tiny counts: a
single board and a primary with two standbys start, every row runs on both,
and every process is gone afterwards, also when the run is stopped with
SIGTERM half-way. (Its RabbitMQ side needs Debian's rabbitmq-server and
pika, which the test environment does not install: it is not run here.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench" / "replication.py"


def started_under(where: Path) -> list[str]:
    """The command lines of running processes that name ``where`` (the
    bench's servers have their data directories there)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(where) in cmd:
                found.append(cmd)
    return found


def bench(tmp: Path, *args: str) -> subprocess.Popen[str]:
    """The bench in a child whose temporary directories are under ``tmp``."""
    return subprocess.Popen(
        [sys.executable, str(BENCH), "--out", str(tmp / "results"), *args],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_board_cluster_runs_every_row_and_stops(tmp_path: Path) -> None:
    """Given the bench on msgboard-3 with tiny counts, I expect figures for
    every row on both the single board (added for the ratio) and the
    cluster, a ratio for the cluster, and no server left running."""
    proc = bench(
        tmp_path,
        *("--systems", "msgboard-3", "--rounds", "1"),
        *("--messages", "200", "--unary", "20", "--fanout", "50"),
    )
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "starting msgboard-3" in err
    (result,) = (tmp_path / "results").glob("replication-*.json")
    got = json.loads(result.read_text())
    assert [r for r in got["runs"] if "error" in r] == []
    assert set(got["rows"]) == {"publish_one", "publish_batch", "consume", "fanout"}
    for row, cells in got["rows"].items():
        assert set(cells) == {"msgboard", "msgboard-3"}, row
        assert cells["msgboard"]["median"] > 0, row
        assert cells["msgboard-3"]["ratio"] > 0, row
        assert len(cells["msgboard-3"]["round_ratios"]) == 1, row
    assert "x" in out and "of msgboard" in out
    assert started_under(tmp_path) == []


def test_a_stopped_run_leaves_no_server(tmp_path: Path) -> None:
    """Given the bench SIGTERMed once the cluster is serving rows, I expect
    it to exit and leave none of the boards it started running."""
    proc = bench(
        tmp_path,
        *("--systems", "msgboard-3", "--rounds", "50"),
        *("--messages", "2000", "--unary", "20", "--fanout", "500"),
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:
        if line.startswith("round"):  # every server has started
            break
        assert time.monotonic() < deadline, "no row ran within 60 s"
    # The single board, the primary and its two standbys.
    assert len([c for c in started_under(tmp_path) if "msgboard serve" in c]) == 4
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    deadline = time.monotonic() + 30
    while started_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started_under(tmp_path) == []
