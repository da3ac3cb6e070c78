"""Every command and snippet in README.md and docs/*.md runs as written.

The files run in the order a reader reads them (README.md, then the pages
its "Read more" list links, in that order, then any other page of docs/),
all against ONE board served on a free loopback port over a new data
directory, in one working directory, as a reader following them on one
board would: a page that makes a queue another page made with other
properties fails here (ALREADY_EXISTS), as it would for the reader. Each
file's code blocks run in document order:

- ```sh (or bash, shell) blocks with ``bash -e -o pipefail``: a block fails
  at its first failing command;
- ```python blocks in one Python process per file, sharing one namespace,
  as a reader pasting the page into one interpreter would (so a page imports
  and connects once, in its first snippet);
- any other language (```text, ```toml, ```proto, ```cron …) is not run.

Both see the board at its real address: the literal ``127.0.0.1:7878`` in a
block is replaced by it, and ``MSGBOARD_SERVER`` (the CLI's and the
client's default) and ``MSGBOARD_ADDRESS`` are set to it. ``PATH`` starts
with the directory of this interpreter (``.venv/bin``), so ``msgboard``
is the one under test.

A block that cannot run in a test (it starts a foreground server, takes
many minutes, needs a tool we do not install) is preceded by the line
``<!-- docs-test: skip (the reason) -->``. The skips are listed by
``test_skips_are_marked_with_a_reason`` (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from msgboard.testing import ServerThread

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: A page of docs/ linked from a list item of the README's "Read more".
READ_MORE_LINK = re.compile(r"^- \[[^\]]*\]\((docs/[\w.-]+\.md)\)", re.MULTILINE)


def reading_order() -> list[Path]:
    """README.md, then the pages its "Read more" section links, in its
    order, then the other pages of docs/ (sorted): the order a reader
    reads them in."""
    text = README.read_text()
    start = text.index("\n## Read more")
    end = text.find("\n## ", start + 1)
    linked = [ROOT / m for m in READ_MORE_LINK.findall(text[start : end if end > 0 else None])]
    rest = [p for p in sorted((ROOT / "docs").glob("*.md")) if p not in linked]
    return [README, *dict.fromkeys(linked), *rest]


DOCS = reading_order()
PLACEHOLDER = "127.0.0.1:7878"
SH = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py", "python3"}
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->")
MARKER = re.compile(r"<!--\s*docs-test\b")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
#: Seconds one block may take (a Spark export takes tens of seconds).
BLOCK_TIMEOUT = 300.0


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    #: 1-based line of the opening fence.
    line: int
    lang: str
    code: str
    #: Why it is not run, from its docs-test marker; None: it runs.
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.skip is None and self.lang in SH | PYTHON


class DocError(Exception):
    """A Markdown file the harness cannot read as intended."""


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of ``path``, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    previous = ""  # the last non-blank line before the current one
    while i < len(lines):
        text = lines[i]
        m = FENCE.match(text)
        if m is None:
            if MARKER.search(text) and not SKIP.search(text):
                raise DocError(
                    f"{path.relative_to(ROOT)}:{i + 1}: a docs-test marker must read "
                    f"'<!-- docs-test: skip (the reason) -->', not {text.strip()!r}"
                )
            if text.strip():
                previous = text
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("info").strip().split(" ")[0].lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence) and not lines[i].strip().strip(fence[0])
        ):
            body.append(lines[i][len(m.group("indent")) :])
            i += 1
        if i == len(lines):
            raise DocError(f"{path.relative_to(ROOT)}:{start + 1}: the code block never closes")
        skip = SKIP.search(previous)
        found.append(Block(path, start + 1, lang, "\n".join(body) + "\n", skip and skip["reason"]))
        previous = ""
        i += 1
    return found


#: Runs in the per-file Python process: reads one JSON request per line
#: (code, file, line), runs the code in one shared namespace with its line
#: numbers those of the Markdown file, and answers on a line of its own.
DRIVER = r"""
import contextlib, io, json, sys, traceback
ANSWER = sys.argv[1]
namespace = {"__name__": "__main__"}
for request in sys.stdin:
    r = json.loads(request)
    out = io.StringIO()
    try:
        code = compile("\n" * r["line"] + r["code"], r["file"], "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(code, namespace)
        error = ""
    except BaseException:
        error = traceback.format_exc()
    print(ANSWER + json.dumps({"output": out.getvalue(), "error": error}), flush=True)
"""
ANSWER = "\x1edocs-test-answer "


class Python:
    """One Python process for the python blocks of one file."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, ANSWER],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, block: Block, code: str) -> str | None:
        """Runs one block; its error (with any output) or None."""
        assert self.proc.stdin is not None
        request = {"code": code, "file": str(block.path.relative_to(ROOT)), "line": block.line}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        stray: list[str] = []  # what the block's subprocesses printed
        while True:
            try:
                line = self._lines.get(timeout=BLOCK_TIMEOUT)
            except queue.Empty:
                return f"it did not finish in {BLOCK_TIMEOUT:.0f} s"
            if line is None:
                return "the Python process died:\n" + "".join(stray)
            if line.startswith(ANSWER):
                answer = json.loads(line[len(ANSWER) :])
                if answer["error"]:
                    return "".join(stray) + answer["output"] + answer["error"]
                return None
            stray.append(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def run_sh(block: Block, code: str, cwd: Path, env: dict[str, str]) -> str | None:
    """Runs one sh block with bash; its error (with its output) or None."""
    script = cwd / f".docs-test-{block.path.stem}-{block.line}.sh"
    script.write_text(code)
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", str(script)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode()
        return f"it did not finish in {BLOCK_TIMEOUT:.0f} s\n{out}"
    finally:
        script.unlink()
    if done.returncode:
        return f"exit status {done.returncode} (bash's line N is line N of the block)\n" + (
            done.stdout
        )
    return None


def _environment(address: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["MSGBOARD_SERVER"] = env["MSGBOARD_ADDRESS"] = address
    env.pop("PYTHONSTARTUP", None)
    return env


@dataclass(frozen=True)
class Reader:
    """What a reader has: one board, and one working directory."""

    board: ServerThread
    cwd: Path


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """One board and one working directory for every page of this module
    (pytest runs the parametrized pages in DOCS's order); a page run alone
    (``-k routing``) gets a fresh board, as a reader who starts there."""
    root = tmp_path_factory.mktemp("docs")
    s = ServerThread(root / "board").start()
    try:
        (root / "cwd").mkdir()
        yield Reader(s, root / "cwd")
    finally:
        s.stop()


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_block_runs_in_reading_order_on_one_board(path: Path, reader: Reader) -> None:
    """Given the board the pages before this one (in reading order) ran on,
    when I run the page's sh and python blocks in order, I expect each to
    succeed; a failure names the file and line of its block and shows what
    it printed."""
    board, cwd = reader.board, reader.cwd
    env = _environment(board.address)
    python: Python | None = None
    try:
        for block in blocks(path):
            if not block.runs:
                continue
            code = block.code.replace(PLACEHOLDER, board.address)
            if block.lang in SH:
                error = run_sh(block, code, cwd, env)
            else:
                python = python or Python(cwd, env)
                error = python.run(block, code)
            if error is not None:
                pytest.fail(
                    f"{block.where}: this {block.lang} block failed:\n"
                    f"{_indent(block.code)}\n{_indent(error)}",
                    pytrace=False,
                )
    finally:
        if python is not None:
            python.close()


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip("\n").splitlines())


def test_the_pages_run_in_the_order_the_readme_gives() -> None:
    """README.md first, then the pages of its "Read more" list in that
    list's order, then any page it does not link; every page once."""
    text = README.read_text()
    more = text[text.index("\n## Read more") :]
    linked = sorted(
        {p for p in DOCS[1:] if f"({p.relative_to(ROOT).as_posix()})" in more},
        key=lambda p: more.index(f"({p.relative_to(ROOT).as_posix()})"),
    )
    assert DOCS[0] == README and DOCS[1 : 1 + len(linked)] == linked
    assert DOCS[1:3] == [ROOT / "docs" / "concepts.md", ROOT / "docs" / "routing.md"]
    assert sorted(DOCS) == sorted([README, *(ROOT / "docs").glob("*.md")])


def test_skips_are_marked_with_a_reason() -> None:
    """Every skip marker names its reason and stands right before a block
    that would otherwise run; the list is printed, and stays short."""
    skipped = [b for p in DOCS for b in blocks(p) if b.skip is not None]
    for b in skipped:
        assert b.lang in SH | PYTHON, f"{b.where}: a skip before a {b.lang} block, never run"
        print(f"docs-test skip {b.where}: {b.skip}")
    # Sixteen: the links add docs/links.md's translator benchmark, a pull
    # among boards its walk-through starts (that block runs one), and the
    # benchmark of links in docs/performance.md.
    assert len(skipped) <= 16, [b.where for b in skipped]


def test_the_harness_reads_blocks_markers_and_bad_markers(tmp_path: Path) -> None:
    """The parser finds fenced blocks with their language and line, the
    skip marker above a block, and refuses a marker it cannot read."""
    page = ROOT / "docs" / ".docs-test-selftest.md"
    try:
        page.write_text(
            "# t\n\n```sh\necho 1\n```\n\n<!-- docs-test: skip (a server) -->\n"
            "```python\nprint(2)\n```\n\n````text\n```\n````\n"
        )
        got = [(b.line, b.lang, b.code, b.skip) for b in blocks(page)]
        assert got == [
            (3, "sh", "echo 1\n", None),
            (8, "python", "print(2)\n", "a server"),
            (12, "text", "```\n", None),
        ]
        page.write_text("<!-- docs-test: skipped because -->\n```sh\ntrue\n```\n")
        with pytest.raises(DocError, match=r"docs/\.docs-test-selftest\.md:1"):
            blocks(page)
    finally:
        page.unlink()
