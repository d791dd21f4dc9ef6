"""The picklable unit of work of a read: :class:`HeadwaterPartition`, one offset range of one
topic partition plus the executor config.

Planned on the driver (by the batch reader in :mod:`headwater_spark.source` and the stream
reader in :mod:`headwater_spark.stream`), pickled to an executor, and read there with
:func:`headwater_spark.reader.read_range`. Kept apart from both readers so neither imports
the other.
"""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

from headwater_spark.options import ExecutorConfig
from headwater_spark.planning import OffsetRange


class HeadwaterPartition(InputPartition):
    """One Spark task: one offset range of one topic partition."""

    def __init__(self, rng: OffsetRange, cfg: ExecutorConfig) -> None:
        super().__init__(rng)
        self.rng = rng
        self.cfg = cfg
