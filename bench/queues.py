"""The figures of docs/operating.md for a big board and a flat-out stream,
before and after a change, measured side by side in one run.

Each row runs ``msgboard serve`` in a child process (loopback only,
``--sync weaker-no-fsync``) from this checkout and, with ``--before DIR``,
from another checkout (its flags must exist there), alternating the two
for ``--rounds`` rounds; it prints every round, the medians and the
after/before ratios, and the machine's load (``uptime``) at the start and
the end.

- ``restart``: a board of ``--queues`` durable queues (built once, in this
  process, not measured), served from the process's start to its ready file
  (the board serves), and to its first Post answered;
- ``latency``: Post latency p50/p99 over ``--posts`` posts, one at a time,
  on that board: idle, then while another *process* lists every queue in a
  loop (ListQueues), then while another process calls Stats (every queue)
  in a loop;
- ``poststream``: one PostStream client sends ``--batches`` batches of
  10,000 x 1 KiB flat out (it never waits for an answer before sending the
  next): the server's heap peak (RssAnon of /proc/PID/status, sampled every
  5 ms) and its peak RSS (VmHWM: the heap plus the LMDB file's pages
  mapped in).

    .venv/bin/python bench/queues.py [restart latency poststream]
        [--queues 100000] [--posts 300] [--batches 40] [--rounds 3]
        [--before DIR]

Not a test: it asserts nothing, it prints figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from msgboard import QueueSpec
from msgboard.engine import Board
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

HERE = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


class Server:
    """``msgboard serve`` from the checkout ``tree``, in a child process."""

    def __init__(self, tree: Path, data: Path, timeout: float = 600) -> None:
        self.started = time.perf_counter()
        ready = data.parent / f"ready-{time.monotonic_ns()}.json"
        self.log = data.parent / f"server-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "msgboard", "serve", "--sync", "weaker-no-fsync"),
                    *("--data", str(data), "--listen", "127.0.0.1:0", "--ready-file", str(ready)),
                ],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                stderr=out,
            )
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start: {self.log.read_text()}")
            time.sleep(0.01)
        #: Seconds from the process's start to serving, and the CPU seconds
        #: it used meanwhile (less disturbed by a loaded machine).
        self.serving = time.perf_counter() - self.started
        self.cpu = cpu(self.proc.pid)
        self.address = json.loads(ready.read_text())["listen"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu(pid: int) -> float:
    """The CPU seconds (user and system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status(pid: int, field: str) -> int:
    """A figure of /proc/PID/status, in bytes (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class HeapPeak:
    """Samples a process's RssAnon every 5 ms, keeping the peak: the kernel
    keeps a peak of the RSS (VmHWM), not of its anonymous part."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, status(self.pid, "RssAnon"))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def build(data: Path, queues: int) -> None:
    t = time.perf_counter()
    with Board(data, sync=False) as board:
        futs = [board.create_queue_async(QueueSpec(f"q{i:06}")) for i in range(queues)]
        for f in futs:
            f.result()
    print(f"built {queues:,} queues in {time.perf_counter() - t:.1f} s (not measured)", flush=True)


def restart(tree: Path, data: Path) -> dict[str, float]:
    server = Server(tree, data)
    try:
        with grpc.insecure_channel(server.address, OPTIONS) as ch:
            pb_grpc.BoardStub(ch).Post(
                pb.PostRequest(queue="q000000", messages=[pb.Message()]), timeout=600
            )
        first = time.perf_counter() - server.started
    finally:
        server.stop()
    return {"serving s": server.serving, "serving CPU s": server.cpu, "first post s": first}


def latency(tree: Path, data: Path, posts: int) -> dict[str, float]:
    server = Server(tree, data)
    out: dict[str, float] = {}
    try:
        with grpc.insecure_channel(server.address, OPTIONS) as ch:
            stub = pb_grpc.BoardStub(ch)
            # Warm up; the first post waits out any start-up work still
            # holding the writer (an old board's expiry catch-up).
            _posts(stub, 20, timeout=600)
            for name in ("idle", "ListQueues", "Stats"):
                if name == "idle":
                    lat = _posts(stub, posts)
                else:
                    # The looper is a process of its own: decoding its
                    # answers here would take this process's GIL from the
                    # poster.
                    ctx = multiprocessing.get_context("spawn")
                    stop, calls = ctx.Event(), ctx.Value("i", 0)
                    p = ctx.Process(target=_looper, args=(server.address, name, stop, calls))
                    p.start()
                    while calls.value == 0 and p.is_alive():  # it is under way
                        time.sleep(0.05)
                    lat = _posts(stub, posts)
                    stop.set()
                    p.join()
                    out[f"{name} calls"] = calls.value
                lat.sort()
                q = statistics.quantiles(lat, n=100, method="inclusive")
                out[f"{name} p50 ms"] = q[49] * 1e3
                out[f"{name} p99 ms"] = q[98] * 1e3
                out[f"{name} max ms"] = lat[-1] * 1e3
    finally:
        server.stop()
    return out


def _posts(stub: Any, n: int, timeout: float = 60) -> list[float]:
    out = []
    for i in range(n):
        req = pb.PostRequest(queue="q000000", messages=[pb.Message(body=b"%d" % i)])
        t = time.perf_counter()
        stub.Post(req, timeout=timeout)
        out.append(time.perf_counter() - t)
    return out


def _looper(address: str, name: str, stop: Any, calls: Any) -> None:
    with grpc.insecure_channel(address, OPTIONS) as ch:
        stub = pb_grpc.BoardStub(ch)
        while not stop.is_set():
            if name == "ListQueues":
                stub.ListQueues(pb.ListQueuesRequest())
            else:
                stub.Stats(pb.StatsRequest())
            with calls.get_lock():
                calls.value += 1


def poststream(tree: Path, data: Path, batches: int) -> dict[str, float]:
    server = Server(tree, data)
    try:
        with grpc.insecure_channel(server.address, OPTIONS) as ch:
            stub = pb_grpc.BoardStub(ch)
            stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")))
            batch = [pb.Message(body=b"x" * 1024) for _ in range(10_000)]

            def requests() -> Iterator[pb.PostStreamRequest]:
                for i in range(batches):
                    yield pb.PostStreamRequest(batch_id=i, queue="q", messages=batch)

            heap = HeapPeak(server.proc.pid)
            t = time.perf_counter()
            answers = list(stub.PostStream(requests()))
            took = time.perf_counter() - t
            peak = heap.stop()
            rss = status(server.proc.pid, "VmHWM")
        errors = sum(1 for r in answers if r.HasField("error"))
        if errors:
            raise RuntimeError(f"{errors} batches refused")
    finally:
        server.stop()
    return {
        "heap peak MiB": peak / MiB,
        "RSS peak MiB": rss / MiB,
        "msgs/s": batches * 10_000 / took,
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def report(name: str, rows: dict[str, list[dict[str, float]]]) -> None:
    trees = list(rows)
    keys = list(rows[trees[-1]][0])
    print(f"\n{name}: median of {len(rows[trees[-1]])} round(s)")
    head = "".join(f"{t:>14}" for t in trees)
    print(f"{'':>18}{head}{'after/before' if len(trees) > 1 else '':>14}")
    for k in keys:
        med = [statistics.median(r[k] for r in rows[t]) for t in trees]
        cells = "".join(f"{m:>14.1f}" for m in med)
        ratio = f"{med[-1] / med[0]:>14.2f}" if len(trees) > 1 and med[0] else ""
        print(f"{k:>18}{cells}{ratio}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="*", default=["restart", "latency", "poststream"])
    ap.add_argument("--queues", type=int, default=100_000)
    ap.add_argument("--posts", type=int, default=300)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", help="another checkout, run in turns with this one")
    args = ap.parse_args()
    trees = {"after": HERE}
    if args.before:
        trees = {"before": Path(args.before).resolve(), "after": HERE}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {uptime()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="msgboard-queues-") as tmp:
        board = Path(tmp) / "board"
        if {"restart", "latency"} & set(args.rows):
            build(board, args.queues)
        runs: dict[str, Callable[[Path], dict[str, float]]] = {
            "restart": lambda tree: restart(tree, board),
            "latency": lambda tree: latency(tree, board, args.posts),
            "poststream": lambda tree: poststream(
                tree, Path(tempfile.mkdtemp(dir=tmp)) / "board", args.batches
            ),
        }
        for row in args.rows:
            rows: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
            for i in range(args.rounds):
                for label, tree in trees.items():
                    got = runs[row](tree)
                    rows[label].append(got)
                    cells = ", ".join(f"{k} {v:.1f}" for k, v in got.items())
                    print(f"{row} round {i + 1} {label}: {cells}", flush=True)
            report(row, rows)
    print(f"\n{uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
