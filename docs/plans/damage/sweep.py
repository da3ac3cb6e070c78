"""The page sweep: damage each page of a stopped board's ``data.mdb`` in
turn, on a copy, and see who survives it.

For every page (meta pages and free pages included) the clean file is
copied into a scratch directory, the page is zeroed (``--mode zero``) or 64
of its bytes flipped (``--mode flip``, seeded), and each probe runs on the
copy:

- ``check``: today's ``msgboard check DIR`` in a subprocess: exit 0, 1, or
  the signal that killed it;
- ``serve``: today's engine in a subprocess, as the server starts it: open
  the ``Board`` (which catches up on expiries by walking every waiting
  message), then Browse every queue to its end;
- ``verify``: ``pageverify.verify`` in this process (it must never crash
  it): the problems it finds;
- ``lmdbverify``: py-lmdb 3.0's own verifier, ``lmdb.verify``, to compare;
- ``child``: ``childwalk.walk``: LMDB's own walk of every database in a
  child process: clean, an lmdb error, or the signal;
- ``write``: today's engine posting and taking on the damaged board;
- ``proposed``: the proposed check (``checkflow.py``): clean, ``named``
  (damage listed by queue) or ``found`` (listed by tree and page);
- ``repair``: the repair prototype (``repair.py``), then today's check and
  the verifier on the repaired board: ``repaired`` when both are clean.

Each page is labelled with what it was in the clean file (its tree and
kind, from ``pageverify``'s trace; ``unused`` for a page no tree reaches:
free or never written). The summary counts outcomes per kind, and the
``gaps``: pages the verifier passed but LMDB crashed or failed on (the
figure that must be 0 for the server to trust the verifier).

    sweep.py BOARD [--probes check,serve,verify,child] [--mode zero|sector|flip]
             [--pages A-B] [--seed N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import childwalk
import pageverify


@dataclass
class Row:
    """One damaged page: what it was and what each probe said."""

    pgno: int
    kind: str
    outcomes: dict[str, str] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)


def _forked(fn: Callable[[str], int], path: str, timeout: float = 120.0) -> tuple[int, str]:
    """Runs ``fn(path)`` in a forked child (msgboard is imported once, in
    the parent, so a probe costs no interpreter start): its exit status (a
    negative signal number if a signal ended it, 124 on timeout) and its
    output. The sweep itself runs no threads, so forking is safe."""
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            rc = 70
            try:
                rc = fn(path)
            except BaseException as e:
                print(f"{type(e).__name__}: {e}", flush=True)
                rc = 2
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = 124 << 8
                break
            time.sleep(0.005)
        out.seek(0)
        text = out.read().decode(errors="replace")[-2000:]
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status), text
    return os.WEXITSTATUS(status), text


def _died(rc: int) -> str:
    return signal.Signals(-rc).name if rc < 0 else ""


def _last(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:300]


def _msgboard_check(path: str) -> int:
    from msgboard.cli import main

    rc: int = main(["check", path])
    return rc


def _serve(path: str) -> int:
    """The engine as the server starts it (it catches up on expiries by
    walking every waiting message), then Browse of every queue to its end."""
    from msgboard.engine import Board
    from msgboard.results import Start

    with Board(path) as b:
        for q in b.list_queues():
            page = b.browse(q.spec.name, limit=1000)
            while page.next_seq:
                page = b.browse(q.spec.name, Start.SEQ, seq=page.next_seq, limit=1000)
    return 0


def _write(path: str) -> int:
    """The engine writing: posts to both queues (the writer reads the free
    list to reuse pages, splits and touches leaves), then takes."""
    from msgboard import Message
    from msgboard.associative import EVERYTHING
    from msgboard.engine import Board

    with Board(path) as b:
        for q in b.list_queues():
            for i in range(10):
                b.post(q.spec.name, [Message(tuple=("w", i), body=b"w" * 2000)] * 20)
            for _ in range(50):
                b.take(q.spec.name, EVERYTHING)
    return 0


def probe_write(path: str) -> tuple[str, str]:
    """Today's engine posting and taking on the damaged board."""
    rc, text = _forked(_write, path)
    if rc < 0:
        return _died(rc), text[-300:]
    return {0: "wrote", 124: "timeout"}.get(rc, "failed"), _last(text)


def _repair(path: str) -> int:
    """The repair prototype into a new directory, then today's logical
    check of the result (exit 0: clean) and the verifier on it."""
    from msgboard.lmdbstore import check

    import repair

    out = path + ".repaired"
    shutil.rmtree(out, ignore_errors=True)
    try:
        repair.repair(path, out)
        report = check.check(out)
        print("\n".join(report.lines()))
        return 0 if report.ok and pageverify.verify(out).ok else 1
    finally:
        shutil.rmtree(out, ignore_errors=True)


def probe_repair(path: str) -> tuple[str, str]:
    """check --repair (prototype), then check of the repaired board."""
    rc, text = _forked(_repair, path)
    if rc < 0:
        return _died(rc), text[-300:]
    return {0: "repaired", 1: "unclean"}.get(rc, "failed"), _last(text)


def _proposed_check(path: str) -> int:
    import checkflow

    rc, lines = checkflow.check(path)
    print("\n".join(lines))
    return rc


def probe_proposed(path: str) -> tuple[str, str]:
    """The proposed check (checkflow.py): exit 0/1, never a signal."""
    rc, text = _forked(_proposed_check, path)
    if rc < 0:
        return _died(rc), text[-300:]
    lines = text.strip().splitlines()
    named = any(ln.startswith("queue ") for ln in lines)
    return {0: "clean", 1: "named" if named else "found"}.get(rc, f"exit {rc}"), " | ".join(
        lines[:3]
    )[:300]


def probe_check(path: str) -> tuple[str, str]:
    """Today's ``msgboard check``: clean, problems, or the signal."""
    rc, text = _forked(_msgboard_check, path)
    if rc < 0:
        return _died(rc), text[-300:]
    return {0: "clean", 1: "problems", 124: "timeout"}.get(rc, f"exit {rc}"), _last(text)


def probe_serve(path: str) -> tuple[str, str]:
    """Today's engine opening the board and browsing every queue."""
    rc, text = _forked(_serve, path)
    if rc < 0:
        return _died(rc), text[-300:]
    return {0: "served", 124: "timeout"}.get(rc, "refused"), _last(text)


def probe_verify(path: str) -> tuple[str, str]:
    """The verifier, in this process."""
    try:
        report = pageverify.verify(path)
    except pageverify.NotLmdb as e:
        return "refused", str(e)
    if report.ok:
        return "clean", ""
    return "found", "; ".join(str(p) for p in report.problems[:3])


def probe_lmdbverify(path: str) -> tuple[str, str]:
    """py-lmdb 3.0's own offline verifier (``lmdb.verify``), for comparison."""
    from lmdb import verify as lv

    try:
        errors: list[str] = lv.verify(path)  # type: ignore[no-untyped-call]
    except lv.VerifyError as e:
        return "refused", str(e)
    return ("found", "; ".join(errors[:2])) if errors else ("clean", "")


def probe_child(path: str) -> tuple[str, str]:
    """LMDB's walk in a child process."""
    out = childwalk.walk(path)
    if out.signal:
        return out.signal, out.line()
    return ("error" if out.error else "clean"), out.line() if out.error else ""


PROBES: dict[str, Callable[[str], tuple[str, str]]] = {
    "check": probe_check,
    "serve": probe_serve,
    "write": probe_write,
    "proposed": probe_proposed,
    "repair": probe_repair,
    "verify": probe_verify,
    "child": probe_child,
    "lmdbverify": probe_lmdbverify,
}


def page_kinds(path: str) -> tuple[int, dict[int, str]]:
    """The page size and each reachable page's tree and kind, in the clean
    file."""
    with pageverify.DataFile(path) as f:
        f.trace = {}
        report = f.verify()
        if not report.ok:
            raise SystemExit(f"{path} is not clean: {report.problems[0]}")
        kinds = {0: "meta", 1: "meta"} | f.trace
        return f.psize, kinds


def damage(raw: bytearray, pgno: int, psize: int, mode: str, rng: random.Random) -> None:
    """Zeroes page ``pgno`` (``zero``), or one 512-byte sector of it at
    random (``sector``), or flips 64 of its bytes (``flip``; not in its
    first 16: the header would make it a zeroed-page case again, mostly)."""
    at = pgno * psize
    if mode == "zero":
        raw[at : at + psize] = bytes(psize)
        return
    if mode == "sector":
        start = at + 512 * rng.randrange(psize // 512)
        raw[start : start + 512] = bytes(512)
        return
    start = at + rng.randrange(pageverify.PAGE_HEADER, psize - 64)
    for i in range(start, start + 64):
        raw[i] ^= 0xFF


def sweep(
    board: str, probes: Iterable[str], mode: str, pages: range | None, seed: int
) -> list[Row]:
    """Damages each page of ``board`` (a stopped board's directory) in turn
    and runs each probe on the copy."""
    with open(os.path.join(board, "data.mdb"), "rb") as f:
        clean = f.read()
    psize, kinds = page_kinds(board)
    n = len(clean) // psize
    rows: list[Row] = []
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        work = os.path.join(tmp, "board")
        for pgno in pages if pages is not None else range(n):
            if pgno >= n:
                break
            raw = bytearray(clean)
            damage(raw, pgno, psize, mode, rng)
            row = Row(pgno, kinds.get(pgno, "unused"))
            for name in probes:
                # Each probe gets the damaged file afresh: the engine's
                # probes write to it (open commits, posts grow the file).
                shutil.rmtree(work, ignore_errors=True)
                os.mkdir(work, 0o700)
                with open(os.path.join(work, "data.mdb"), "wb") as f:
                    f.write(raw)
                outcome, detail = PROBES[name](work)
                row.outcomes[name] = outcome
                row.details[name] = detail
            rows.append(row)
            print(
                f"page {pgno:5d} {row.kind:24s} "
                + " ".join(f"{k}={v}" for k, v in row.outcomes.items()),
                file=sys.stderr,
                flush=True,
            )
    return rows


def _group(kind: str) -> str:
    """A page kind without the tree's name, for the summary."""
    if kind in ("meta", "unused"):
        return kind
    tree, _, what = kind.partition(" ")
    if tree in ("free", "main"):
        return f"{tree} {what}"
    return f"named {what}" if "(dups)" not in tree else f"dups {what}"


def summary(rows: list[Row]) -> list[str]:
    """Outcome counts per page kind and per probe, and the verifier's gaps."""
    lines = [f"{len(rows)} pages"]
    probes = list(rows[0].outcomes) if rows else []
    for probe in probes:
        total = Counter(r.outcomes[probe] for r in rows)
        lines.append(f"{probe}: " + ", ".join(f"{k} {v}" for k, v in total.most_common()))
        by_kind: dict[str, Counter[str]] = {}
        for r in rows:
            by_kind.setdefault(_group(r.kind), Counter())[r.outcomes[probe]] += 1
        for kind, c in sorted(by_kind.items()):
            lines.append(f"    {kind:18s} " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
    if "verify" in probes and "child" in probes:
        gaps = [
            r
            for r in rows
            if r.outcomes["verify"] == "clean" and r.outcomes["child"] not in ("clean",)
        ]
        lines.append(f"gaps (verifier clean, LMDB failed or died): {len(gaps)}")
        lines += [f"    page {r.pgno} {r.kind}: {r.details['child']}" for r in gaps[:10]]
    if "verify" in probes and "check" in probes:
        both = Counter(
            (r.outcomes["verify"], r.outcomes["check"]) for r in rows if r.kind != "unused"
        )
        lines.append(
            "verify x check (used pages): "
            + ", ".join(f"{v}/{c} {n}" for (v, c), n in both.most_common())
        )
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("board")
    p.add_argument("--probes", default="verify,child")
    p.add_argument("--mode", choices=("zero", "flip", "sector"), default="zero")
    p.add_argument("--pages", default="", help="A-B: only pages A to B-1")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    pages = None
    if a.pages:
        lo, _, hi = a.pages.partition("-")
        pages = range(int(lo), int(hi))
    t = time.perf_counter()
    rows = sweep(a.board, a.probes.split(","), a.mode, pages, a.seed)
    for line in summary(rows):
        print(line)
    print(f"({time.perf_counter() - t:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
