"""The ``headwater`` data source: schema, batch reader, and the entry points to the stream
reader and writers (see docs/spark.md).

Driver/executor split: ``partitions()`` runs on the driver and talks to the cluster through a
short-lived :class:`~headwater_spark.resolver.Resolver`; ``read()`` runs on executors with
only the picklable :class:`~headwater_spark.partition.HeadwaterPartition` (an offset range
plus the executor config).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from headwater.errors import InvalidConfigError
from headwater_spark import arrow
from headwater_spark.options import check_read_options, parse_source_options
from headwater_spark.partition import HeadwaterPartition, plan, read_partition
from headwater_spark.planning import ranges_between
from headwater_spark.resolver import Resolver


class HeadwaterBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_source_options(options, streaming=False)

    def partitions(self) -> Sequence[InputPartition]:
        resolver = Resolver(self.opts)
        try:
            tps = resolver.partitions()
            start = resolver.starting(tps)
            end = resolver.ending(tps)
            start = resolver.check_loss(start, "batch read")
        finally:
            resolver.close()
        return plan(ranges_between(start, {tp: end[tp] for tp in start}), self.opts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, HeadwaterPartition):
            # nothing to read (empty or no partitions): PySpark then plans one placeholder
            # InputPartition(None) instead of an empty list
            return iter(())
        return read_partition(partition)


class HeadwaterDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("headwater")``."""

    @classmethod
    def name(cls) -> str:
        return "headwater"

    def schema(self) -> str:
        """Spark calls this in ``load()`` (reads only): unknown, misspelt or unsupported
        options and bad security options fail there, naming the option. The batch- or
        stream-only checks follow when the reader is made (``parse_source_options``)."""
        check_read_options(self.options)
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return arrow.schema_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return HeadwaterBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from headwater_spark.stream import HeadwaterStreamReader

        return HeadwaterStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch sink; save mode Overwrite is refused, as Spark's Kafka sink refuses it (a
        log cannot be overwritten), instead of appending in silence."""
        if overwrite:
            raise InvalidConfigError(
                "save mode Overwrite is not allowed for a Headwater topic: records are only "
                'appended; use .mode("append")'
            )
        from headwater_spark.sink import HeadwaterWriter

        return HeadwaterWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from headwater_spark.options import parse_sink_options

        if parse_sink_options(dict(self.options)).exactly_once:
            from headwater_spark.sink_txn import HeadwaterTxnStreamWriter

            return HeadwaterTxnStreamWriter(dict(self.options), schema)
        from headwater_spark.sink import HeadwaterStreamWriter

        return HeadwaterStreamWriter(dict(self.options), schema)
