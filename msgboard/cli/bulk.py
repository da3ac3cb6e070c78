"""Bulk posting for ``msgboard post QUEUE --ndjson FILE``: one message a
line, each a JSON object in the shape ``read --json`` prints
(``msgboard.cli.lines``), sent through one PostStream.

Lines are read, checked and sent as the stream goes, so a file of any size
posts in bounded memory. A bad line ends the stream: the lines before it
are posted (the batches already sent and the part-batch before it), the bad
line and those after it are not, and the error names the line number. Blank
lines are skipped. A progress bar goes to stderr when stderr is a terminal.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from msgboard.cli.lines import message_from_json
from msgboard.errors import InvalidArgument
from msgboard.message import Message

if TYPE_CHECKING:
    from msgboard.client import Client

#: Messages per PostStream request.
BATCH = 500


@dataclass(frozen=True, slots=True)
class Posted:
    """What a bulk post did."""

    count: int
    seconds: float
    #: Messages that found the queue full (seq 0; see the queue's overflow).
    refused: int

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def json(self) -> dict[str, float | int]:
        return {
            "posted": self.count,
            "refused": self.refused,
            "seconds": round(self.seconds, 3),
            "msgs_per_s": round(self.rate, 1),
        }

    def line(self) -> str:
        refused = f" ({self.refused} refused: queue full)" if self.refused else ""
        return (
            f"posted {self.count} message{'' if self.count == 1 else 's'}{refused} in "
            f"{self.seconds:.2f} s "
            f"({self.rate:.0f} msgs/s)"
        )


class Progress:
    """A one-line progress bar, redrawn in place at most ten times a second:
    messages stored, rate, and (when the input's size is known) how much of
    it has been read."""

    WIDTH = 30

    def __init__(self, out: IO[str], size: int = 0) -> None:
        self.out = out
        self.size = size
        self.read = 0
        self.start = time.monotonic()
        self._drawn = 0.0

    def update(self, stored: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn < 0.1:
            return
        self._drawn = now
        elapsed = max(now - self.start, 1e-9)
        text = f"{stored} posted, {stored / elapsed:.0f} msgs/s"
        if self.size:
            done = min(1.0, self.read / self.size)
            filled = int(done * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            text = f"[{bar}] {done:4.0%}  {text}"
        self.out.write("\r" + text + ("\n" if final else ""))
        self.out.flush()


def _messages(
    f: IO[bytes], expires_at: int, bad: list[InvalidArgument], progress: Progress | None
) -> Iterator[Message]:
    """The messages of the lines; at a bad line, its error in ``bad`` and
    the end."""
    for n, raw in enumerate(f, 1):
        if progress is not None:
            progress.read += len(raw)
        text = raw.strip()
        if not text:
            continue
        try:
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InvalidArgument(f"not JSON ({e})") from None
            yield message_from_json(obj, expires_at)
        except InvalidArgument as e:
            bad.append(InvalidArgument(f"line {n}: {e}"))
            return


def post_ndjson(c: Client, queue: str, path: str, *, expires_at: int = 0) -> Posted:
    """Posts the messages of an NDJSON file (``-``: standard input)."""
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        size = os.fstat(f.fileno()).st_size if path != "-" else 0
        progress = Progress(sys.stderr, size) if sys.stderr.isatty() else None
        bad: list[InvalidArgument] = []
        start = time.monotonic()
        seqs = c.post_many(
            queue,
            _messages(f, expires_at, bad, progress),
            batch=BATCH,
            progress=progress.update if progress is not None else None,
        )
        posted = Posted(len(seqs), time.monotonic() - start, seqs.count(0))
        if progress is not None:
            progress.update(posted.count, final=True)
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    if bad:
        e = bad[0]
        e.args = (f"{e} (the {posted.count} messages before it are posted, none from it on)",)
        raise e
    return posted
