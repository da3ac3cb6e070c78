"""Soak: every bench-compare workload of msgboard, in a loop, against one
board under a garbage-collector thread, for hours; counts crashes.

The board is ``msgboard serve`` (the default durable board, as
bench-compare starts it) with ``PYTHONFAULTHANDLER=1`` and
``MSGBOARD_GC_STRESS=MS`` (docs/operating.md: a thread runs the garbage
collector every MS milliseconds, the automatic collections off), so that
anything left for the collector is freed away from its thread at once.
The workloads are bench/compare.py's own (``workload_call``: publish one
at a time, unary, pipelined, keyed; consume; latency; fan-out to COPY
subscribers and through COPY selectors into queues with MOVE subscribers;
take by pattern), run one after another at small sizes, round after round.

A crash is the board exiting on its own: killed by a signal, or with a
``Fatal Python error`` (faulthandler) in its log. Its log is kept
(``OUT/crash-N.log``), and a fresh board takes its place. A workload that
fails while the board lives is an error, counted apart. ``--cores`` paces
the loop: after each run it waits until the board's and this process's
CPU time, over the time the soak has run, is at most that many cores.

    .venv/bin/python bench/soak.py [--hours 4 | --until 00:00] [--cores 0.25]
        [--gc-stress-ms 1] [--out DIR] [--messages 2000] [--unary 300]
        [--fanout 1000]

Prints a line per round and, at the end (or on SIGTERM/SIGINT), the
summary: server-hours, messages posted by the workloads, runs, errors and
crashes; ``OUT/soak.json`` holds it too, rewritten after every round.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from compare import WORKLOADS, workload_call

from msgboard.testing import ServerProcess

#: Posted messages each workload makes, from the run's sizes.
POSTED = {
    "publish_one": "unary",
    "publish_one_unary": "unary",
    "publish_one_keyed": "unary",
    "publish_batch": "messages",
    "publish_batch_keyed": "messages",
    "consume": "messages",
    "consume_cumulative": "messages",
    "fanout": "fanout",
    "fanout_queues": "fanout",
    "take_pattern": "messages",
}

#: Tries at starting a board (each waits 30 s for it to listen).
STARTS = 5

_stop = threading.Event()


def _cpu(pid: int) -> float:
    """A process's CPU seconds (user + system, its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Board:
    """One soaked board: its server process and what it has done."""

    def __init__(self, tmp: Path, n: int, gc_ms: float) -> None:
        os.environ["PYTHONFAULTHANDLER"] = "1"
        os.environ["MSGBOARD_GC_STRESS"] = str(gc_ms)
        data = tmp / f"board-{n}"
        data.mkdir()
        # As bench-compare's board: row 5's COPY subscribers ask credit for
        # every message.
        for attempt in range(STARTS):
            try:
                self.server = ServerProcess(data / "data", "--max-credit", "10000000")
                break
            except RuntimeError:  # not started in 30 s: a loaded machine
                if attempt == STARTS - 1:
                    raise
                shutil.rmtree(data / "data", ignore_errors=True)
        self.address = self.server.address
        self.started = time.monotonic()
        self.cpu_before = 0.0

    def cpu(self) -> float:
        with contextlib.suppress(OSError, IndexError):  # it is gone
            self.cpu_before = _cpu(self.server.proc.pid)
        return self.cpu_before

    def crashed(self) -> str:
        """Why the board is gone ("" while it serves): its exit."""
        code = self.server.proc.poll()
        log = self.server.log.read_text(errors="replace")
        if code is None and "Fatal Python error" not in log:
            return ""
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited {code}" if code is not None else "Fatal Python error in its log"

    def stop(self) -> float:
        """Stops it; returns its hours up."""
        self.server.stop()
        return (time.monotonic() - self.started) / 3600


def _deadline(args: argparse.Namespace) -> float:
    if args.until:
        h, m = map(int, args.until.split(":"))
        now = dt.datetime.now(dt.UTC)
        end = now.replace(hour=h, minute=m, second=0, microsecond=0)
        if end <= now:
            end += dt.timedelta(days=1)
        return time.monotonic() + (end - now).total_seconds()
    return time.monotonic() + args.hours * 3600


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hours", type=float, default=4.0)
    p.add_argument("--until", default="", help="HH:MM UTC (overrides --hours)")
    p.add_argument("--cores", type=float, default=0.25, help="CPU the soak may use on average")
    p.add_argument("--gc-stress-ms", type=float, default=1.0, help="MSGBOARD_GC_STRESS")
    p.add_argument("--out", default="", help="where soak.json and crash logs go")
    # The sizes of each run (bench-compare's names), small: a round is
    # every workload once.
    for flag, default, rows in (
        ("--messages", 2000, "rows 2, 3 and 6"),
        ("--unary", 300, "rows 1"),
        ("--fanout", 1000, "rows 5"),
        ("--subscribers", 10, "rows 5"),
    ):
        p.add_argument(flag, type=int, default=default, help=rows)
    p.add_argument("--rate", type=float, default=500.0, help="msgs/s for row 4")
    p.add_argument("--latency-seconds", type=float, default=2.0)
    p.add_argument("--only", nargs="+", default=WORKLOADS, choices=WORKLOADS)
    args = p.parse_args()
    out = Path(args.out or f"bench/results/soak-{time.strftime('%Y%m%dT%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: _stop.set())
    deadline = _deadline(args)
    tally: dict[str, Any] = {
        "command": sys.argv,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server_hours": 0.0,
        "messages": 0,
        "runs": 0,
        "rounds": 0,
        "errors": [],
        "crashes": [],
    }
    hours_done = 0.0
    cpu_done = 0.0
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="msgboard-soak-") as tmp:
        boards = 0
        board = Board(Path(tmp), boards, args.gc_stress_ms)

        def save(final: bool) -> None:
            up = 0.0 if final else (time.monotonic() - board.started) / 3600
            tally["server_hours"] = round(hours_done + up, 4)
            tally["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            tally["finished"] = final
            (out / "soak.json").write_text(json.dumps(tally, indent=2))

        try:
            while not _stop.is_set() and time.monotonic() < deadline:
                for w in args.only:
                    if _stop.is_set() or time.monotonic() >= deadline:
                        break
                    call = workload_call("msgboard", board.address, w, args)
                    if call is None:
                        continue
                    try:
                        call(f"soak-{w}-{time.monotonic_ns()}")
                        tally["messages"] += _posted(w, args)
                    except Exception as e:
                        why = board.crashed()
                        if not why:
                            tally["errors"].append(f"{w}: {e!r}"[:300])
                    tally["runs"] += 1
                    why = board.crashed()
                    if why:
                        boards += 1
                        kept = out / f"crash-{len(tally['crashes']) + 1}.log"
                        shutil.copy(board.server.log, kept)
                        tally["crashes"].append({"workload": w, "why": why, "log": str(kept)})
                        print(f"CRASH during {w}: {why} (log {kept})", flush=True)
                        cpu_done += board.cpu_before
                        hours_done += board.stop()
                        board = Board(Path(tmp), boards, args.gc_stress_ms)
                    _pace(args.cores, began, cpu_done + board.cpu())
                tally["rounds"] += 1
                save(final=False)
                print(
                    f"round {tally['rounds']}: {tally['messages']:,} messages, "
                    f"{hours_done + (time.monotonic() - board.started) / 3600:.3f} server-hours, "
                    f"{len(tally['errors'])} errors, {len(tally['crashes'])} crashes",
                    flush=True,
                )
        finally:
            why = board.crashed()
            hours_done += board.stop()
            if why:
                tally["crashes"].append({"workload": "(at the end)", "why": why})
            save(final=True)
    print(
        f"soak: {tally['server_hours']:.3f} server-hours, {tally['messages']:,} messages "
        f"in {tally['runs']} runs ({tally['rounds']} rounds), "
        f"{len(tally['errors'])} errors, {len(tally['crashes'])} crashes; {out / 'soak.json'}"
    )


def _posted(w: str, args: argparse.Namespace) -> int:
    if w == "latency":
        return int(args.rate * args.latency_seconds)
    return int(getattr(args, POSTED[w]))


def _pace(cores: float, began: float, cpu: float) -> None:
    """Waits until ``cpu`` seconds over the time since ``began`` is at
    most ``cores``; this process's CPU counts too."""
    own = os.times()
    used = cpu + own.user + own.system
    wait = used / cores - (time.monotonic() - began)
    if wait > 0:
        _stop.wait(wait)


if __name__ == "__main__":
    main()
