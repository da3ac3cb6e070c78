"""Nights of the nightly export at scale (``scripts/bench-spark --nights N``).

On a board of N messages of the benchmark's shape (four queues, half of
each taken into history), each night is the real command, ``msgboard
export SNAPSHOT DATASET``, in a process of its own (so every night pays
its own JVM start, as cron's does):

1. night 1: the first export of the first snapshot (every row decoded);
2. a day of 1% changes: N/200 new messages posted, N/200 waiting ones
   taken (in order), then a second snapshot; night 2 exports it;
3. an idle night: a third snapshot of the board, unchanged since.

Each night is then reported (``msgboard report DATASET WWW/NIGHT``, a
process of its own): the whole nightly is the two, the snapshot apart.

Then the same three snapshots again, each through ``msgboard nightly
SNAPSHOTS DATASET REPORTS`` (one process for export and report, as cron
runs it; SNAPSHOTS holds today's snapshot already, a link to the night's,
so that no board is asked), into a dataset and reports of their own.

Per night: wall time of the export, of the report and of both, rows
decoded (the books' run line), whether Spark ran, and the peak resident
memory of the export's Python process (all of it, and its own memory
alone: RssAnon, without the snapshot's pages it maps) and of its JVM
(sampled every 0.2 s from /proc; in local mode the JVM holds the
executors too).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from msgboard.engine import Board

MSGBOARD = str(Path(sys.executable).parent / "msgboard")


def _rss(pid: int, field: str = "VmRSS") -> int:
    """The process's resident memory now, KiB (0 if it is gone): all of it
    (VmRSS), or only its own memory (RssAnon: not the pages of files it
    maps, such as the snapshot's data.mdb, which the page cache holds)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def run(cmd: list[str]) -> dict[str, float]:
    """Runs ``cmd``; its wall time and the peak RSS (MiB) of the process
    itself (the Python driver) and of its JVM child, sampled."""
    peaks = {"python": 0, "python_anon": 0, "jvm": 0}
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # As installed (pip compiles the bytecode): with PYTHONDONTWRITEBYTECODE
    # set, each night would compile msgboard's own modules again (0.6 s).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peaks["python"] = max(peaks["python"], _rss(proc.pid))
            peaks["python_anon"] = max(peaks["python_anon"], _rss(proc.pid, "RssAnon"))
            for child in _children(proc.pid):
                if _comm(child) == "java":
                    peaks["jvm"] = max(peaks["jvm"], _rss(child))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)
    done.set()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()}")
    print(out.strip(), file=sys.stderr)
    return {
        "wall_s": wall,
        # CPU seconds of the process and the children it waited for (its
        # JVM): what the night costs, less sensitive than wall time to a
        # machine shared with others.
        "cpu_s": cpu,
        "python_mib": peaks["python"] / 1024,
        "python_anon_mib": peaks["python_anon"] / 1024,
        "jvm_mib": peaks["jvm"] / 1024,
    }


def one_process(root: Path, export: list[str], night: int) -> dict[str, float]:
    """Night ``night`` (snapshot ``root/snapN``) through ``msgboard
    nightly`` into ``root/nightly``: its snapshot directory holds today's
    snapshot already (a link to the night's), so no board is asked for
    one. ``export``: the export's options (master, Spark log)."""
    day = time.strftime("%Y-%m-%d", time.gmtime())
    snaps = root / f"nightly-snaps-{night}"
    snaps.mkdir()
    (snaps / day).symlink_to(root / f"snap{night}")
    opts = [a for a in export if a != "export"]
    cmd = [MSGBOARD, "nightly", *opts, str(snaps), str(root / "nightly"), str(root / "nightly-www")]
    fig = run(cmd)
    print(f"nightly {night}: {fig}", file=sys.stderr)
    return fig


def main(
    n: int,
    master: str,
    results: str,
    build: Callable[[Path, int], None],
    day: Callable[[Board, int, float], None],
    parse: Callable[[str], int],
    by_spark: bool = True,
) -> None:
    """The nights on a board ``build`` makes; ``day`` changes a share of it;
    ``parse`` is the floor's loop (bench/spark.py gives all three)."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-nights-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        build(root / "board", n)
        built = time.perf_counter() - t
        out = str(root / "history")
        log = ["--spark-log", str(root / "spark.log")]
        export = [MSGBOARD, "export", "--master", master, *log]
        nights: list[dict[str, object]] = []

        def night(label: str, snap: Path) -> None:
            books = Path(out) / "_msgboard.json"
            before = len(json.loads(books.read_text())["runs"]) if books.exists() else 0
            fig: dict[str, object] = {"night": label, **run([*export, str(snap), out])}
            www = str(root / "www" / snap.name)
            made = run([MSGBOARD, "report", *log, out, www])
            fig["report_s"] = made["wall_s"]
            fig["whole_s"] = float(fig["wall_s"]) + made["wall_s"]  # type: ignore[arg-type]
            fig["report_cpu_s"] = made["cpu_s"]
            fig["whole_cpu_s"] = float(fig["cpu_s"]) + made["cpu_s"]  # type: ignore[arg-type]
            runs = json.loads(books.read_text())["runs"]
            ran = len(runs) > before  # a no-op run adds no line to the books
            fig["decoded"] = runs[-1]["decoded"] if ran else 0
            fig["spark"] = bool(runs[-1]["spark"]) if ran else False
            fig["rows"] = runs[-1]["rows"]
            nights.append(fig)
            print(fig, file=sys.stderr)

        with Board(root / "board", sync=False) as b:
            b.snapshot(root / "snap1")
        t = time.perf_counter()
        rate = parse(str(root / "snap1")) / (time.perf_counter() - t)
        night("1: first export", root / "snap1")
        # The same night by Spark, into a dataset of its own: what the
        # threshold (--local-rows) weighs.
        spark = {}
        if by_spark:
            spark = run([*export, "--local-rows", "0", str(root / "snap1"), str(root / "spark")])
            print(f"night 1 by Spark (--local-rows 0): {spark}", file=sys.stderr)
        with Board(root / "board", sync=False) as b:
            day(b, n, 0.01)
            b.snapshot(root / "snap2")
        night("2: after 1% changed", root / "snap2")
        with Board(root / "board", sync=False) as b:
            b.snapshot(root / "snap3")
        night("idle: new snapshot, no change", root / "snap3")
        whole = [one_process(root, export[1:], n) for n in (1, 2, 3)]
        size = (root / "snap1" / "data.mdb").stat().st_size
    print(
        f"\nmsgboard nightly, {n:,} messages (4 queues, half in history), {master}, "
        f"on {platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d %H:%M')} UTC, "
        f"load average {os.getloadavg()[0]:.1f} at the end; board built in {built:.0f} s, "
        f"snapshot {size / 2**20:,.0f} MiB; floor (scan + check + parse, 1 process) "
        f"{rate:,.0f} rows/s\n"
    )
    print(
        f"{'night':32} {'decoded':>10} {'Spark':>6} {'export s':>9} {'report s':>9} "
        f"{'whole s':>8} {'whole cpu':>9} {'py MiB':>7} {'py anon':>7} {'JVM MiB':>8}"
    )
    for f in nights:
        decoded = int(f["decoded"])  # type: ignore[call-overload]
        print(
            f"{f['night']!s:32} {decoded:>10,} {'yes' if f['spark'] else 'no':>6} "
            f"{f['wall_s']:>9.1f} {f['report_s']:>9.1f} {f['whole_s']:>8.1f} "
            f"{f['whole_cpu_s']:>9.1f} "
            f"{f['python_mib']:>7.0f} {f['python_anon_mib']:>7.0f} {f['jvm_mib']:>8.0f}"
        )
    one, small, idle = nights
    if spark:
        print(
            f"night 1's export by Spark (--local-rows 0), same snapshot: {spark['wall_s']:.1f} s, "
            f"CPU {spark['cpu_s']:.1f} s, JVM {spark['jvm_mib']:.0f} MiB"
        )
    for what, key in (
        ("whole nightly (export + report), wall", "whole_s"),
        ("export alone, wall", "wall_s"),
        ("whole nightly, CPU", "whole_cpu_s"),
        ("export alone, CPU", "cpu_s"),
    ):
        ratio = float(small[key]) / float(one[key])  # type: ignore[arg-type]
        print(f"1% night / night 1, {what}: {ratio:.3f}")
    idle_wall, idle_cpu = float(idle["whole_s"]), float(idle["whole_cpu_s"])  # type: ignore[arg-type]
    print(f"idle night, whole: {idle_wall:.1f} s wall, {idle_cpu:.1f} s CPU")
    print("\nthe same snapshots through `msgboard nightly` (export and report in one process):")
    for label, f in zip(("1: first export", "2: after 1% changed", "idle"), whole, strict=True):
        print(f"{label:32} {f['wall_s']:>7.1f} s wall {f['cpu_s']:>7.1f} s CPU")
    for what, key in (("wall", "wall_s"), ("CPU", "cpu_s")):
        print(f"1% night / night 1, msgboard nightly, {what}: {whole[1][key] / whole[0][key]:.3f}")
    print(f"whole run: {time.perf_counter() - started:.0f} s")
    os.makedirs(results, exist_ok=True)
    path = Path(results) / f"nights-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(
        json.dumps({"messages": n, "floor_rows_per_s": rate, "nights": nights, "nightly": whole})
    )
    print(f"results: {path}")
