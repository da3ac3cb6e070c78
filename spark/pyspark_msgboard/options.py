"""The ``msgboard`` data source's options, read and planned without Spark.

``ReadOptions.parse`` reads them (``source.py``'s docstring lists them,
with their defaults); ``partitions`` plans the key ranges each partition
reads. The data source's reader is built on it, and so is an export's
night run in its own process (``export.py``), which imports no pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark_msgboard import snapshot
from pyspark_msgboard.snapfile import Range


@dataclass(frozen=True)
class ReadOptions:
    """What to read of the snapshot at ``path`` and how to cut it."""

    path: str
    rows_per_part: int
    parts: int
    batch_rows: int
    since: dict[str, int] | None = None
    listed: str | None = None
    decoder: str = "compiled"

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> ReadOptions:
        """The options (``path`` among them); ValueError naming a bad one."""
        path = opts.get("path")
        if not path:
            raise ValueError('the msgboard data source needs a snapshot path: load("DIR")')
        return cls(
            path,
            _int(opts, "rowsPerPartition", 250_000) or 250_000,
            _int(opts, "numPartitions", 0),
            _int(opts, "batchRows", 8192) or 8192,
            _since(opts.get("historySince")),
            opts.get("ranges"),
            _decoder(opts.get("decoder")),
        )

    def partitions(self) -> list[list[Range]]:
        """The key ranges of each partition."""
        if self.listed is not None:
            return snapshot.pack(_ranges(self.listed), self.rows_per_part, self.parts)
        return snapshot.plan(self.path, self.rows_per_part, self.parts, self.since)


def _int(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {name}: not a whole number: {text!r}") from None
    if value < 0:
        raise ValueError(f"option {name}: must not be negative (got {value})")
    return value


def _decoder(text: str | None) -> str:
    """The decoder option: one of ``snapshot.DECODERS``."""
    name = text or "compiled"
    if name not in snapshot.DECODERS:
        known = ", ".join(snapshot.DECODERS)
        raise ValueError(f"option decoder: {name!r}: expected one of {known}")
    return name


def _ranges(path: str) -> list[Range]:
    """The ranges option: a JSON file of ``[section, queue, qid, lo, hi, rows]``."""
    try:
        with open(path) as f:
            items = json.load(f)
        return [Range(str(a), str(b), int(c), int(d), int(e), int(g)) for a, b, c, d, e, g in items]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"option ranges: {path}: {e}") from None


def _since(text: str | None) -> dict[str, int] | None:
    """The historySince option: a JSON object of queue name -> first seq."""
    if not text:
        return None
    try:
        since = json.loads(text)
        if not isinstance(since, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in since.items()
        ):
            raise ValueError("not an object of queue names and seqs")
    except ValueError as e:
        raise ValueError(f'option historySince: {e}: expected {{"queue": seq, ...}}') from None
    return since
