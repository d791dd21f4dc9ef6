"""The picklable unit of work of a read: :class:`HeadwaterPartition`, one or more offset
ranges (each of one topic partition) plus the executor config.

Planned on the driver (by the batch reader in :mod:`headwater_spark.source` and the stream
reader in :mod:`headwater_spark.stream`), pickled to an executor, and read there with
:func:`headwater_spark.reader.read_ranges`. Kept apart from both readers so neither imports
the other.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import InputPartition

from headwater_spark.options import ExecutorConfig, SourceOptions
from headwater_spark.planning import OffsetRange, coalesce_ranges, split_ranges


class HeadwaterPartition(InputPartition):
    """One Spark task: offset ranges read one after the other (one range, or several small
    ones grouped by ``minRecordsPerTask``; see :func:`headwater_spark.planning.coalesce_ranges`)."""

    def __init__(self, ranges: Sequence[OffsetRange], cfg: ExecutorConfig) -> None:
        self.ranges = tuple(ranges)
        super().__init__(self.ranges)
        self.cfg = cfg


def plan(ranges: list[OffsetRange], opts: SourceOptions) -> list[HeadwaterPartition]:
    """The Spark input partitions of a read (batch) or micro-batch: ``ranges`` split by
    ``minPartitions`` / ``maxRecordsPerPartition``, then small ones grouped by
    ``minRecordsPerTask``."""
    pieces = split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition
    )
    tasks = coalesce_ranges(
        pieces,
        min_records=opts.min_records_per_task,
        max_records=opts.max_records_per_partition,
        min_tasks=opts.min_partitions,
    )
    cfg = opts.executor_config()
    return [HeadwaterPartition(t, cfg) for t in tasks]


def read_partition(partition: HeadwaterPartition) -> Iterator[Any]:
    """A task's read (executor side). The reader module is imported here, not at the top:
    the driver (and Spark's stream-reader runner) never loads the consumer it needs."""
    from headwater_spark import reader

    return reader.read_ranges(partition.cfg, partition.ranges)
