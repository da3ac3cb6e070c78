"""The damage harness of issue 23: damage a stopped board's ``data.mdb`` on a
copy, then ask ``msgboard check`` and a real server what they make of it,
and judge the answers.

- ``build``: the sweep board, two queues (``jobs``: tuples and addresses,
  some taken into history; ``logs``), a few thousand messages;
- ``kinds``: what each page of the clean file is (tree and kind, from the
  page verifier's trace), to sample pages of every kind;
- ``zero``, ``flip``, ``swap_metas``: damages of the bytes;
- ``run_check``: ``msgboard check DIR`` in a subprocess (its exit status,
  or the signal that killed it, and its lines);
- ``run_serve``: ``python -m tests.sweep probe DIR`` in a subprocess: a
  real gRPC server on a loopback port over DIR (the server of
  ``msgboard.testing``), a client that lists the queues, browses each to
  its end, reads the stats, then posts and takes once per queue; what it saw
  as JSON, or the refusal line, or the signal;
- ``judge``: the invariants. Check never dies by a signal and says clean
  only of a board served intact; the server is served intact, refused in one
  line naming ``msgboard check``, or serves what it can with the rest
  counted as damaged; never a crash, never a hang, never a message with
  other bytes than the clean board's, never fewer messages with nothing
  reported, never INTERNAL for damage. ``tests/test_damage.py`` shows that
  ``judge`` catches each violation.

``bench/damage.py`` runs the full sweep (every page) with the same parts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: What a refusal points the operator to: one of these.
WAYS_OUT = ("msgboard check", "--init", "--accept-rollback")
#: Templates for the sweep board's queues: one every message matches, one
#: that two match (read through the index: a selective key).
TEMPLATES: dict[str, list[tuple[Any, ...]]] = {
    "jobs": [("job", int, str), ("job", 5, str)],
    "logs": [("log", int), ("log", 5)],
}


def build(path: Path, jobs: int = 2100, logs: int = 1200, take: int = 500, body: int = 200) -> None:
    """The sweep board at ``path``, closed."""
    from msgboard import Message, QueueSpec
    from msgboard.engine import Board

    with Board(path) as board:
        board.create_queue(QueueSpec("jobs", max_history=10_000))
        board.create_queue(QueueSpec("logs"))
        for start in range(0, jobs, 250):
            board.post(
                "jobs",
                [
                    Message(
                        tuple=("job", i, f"file-{i}.png"),
                        address=f"img.resize.{i % 7}",
                        body=body_of("jobs", i) + b"j" * body,
                    )
                    for i in range(start, min(jobs, start + 250))
                ],
            )
        for start in range(0, logs, 250):
            board.post(
                "logs",
                [
                    Message(
                        tuple=("log", i), address="app.log", body=body_of("logs", i) + b"l" * body
                    )
                    for i in range(start, min(logs, start + 250))
                ],
            )
        for _ in range(take // 50):
            board.take("jobs", max=50)


def body_of(queue: str, i: int) -> bytes:
    """The start of the body of message ``i`` (from 0) of ``queue``."""
    return (b"j%06d" if queue == "jobs" else b"l%06d") % i


def kinds(path: Path) -> dict[int, str]:
    """Every page of the clean file: its tree and kind (``unused`` for a
    page no tree reaches), by page number."""
    from msgboard.lmdbstore.verify import DataFile

    with DataFile(str(path)) as f:
        f.trace = {}
        f.verify()
        pages = f.pages
        trace = dict(f.trace)
    out = {p: trace.get(p, "unused") for p in range(pages)}
    out[0] = out[1] = "meta"
    return out


def pick(pages: dict[int, str], per_kind: int, seed: int = 1) -> list[int]:
    """A sample: up to ``per_kind`` pages of each kind."""
    rng = random.Random(seed)
    by: dict[str, list[int]] = {}
    for p, k in pages.items():
        by.setdefault(k, []).append(p)
    return sorted(p for ps in by.values() for p in rng.sample(ps, min(per_kind, len(ps))))


def leaves_of(path: Path, kind: str, qid: int) -> list[int]:
    """The pages of ``kind`` (e.g. "unprocessed leaf") whose first key is
    queue ``qid``'s."""
    size, found = psize(path), []
    with open(path / "data.mdb", "rb") as f:
        for pgno, k in kinds(path).items():
            if k != kind:
                continue
            f.seek(pgno * size)
            page = f.read(size)
            first = int.from_bytes(page[16:18], sys.byteorder)  # node 0's offset
            if page[first + 8 : first + 12] == qid.to_bytes(4, "big"):
                found.append(pgno)
    return found


def copy(board: Path, to: Path) -> Path:
    """A copy of the closed board (its data.mdb, lock.mdb, marker and
    sidecar): damage lands on the copy."""
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(board, to)
    return to


def psize(path: Path) -> int:
    from msgboard.lmdbstore.verify import DataFile

    with DataFile(str(path)) as f:
        return f.psize


def zero(path: Path, pgno: int) -> None:
    """Zeroes page ``pgno`` of ``path``'s data.mdb."""
    size = psize(path)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(pgno * size)
        f.write(bytes(size))


def flip(path: Path, pgno: int, seed: int, n: int = 64) -> None:
    """Flips ``n`` bytes at a seeded offset past the header of page ``pgno``."""
    size = psize(path)
    rng = random.Random(seed * 1_000_003 + pgno)
    at = pgno * size + rng.randrange(16, size - n)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(at)
        data = bytearray(f.read(n))
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


def swap_metas(path: Path) -> None:
    size = psize(path)
    with open(path / "data.mdb", "r+b") as f:
        a, b = f.read(size), f.read(size)
        f.seek(0)
        f.write(b + a)


def flip_nodes(path: Path, pgno: int, n: int = 64) -> None:
    """Flips ``n`` bytes in the used part of page ``pgno`` (its nodes: keys,
    values, child page numbers), not its free space."""
    size = psize(path)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(pgno * size)
        page = f.read(size)
        upper = int.from_bytes(page[14:16], sys.byteorder)
        at = pgno * size + max(upper, size - 4 * n)
        f.seek(at)
        data = f.read(n)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


def flip_key(path: Path, qid: int, seq: int) -> None:
    """Flips one bit high in the seq of record (qid, seq)'s key, where it
    sits in a leaf of ``unprocessed``: the key now reads seq + 2**32."""
    from tests import damage

    damage.flip(path, damage.key(qid, seq), offset=7)


def older_copy(path: Path) -> None:
    """Puts back the data file as it was 5 commits ago (the board is opened,
    takes 5 messages one commit each, and closed, on the real file)."""
    from msgboard.engine import Board

    shutil.copy(path / "data.mdb", path.parent / "older.mdb")
    with Board(path) as b:
        for _ in range(5):
            b.take("logs")
    shutil.copy(path.parent / "older.mdb", path / "data.mdb")


def first(pages: dict[int, str], kind: str) -> int:
    return min(p for p, k in pages.items() if k == kind)


#: The corruption table: a name, the damage done to a copy of the board
#: (given the clean file's page kinds), and the server outcomes allowed.
TABLE: list[tuple[str, Callable[[Path, dict[int, str]], None], set[str]]] = [
    ("meta page 0 zeroed", lambda d, k: zero(d, 0), {"refused"}),
    ("meta page 1 zeroed", lambda d, k: zero(d, 1), {"refused"}),
    ("meta pages swapped", lambda d, k: swap_metas(d), {"refused"}),
    ("data.mdb 0 bytes", lambda d, k: os.truncate(d / "data.mdb", 0), {"refused"}),
    ("data.mdb missing", lambda d, k: os.remove(d / "data.mdb"), {"refused"}),
    ("an older data.mdb put back", lambda d, k: older_copy(d), {"refused"}),
    ("free-list leaf zeroed", lambda d, k: zero(d, first(k, "free leaf")), {"refused"}),
    ("main-tree leaf zeroed", lambda d, k: zero(d, first(k, "main leaf")), {"refused"}),
    ("queues leaf zeroed", lambda d, k: zero(d, first(k, "queues leaf")), {"refused"}),
    ("state leaf zeroed", lambda d, k: zero(d, first(k, "state leaf")), {"refused"}),
    (
        "unprocessed branch zeroed",
        lambda d, k: zero(d, first(k, "unprocessed branch")),
        {"refused"},
    ),
    ("unprocessed leaf zeroed", lambda d, k: zero(d, first(k, "unprocessed leaf")), {"refused"}),
    ("history leaf zeroed", lambda d, k: zero(d, first(k, "history leaf")), {"refused"}),
    ("index leaf zeroed", lambda d, k: zero(d, first(k, "index leaf")), {"refused"}),
    (
        "index duplicates page zeroed",
        lambda d, k: zero(d, first(k, "index(dups) leaf")),
        {"refused"},
    ),
    ("times leaf zeroed", lambda d, k: zero(d, first(k, "times leaf")), {"refused"}),
    (
        "64 bytes flipped in an unprocessed leaf's nodes",
        lambda d, k: flip_nodes(d, first(k, "unprocessed leaf")),
        {"refused", "counted"},
    ),
    (
        "64 bytes flipped in an unprocessed branch's nodes",
        lambda d, k: flip_nodes(d, first(k, "unprocessed branch")),
        {"refused", "counted"},
    ),
    (
        "64 bytes flipped in an index leaf's nodes",
        lambda d, k: flip_nodes(d, first(k, "index leaf")),
        {"refused", "counted", "intact"},
    ),
    (
        "one bit of a record's key (jobs seq 874)",
        lambda d, k: flip_key(d, 1, 874),
        {"counted"},
    ),
    (
        "index only: an entry removed (jobs seq 900)",
        lambda d, k: _unfile(d, 1, 900),
        {"index gap", "counted"},
    ),
    (
        "index only: a stale entry (logs, seq 99999)",
        lambda d, k: _stale(d, 2, 99_999),
        {"intact"},
    ),
]


@contextlib.contextmanager
def _index(path: Path) -> Iterator[tuple[Any, Any]]:
    """A write transaction on the board's ``index``, behind its back."""
    import lmdb

    env = lmdb.open(str(path), max_dbs=16, map_size=1 << 34)
    try:
        with env.begin(write=True) as txn:
            yield txn, env.open_db(b"index", txn=txn, dupsort=True)
    finally:
        env.close()


def _unfile(path: Path, qid: int, seq: int) -> None:
    """Removes every index entry of (qid, seq)."""
    from tests import damage

    prefix, value = damage.key(qid, seq)[:4], damage.key(qid, seq)[4:]
    with _index(path) as (txn, index):
        for k in [k for k, v in txn.cursor(index) if k[:4] == prefix and v == value]:
            txn.delete(k, value, db=index)


def _stale(path: Path, qid: int, seq: int) -> None:
    """Files a seq that is no record under the index key of logs' second
    field being 5, which the probe's selective read looks up."""
    from msgboard.associative.keys import message_keys
    from tests import damage

    (key,) = [k for k in message_keys("app.log", ("log", 5)) if k.startswith(b"f\x02\x01")]
    with _index(path) as (txn, index):
        txn.put(damage.key(qid, 0)[:4] + key, damage.key(qid, seq)[4:], db=index)


# -- the probes ---------------------------------------------------------------


@dataclass
class Checked:
    """What ``msgboard check`` did: exit status (None: killed by
    ``signal``) and its lines."""

    rc: int | None
    signal: str = ""
    lines: list[str] = field(default_factory=list)


def run_check(path: Path) -> Checked:
    p = subprocess.run(
        [sys.executable, "-m", "msgboard", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    lines = (p.stdout + p.stderr).splitlines()
    if p.returncode < 0:
        return Checked(None, signal.Signals(-p.returncode).name, lines)
    return Checked(p.returncode, "", lines)


def run_serve(path: Path, timeout: float = 120) -> dict[str, Any]:
    """The probe in a subprocess; its JSON, or ``{"crash": SIGNAME}``, or
    ``{"hang": True}``."""
    try:
        p = subprocess.run(
            [sys.executable, "-m", "tests.sweep", "probe", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"hang": True}
    if p.returncode < 0:
        return {"crash": signal.Signals(-p.returncode).name, "stderr": p.stderr[-2000:]}
    try:
        out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"exit {p.returncode}: {p.stderr[-2000:]}"}
    return out


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def probe(path: Path) -> dict[str, Any]:
    """Serves ``path`` (a real server, loopback, port 0) and reads it all
    back through a client."""
    from msgboard.client import Client
    from msgboard.errors import MsgboardError
    from msgboard.results import Start
    from msgboard.testing import ServerThread

    try:
        server = ServerThread(path).start()
    except MsgboardError as e:
        return {"refused": str(e), "code": e.code}
    out: dict[str, Any] = {"queues": {}, "errors": []}
    try:
        with Client(server.address, timeout=60) as c:
            for view in c.list_queues():
                name = view.spec.name
                seen: dict[str, str] = {}
                q: dict[str, Any] = {
                    "unprocessed": view.unprocessed,
                    "history": view.history,
                    "messages": seen,
                }
                out["queues"][name] = q
                seq, start = 0, Start.OLDEST
                try:
                    while True:
                        page = c.browse(name, start, seq=seq, limit=1000)
                        for m in page.messages:
                            seen[f"{m.section.value}:{m.seq}"] = _digest(m.body)
                        if not page.next_seq:
                            break
                        seq, start = page.next_seq, Start.SEQ
                except MsgboardError as e:
                    q["error"] = e.code
                    out["errors"].append(f"browse {name}: {e.code}: {e}")
            for name, tmpls in TEMPLATES.items():  # through the index
                if name not in out["queues"]:
                    continue
                read: dict[str, str] = {}
                out["queues"][name]["read"] = read
                for tmpl in tmpls:
                    try:
                        got = c.read(name, [tmpl], max=10_000)
                        read.update({f"unprocessed:{m.seq}": _digest(m.body) for m in got})
                    except MsgboardError as e:
                        out["errors"].append(f"read {name}: {e.code}: {e}")
            for s in c.stats().queues:
                if s.name in out["queues"]:
                    out["queues"][s.name]["damaged"] = s.damaged
            for name in list(out["queues"]):
                if name.startswith("$"):
                    continue
                for call in ("post", "take"):
                    try:
                        if call == "post":
                            from msgboard import Message

                            c.post_receipts(name, [Message(body=b"after")])
                        else:
                            c.take(name)
                    except MsgboardError as e:
                        out["errors"].append(f"{call} {name}: {e.code}: {e}")
    finally:
        server.stop()
    return out


# -- the judge ----------------------------------------------------------------


@dataclass
class Verdict:
    """The server's outcome (``intact``, ``refused``, ``counted``: damage
    skipped and counted) and every invariant broken."""

    outcome: str
    violations: list[str] = field(default_factory=list)


def judge(clean: dict[str, Any], served: dict[str, Any], checked: Checked) -> Verdict:
    """Judges one damaged board against the clean board's probe ``clean``."""
    v: list[str] = []
    if checked.signal:
        v.append(f"check died by {checked.signal}")
    elif checked.rc not in (0, 1):
        v.append(f"check exited {checked.rc}")
    if "crash" in served:
        return Verdict("crash", [*v, f"the server died by {served['crash']}"])
    if served.get("hang"):
        return Verdict("hang", [*v, "the server hung"])
    if "error" in served:
        return Verdict("error", [*v, f"the probe failed: {served['error']}"])
    if "refused" in served:
        line = served["refused"]
        if "\n" in line or not any(w in line for w in WAYS_OUT):
            v.append(f"refused, but not in one line saying what to do: {line!r}")
        return Verdict("refused", v)
    outcome = "intact"
    for name, want in clean["queues"].items():
        got = served["queues"].get(name)
        if got is None:
            v.append(f"queue {name!r} is gone, and nothing says so")
            outcome = "lost"
            continue
        msgs, have = want["messages"], got["messages"]
        read = got.get("read", {})
        wrong = [k for k, d in [*have.items(), *read.items()] if k in msgs and msgs[k] != d]
        extra = [k for k in have if k not in msgs]
        if wrong or extra:
            v.append(f"queue {name!r}: served other bytes for {(wrong + extra)[:3]}")
        missing = len(msgs) - sum(1 for k in have if k in msgs)
        unread = len(want.get("read", {})) - sum(1 for k in read if k in msgs)
        reported = got.get("damaged", 0) or ("error" in got and got["error"] == "DATA_LOSS")
        if missing:
            outcome = "counted"
            if not reported:
                v.append(f"queue {name!r}: {missing} message(s) not served, none reported")
        elif unread and not reported:
            # Browsed and taken, but not found by pattern: an index entry
            # is missing, which only a walk of the index shows (check).
            outcome = "index gap" if outcome == "intact" else outcome
            if checked.rc == 0:
                v.append(f"queue {name!r}: {unread} message(s) not found by pattern, unreported")
        elif unread:
            outcome = "counted"
    for e in served.get("errors", []):
        if ": INTERNAL:" in e or ": UNKNOWN:" in e:
            v.append(f"{e} (damage must be DATA_LOSS)")
    if outcome != "intact" and checked.rc == 0:
        v.append("check says clean, the server did not serve it intact")
    return Verdict(outcome, v)


def rows(pages: dict[int, str], results: dict[int, tuple[Checked, Verdict]]) -> Iterator[str]:
    """The summary table: per kind of page, the outcomes."""
    by: dict[str, dict[str, int]] = {}
    for p, (c, verdict) in results.items():
        k = by.setdefault(pages[p], {})
        check = c.signal or ("clean" if c.rc == 0 else "damaged")
        for word in (f"check {check}", f"server {verdict.outcome}"):
            k[word] = k.get(word, 0) + 1
        if verdict.violations:
            k["violations"] = k.get("violations", 0) + 1
    yield "| page kind | pages | msgboard check | server | violations |"
    yield "| --- | --- | --- | --- | --- |"
    for kind in sorted(by):
        k = by[kind]
        n = sum(v for w, v in k.items() if w.startswith("check "))
        checks = ", ".join(f"{w[6:]} {c}" for w, c in sorted(k.items()) if w.startswith("check "))
        serves = ", ".join(f"{w[7:]} {c}" for w, c in sorted(k.items()) if w.startswith("server "))
        yield f"| {kind} | {n} | {checks} | {serves} | {k.get('violations', 0)} |"


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        print(json.dumps(probe(Path(sys.argv[2]))))
