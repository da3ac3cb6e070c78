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

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pyspark_msgboard import snapshot
from pyspark_msgboard.options import ReadOptions
from pyspark_msgboard.snapshot import Range


class Ranges(InputPartition):
    """One partition: key ranges of the snapshot."""

    def __init__(self, ranges: list[Range]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


class MsgboardReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [Ranges(ranges) for ranges in self.options.partitions()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Ranges)
        o = self.options
        return snapshot.read(o.path, partition.ranges, o.batch_rows, o.decoder)


class MsgboardDataSource(DataSource):
    """Reads a msgboard snapshot directory (``load(PATH)``)."""

    @classmethod
    def name(cls) -> str:
        return "msgboard"

    def schema(self) -> StructType:
        return snapshot.spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        # Case-insensitive: a dict() of it would be lower-cased.
        return MsgboardReader(ReadOptions.parse(self.options))
