"""The msgboard data source with ptars_adapter.batch as its decoder (for
measuring only): registered as format "msgboard_ptars"."""
from pyspark_msgboard import columns, snapshot
from pyspark_msgboard.source import MsgboardDataSource, MsgboardReader


class PtarsReader(MsgboardReader):
    def read(self, partition):
        import ptars_adapter
        columns.batch = ptars_adapter.batch  # this worker's decoder
        return snapshot.read(self.path, partition.ranges, self.batch_rows)


class PtarsSource(MsgboardDataSource):
    @classmethod
    def name(cls):
        return "msgboard_ptars"

    def reader(self, schema):
        r = super().reader(schema)
        return PtarsReader(r.path, r.rows_per_part, r.parts, r.batch_rows, r.since)


class FreeReader(MsgboardReader):
    """Yields each partition's rows as the first decoded batch repeated:
    Spark's own cost of a scan with a decoder that costs nothing."""

    def read(self, partition):
        rows = sum(r.rows for r in partition.ranges)
        first = next(iter(snapshot.read(self.path, partition.ranges[:1], self.batch_rows)), None)
        if first is None:
            return
        while rows > 0:
            b = first if rows >= first.num_rows else first.slice(0, rows)
            rows -= b.num_rows
            yield b


class FreeSource(MsgboardDataSource):
    @classmethod
    def name(cls):
        return "msgboard_free"

    def reader(self, schema):
        r = super().reader(schema)
        return FreeReader(r.path, r.rows_per_part, r.parts, r.batch_rows, r.since)
