"""The ``msgboard`` Spark data source: a snapshot as a DataFrame of messages.

::

    df = spark.read.format("msgboard").load("/shared/snapshots/2026-11-21")

Options (all optional): ``rowsPerPartition`` (default 250000) or
``numPartitions`` (overrides it), and ``batchRows``, the rows per Arrow
record batch (default 8192), and ``historySince``, a JSON object of queue
name -> seq: the history of those queues is read from that seq on (what
an earlier export passed so that a night decodes only what it adds), and
``ranges``, the path of a JSON file of ranges to read instead of the whole
snapshot (``[[section, queue, qid, lo, hi, rows], ...]``, runs of seqs that
are all there: what ``msgboard export`` decodes of a night, ``changes.py``),
and ``decoder``: ``compiled`` (the default: ptars, ``compiled.py``) or
``protobuf`` (upb and numpy, ``columns.py``), the same rows either way. The
driver plans key ranges from the snapshot's counters (``snapshot.plan``);
each executor opens the LMDB file read-only with no lock and yields Arrow
record batches, never Python rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pyspark_msgboard import snapshot
from pyspark_msgboard.snapshot import Range


class Ranges(InputPartition):
    """One partition: key ranges of the snapshot."""

    def __init__(self, ranges: list[Range]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


class MsgboardReader(DataSourceReader):
    def __init__(
        self,
        path: str,
        rows_per_part: int,
        parts: int,
        batch_rows: int,
        since: dict[str, int] | None = None,
        listed: str | None = None,
        decoder: str = "compiled",
    ) -> None:
        self.path = path
        self.rows_per_part = rows_per_part
        self.parts = parts
        self.batch_rows = batch_rows
        self.since = since
        self.listed = listed
        self.decoder = decoder

    def partitions(self) -> list[InputPartition]:
        if self.listed is not None:
            plan = snapshot.pack(_ranges(self.listed), self.rows_per_part, self.parts)
        else:
            plan = snapshot.plan(self.path, self.rows_per_part, self.parts, self.since)
        return [Ranges(ranges) for ranges in plan]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Ranges)
        return snapshot.read(self.path, partition.ranges, self.batch_rows, self.decoder)


def _int(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {name}: not a whole number: {text!r}") from None
    if value < 0:
        raise ValueError(f"option {name}: must not be negative (got {value})")
    return value


class MsgboardDataSource(DataSource):
    """Reads a msgboard snapshot directory (``load(PATH)``)."""

    @classmethod
    def name(cls) -> str:
        return "msgboard"

    def schema(self) -> StructType:
        return snapshot.SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self.options  # case-insensitive: a dict() of it is lower-cased
        path = opts.get("path")
        if not path:
            raise ValueError('the msgboard data source needs a snapshot path: load("DIR")')
        return MsgboardReader(
            path,
            _int(opts, "rowsPerPartition", 250_000) or 250_000,
            _int(opts, "numPartitions", 0),
            _int(opts, "batchRows", 8192) or 8192,
            _since(opts.get("historySince")),
            opts.get("ranges"),
            _decoder(opts.get("decoder")),
        )


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
