"""What the console costs a busy board: ``scripts/bench``'s rows 1-3 (unary
durable Post: rate, latency p50 and p99) with and without it, side by side.

Four boards are served at once (``msgboard serve`` child processes,
loopback, throw-away data directories), one per condition, and driven in
turn with short slices of unary Posts, as ``bench/board.py`` drives row 1,
the slices interleaved in an order that turns, so that the load of a shared
machine, which moves by tens of percent from minute to minute, falls on
every condition alike; each round starts four fresh boards, in a turning
order (one process can run some percent slower than another for no reason
of its own):

- ``off``: no ``--metrics-listen``: no HTTP listener, no console, no sampler;
- ``idle``: ``--metrics-listen``: the console served and its sampler
  reading the board every 5 s, nobody looking;
- ``open``: the same, with the overview open: a poller makes the requests
  the page makes (the page, then every refresh interval, 5 s, the table's
  rows and the charts' new readings), as one browser would;
- ``ten``: ten times that (every 0.5 s): ten people watching.

Besides the rows it reports the server's CPU per Post (its threads' CPU
time, from /proc: steadier than rates on a shared machine), the requests
the pollers made, and each server's CPU per second while all four are idle
over one window, the pages still open: the console's own cost, measured
apart from the noise of a loaded machine's rates. The pollers run the
whole time, so a busy slice of one board shares the machine with the
others' consoles (a few ms a second). Ratios are each condition's figure
over ``off``'s, same run.

    .venv/bin/python bench/console.py [--rounds 3] [--slices 8] [--per-slice 250]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from msgboard.client import Client
from msgboard.testing import ServerProcess

BODY = b"x" * 100
#: Condition -> (serve the console, seconds between the poller's refreshes).
CONDITIONS: dict[str, tuple[bool, float | None]] = {
    "off": (False, None),
    "idle": (True, None),
    "open": (True, 5.0),
    "ten": (True, 0.5),
}
ROWS = (
    ("post_unary_per_s", "Post, one at a time, durable", "msgs/s", True),
    ("post_unary_p50_ms", "  latency p50", "ms", False),
    ("post_unary_p99_ms", "  latency p99", "ms", False),
    ("server_cpu_us", "server CPU per Post", "us", False),
)


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid``'s threads alive now, in seconds, to the
    nanosecond (``/proc/PID/task/*/schedstat``; /proc/PID/stat counts 10 ms
    ticks, too coarse for an idle board)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class Poller(threading.Thread):
    """Makes the overview's requests every ``every`` seconds, with one
    session (its cookie), over one kept-alive connection, as a browser."""

    def __init__(self, address: str, every: float) -> None:
        super().__init__(daemon=True)
        host, _, port = address.rpartition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.every = every
        self.stop = threading.Event()
        self.cookie = ""
        self.since = 0.0
        self.requests = 0
        #: Cleared: the page is hidden (no refreshes) until set again.
        self.watching = threading.Event()
        self.watching.set()
        #: Set once the page is open (its first load, not measured: a
        #: person opened it before; what it costs is its refreshes).
        self.opened = threading.Event()

    def get(self, path: str) -> bytes:
        headers = {"Cookie": self.cookie} if self.cookie else {}
        if path != "/":
            headers["HX-Request"] = "true"
        self.conn.request("GET", path, headers=headers)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
        cookie = r.getheader("Set-Cookie")
        if cookie:
            self.cookie = cookie.split(";", 1)[0]
        self.requests += 1
        return body

    def series(self) -> None:
        got = json.loads(self.get(f"/overview/series.json?since={self.since}"))
        if got["t"]:
            self.since = got["t"][-1]

    def run(self) -> None:
        self.get("/")
        self.series()
        self.requests = 0
        self.opened.set()
        while not self.stop.wait(self.every):
            if self.watching.is_set():
                self.get("/overview/rows")
                self.series()
        self.conn.close()


class Slices:
    """One condition's figures, over every round."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.rates: list[float] = []
        self.cpu_us: list[float] = []
        self.busy_cpu = 0.0
        self.busy_seconds = 0.0
        self.requests = 0


class Served:
    """One condition's board, its client and (``open``, ``ten``) its poller."""

    def __init__(self, tmp: Path, name: str, sync: str, figures: Slices) -> None:
        self.figures = figures
        self.name = name
        console, every = CONDITIONS[name]
        serve = ["--metrics-listen", "127.0.0.1:0"] if console else []
        tmp.mkdir(parents=True, exist_ok=True)
        self.server = ServerProcess(tmp / name, "--sync", sync, *serve)
        self.client = Client(self.server.address, timeout=600)
        self.client.wait_ready()
        self.poller: Poller | None = None
        if every is not None:
            found = re.search(r"console on http://(\S+:\d+)/", self.server.log.read_text())
            assert found, self.server.log.read_text()
            self.poller = Poller(found.group(1), every)
            self.poller.start()
            if not self.poller.opened.wait(60):
                raise RuntimeError("the console's overview did not open")
        self.client.create_queue("bench")
        for i in range(200):  # warm up: connection, first groups
            self.client.post("bench", (i,), body=BODY)

    def slice(self, n: int) -> None:
        """``n`` unary Posts, timed one by one."""
        c, f = self.client, self.figures
        lat = f.latencies
        cpu0 = cpu_seconds(self.server.proc.pid)
        t0 = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            c.post("bench", (i,), body=BODY)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(self.server.proc.pid) - cpu0
        f.rates.append(n / elapsed)
        f.cpu_us.append(cpu / n * 1e6)
        f.busy_cpu += cpu
        f.busy_seconds += elapsed

    def close(self) -> None:
        if self.poller is not None:
            self.poller.stop.set()
            self.poller.join(30)
            self.figures.requests += self.poller.requests
        self.client.close()
        self.server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="fresh boards each round")
    p.add_argument("--slices", type=int, default=8, help="slices per condition and round")
    p.add_argument("--per-slice", type=int, default=250, help="unary Posts per slice")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of the idle CPU reading")
    p.add_argument(
        "--same-board",
        action="store_true",
        help="then one board, watched by ten or by nobody in alternating slices",
    )
    p.add_argument("--sync", choices=["fsync", "weaker-no-fsync"], default="fsync")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    names = list(CONDITIONS)
    slices: dict[str, Slices] = {n: Slices() for n in names}
    idle: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-console-") as tmp:
        for r in range(args.rounds):
            # Fresh boards each round, started in a turning order.
            first = names[r % len(names) :] + names[: r % len(names)]
            boards: dict[str, Served] = {}
            try:
                for n in first:
                    boards[n] = Served(Path(tmp) / f"r{r}", n, args.sync, slices[n])
                for k in range(args.slices):
                    order = names[k % len(names) :] + names[: k % len(names)]
                    for n in order:
                        boards[n].slice(args.per_slice)
                # Every board idle over the same window, the pages still open.
                pids = {n: b.server.proc.pid for n, b in boards.items()}
                before = {n: cpu_seconds(pid) for n, pid in pids.items()}
                t0 = time.perf_counter()
                time.sleep(args.idle)
                window = time.perf_counter() - t0
                for n, pid in pids.items():
                    idle[n].append((cpu_seconds(pid) - before[n]) / window * 1e3)
            finally:
                for b in boards.values():
                    b.close()
            print(f"round {r + 1}/{args.rounds} done (started {', '.join(first)})", file=sys.stderr)
    report(args, names, slices, {n: statistics.median(v) for n, v in idle.items()})
    if args.same_board:
        same_board(args)


def same_board(args: argparse.Namespace) -> None:
    """One board with its console, its slices alternating between nobody
    watching and ten people watching (the pollers paused or not): no
    difference between two processes, only the watching."""
    figures = {"unwatched": Slices(), "ten": Slices()}
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-console-") as tmp:
        board = Served(Path(tmp), "ten", args.sync, figures["ten"])
        poller = board.poller
        assert poller is not None
        try:
            for k in range(args.rounds * args.slices):
                for name in ("unwatched", "ten") if k % 2 == 0 else ("ten", "unwatched"):
                    if name == "ten":
                        poller.watching.set()
                    else:
                        poller.watching.clear()
                    board.figures = figures[name]
                    board.slice(args.per_slice)
        finally:
            board.close()
    print(
        f"\none board, its console watched by ten (every 0.5 s) or by nobody, in "
        f"alternating slices ({args.rounds * args.slices} each of {args.per_slice} Posts):"
    )
    rows = {}
    for name, f in figures.items():
        lat = sorted(f.latencies)
        rows[name] = (
            statistics.median(f.rates),
            lat[len(lat) // 2] * 1e3,
            lat[int(len(lat) * 0.99)] * 1e3,
            statistics.median(f.cpu_us),
        )
    print(f"{'':34}{'unwatched':>11}{'ten':>11}{'ten/unw.':>10}")
    for i, (_key, label, unit, _higher) in enumerate(ROWS):
        a, b = rows["unwatched"][i], rows["ten"][i]
        fmt = "{:>11,.0f}" if unit == "msgs/s" else "{:>11,.3f}"
        print(f"{label + ' (' + unit + ')':34}{fmt.format(a)}{fmt.format(b)}{b / a:>10.3f}")


def report(
    args: argparse.Namespace, names: list[str], boards: dict[str, Slices], idle: dict[str, float]
) -> None:
    medians: dict[str, dict[str, float]] = {}
    for n in names:
        b = boards[n]
        lat = sorted(b.latencies)
        medians[n] = {
            "post_unary_per_s": statistics.median(b.rates),
            "post_unary_p50_ms": lat[len(lat) // 2] * 1e3,
            "post_unary_p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
            "server_cpu_us": statistics.median(b.cpu_us),
        }
    print(
        f"\nthe console's cost: unary durable Posts (sync {args.sync}), four boards side by "
        f"side, {args.rounds} rounds of {args.slices} slices of {args.per_slice} Posts each, "
        f"interleaved; rate and CPU: median of the slices, latency: over all "
        f"{args.rounds * args.slices * args.per_slice:,} Posts; "
        f"{os.cpu_count()} cores shared, {time.strftime('%Y-%m-%d %H:%M')}\n"
    )
    print(
        f"{'':34}"
        + "".join(f"{n:>11}" for n in names)
        + "".join(f"{n + '/off':>10}" for n in names[1:])
    )
    summary: dict[str, Any] = {}
    for key, label, unit, higher in ROWS:
        fmt = "{:>11,.0f}" if unit == "msgs/s" else "{:>11,.3f}"
        ratios = {n: medians[n][key] / medians["off"][key] for n in names[1:]}
        print(
            f"{label + ' (' + unit + ')':34}"
            + "".join(fmt.format(medians[n][key]) for n in names)
            + "".join(f"{ratios[n]:>10.3f}" for n in names[1:])
        )
        cost = {n: (1 - ratios[n]) if higher else (ratios[n] - 1) for n in names[1:]}
        summary[key] = {
            "medians": {n: medians[n][key] for n in names},
            "ratios": ratios,
            "cost": cost,
        }
    requests = {n: boards[n].requests for n in names}
    print(f"{'console requests (in all)':34}" + "".join(f"{requests[n]:>11,}" for n in names))
    print(f"{'server CPU, idle (ms/s)':34}" + "".join(f"{idle[n]:>11,.2f}" for n in names))
    busy = boards["off"].busy_cpu / boards["off"].busy_seconds * 1e3
    print(
        f"\nthe console's own CPU (idle, over off's), as a share of a busy board's {busy:.0f} ms/s:"
    )
    summary["console_cpu_share"] = {}
    for n in names[1:]:
        extra = idle[n] - idle["off"]
        summary["console_cpu_share"][n] = extra / busy
        print(f"  {n:5} {extra:+.2f} ms/s: {extra / busy:+.2%}")
    print("\ncost against off (positive: slower; under 5% is the goal):")
    for key, label, _unit, _ in ROWS[:3]:
        print(
            f"  {label.strip():28} "
            + "  ".join(f"{n} {summary[key]['cost'][n]:+.1%}" for n in names[1:])
        )
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"console-{time.strftime('%Y%m%dT%H%M%S')}.json"
    runs = {n: {"rates": boards[n].rates, "cpu_us": boards[n].cpu_us} for n in names}
    out = {"args": vars(args), "summary": summary, "idle_cpu_ms_per_s": idle, "runs": runs}
    path.write_text(json.dumps(out, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
