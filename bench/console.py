"""What the console costs a busy board: ``scripts/bench``'s rows 1-3 (unary
durable Post: rate, latency p50 and p99) with and without it, side by side.

Each round serves a fresh board (``msgboard serve`` in a child process,
loopback, a throw-away data directory) once per condition, in an order
that turns each round, and drives it with unary Posts as ``bench/board.py``
does:

- ``off``: no ``--metrics-listen``: no HTTP listener, no console, no sampler;
- ``idle``: ``--metrics-listen``: the console served and its sampler
  reading the board every 5 s, nobody looking;
- ``open``: the same, with the overview open: a poller makes the requests
  the page makes (the page, then every refresh interval, 5 s, the table's
  rows and the charts' new readings), as one browser would;
- ``ten``: ten times that (every 0.5 s): ten people watching.

Besides the rows it reports the server's CPU per Post (utime+stime of the
serving process, from /proc: steadier than rates on a shared machine) and
the requests the poller made, and the server's CPU per second while idle
with the page open (the console's own cost, measured apart from the noise
of a loaded machine's rates). Ratios are each condition's median over
``off``'s median, same run.

    .venv/bin/python bench/console.py [--unary 3000] [--rounds 3]
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
            self.get("/overview/rows")
            self.series()
        self.conn.close()


def measure(tmp: Path, name: str, args: argparse.Namespace, r: int) -> dict[str, float]:
    console, every = CONDITIONS[name]
    serve = ["--metrics-listen", "127.0.0.1:0"] if console else []
    server = ServerProcess(tmp / f"{name}-{r}", "--sync", args.sync, *serve)
    poller = None
    try:
        with Client(server.address, timeout=600) as c:
            c.wait_ready()
            if every is not None:
                found = re.search(r"console on http://(\S+:\d+)/", server.log.read_text())
                assert found, server.log.read_text()
                poller = Poller(found.group(1), every)
                poller.start()
                if not poller.opened.wait(60):
                    raise RuntimeError("the console's overview did not open")
            q = "bench"
            c.create_queue(q)
            for i in range(200):  # warm up: connection, first groups
                c.post(q, (i,), body=BODY)
            lat: list[float] = []
            cpu0 = cpu_seconds(server.proc.pid)
            t0 = time.perf_counter()
            for i in range(args.unary):
                t = time.perf_counter()
                c.post(q, (i,), body=BODY)
                lat.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - t0
            cpu = cpu_seconds(server.proc.pid) - cpu0
            # The same board left idle, the page (if any) still open: what
            # the console alone costs, in CPU per second.
            cpu1, t1 = cpu_seconds(server.proc.pid), time.perf_counter()
            time.sleep(args.idle)
            idle = (cpu_seconds(server.proc.pid) - cpu1) / (time.perf_counter() - t1)
    finally:
        if poller is not None:
            poller.stop.set()
            poller.join(30)
        server.stop()
    lat.sort()
    return {
        "post_unary_per_s": args.unary / elapsed,
        "post_unary_p50_ms": lat[len(lat) // 2] * 1e3,
        "post_unary_p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
        "server_cpu_us": cpu / args.unary * 1e6,
        "idle_cpu_ms_per_s": idle * 1e3,
        "busy_cpu_ms_per_s": cpu / elapsed * 1e3,
        "seconds": elapsed,
        "requests": float(poller.requests if poller is not None else 0),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unary", type=int, default=3000, help="Posts per condition per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle", type=float, default=6.0, help="seconds of the idle CPU reading")
    p.add_argument("--sync", choices=["fsync", "weaker-no-fsync"], default="fsync")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    names = list(CONDITIONS)
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-console-") as tmp:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                runs[name].append(measure(Path(tmp), name, args, r))
            print(f"round {r + 1}/{args.rounds} done ({', '.join(order)})", file=sys.stderr)
    print(
        f"\nthe console's cost: unary durable Posts ({args.unary:,} per condition and "
        f"round, sync {args.sync}), median of {args.rounds} rounds, conditions alternated, "
        f"{os.cpu_count()} cores shared, {time.strftime('%Y-%m-%d %H:%M')}\n"
    )
    medians = {n: {k: statistics.median(x[k] for x in runs[n]) for k in runs[n][0]} for n in names}
    print(
        f"{'':32}"
        + "".join(f"{n:>12}" for n in names)
        + "".join(f"{n + '/off':>10}" for n in names[1:])
    )
    summary: dict[str, Any] = {}
    for key, label, unit, higher in ROWS:
        cells = "".join(
            f"{medians[n][key]:>12,.3f}" if unit != "msgs/s" else f"{medians[n][key]:>12,.0f}"
            for n in names
        )
        ratios = {n: medians[n][key] / medians["off"][key] for n in names[1:]}
        print(
            f"{label + ' (' + unit + ')':32}{cells}"
            + "".join(f"{ratios[n]:>10.3f}" for n in names[1:])
        )
        cost = {n: (1 - ratios[n]) if higher else (ratios[n] - 1) for n in names[1:]}
        summary[key] = {
            "medians": {n: medians[n][key] for n in names},
            "ratios": ratios,
            "cost": cost,
        }
    print(
        f"{'poller requests (per round)':32}"
        + "".join(f"{medians[n]['requests']:>12,.0f}" for n in names)
    )
    print(
        f"{'server CPU, idle (ms/s)':32}"
        + "".join(f"{medians[n]['idle_cpu_ms_per_s']:>12,.2f}" for n in names)
    )
    busy = medians["off"]["busy_cpu_ms_per_s"]
    print(
        f"{'server CPU, posting (ms/s)':32}"
        + "".join(f"{medians[n]['busy_cpu_ms_per_s']:>12,.1f}" for n in names)
    )
    print("\nthe console's own CPU (idle CPU over off's), as a share of the busy board's CPU:")
    for n in names[1:]:
        extra = medians[n]["idle_cpu_ms_per_s"] - medians["off"]["idle_cpu_ms_per_s"]
        summary.setdefault("console_cpu_share", {})[n] = extra / busy
        print(f"  {n:5} {extra:+.2f} ms/s of {busy:.0f} ms/s: {extra / busy:+.2%}")
    print("\ncost against off (positive: slower; under 0.05 is under 5%):")
    for key, label, _unit, _ in ROWS[:3]:
        print(
            f"  {label.strip():28} "
            + "  ".join(f"{n} {summary[key]['cost'][n]:+.1%}" for n in names[1:])
        )
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"console-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs}, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
