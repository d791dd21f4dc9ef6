"""``spark.readStream.format("headwater")``: the micro-batch stream reader.

Offsets in Spark's checkpoint are ``{"topic": {"partition": next_offset}}`` (as Spark's Kafka
source). Each micro-batch reads, per partition, ``[start, end)`` where ``start`` is the previous
batch's end (or ``startingOffsets`` for the first batch; partitions that appear later start at
their log start) and ``end`` is the latest offset, limited by the engine's ReadLimit:
``maxOffsetsPerTrigger`` becomes ``ReadMaxRows`` (shared among partitions by backlog), and
``Trigger.AvailableNow`` fixes the end at the offsets seen by
``prepareForTriggerAvailableNow``. Lost offsets (retention deleted them before they were read)
are handled per ``failOnDataLoss`` on the driver when a batch is planned and again on the
executor while reading.

With ``commitToGroup`` set, the end offsets of every finished micro-batch become the group's
committed offsets, so ``headwater groups describe`` shows the job's lag. They are committed
from ``commit(end)`` and from ``latestOffset(start, ...)``: Spark calls the latter only after
the batch ending at ``start`` is done (its commit-log entry written; an unfinished batch is
re-run before any new offset is asked for), and calls it once more when a Trigger.AvailableNow
query has caught up, whereas ``commit`` for a batch comes only when the next batch is planned.
Spark's checkpoint, not the group, stays the source of truth for where the query resumes.

Runs on the driver; the :class:`Resolver` (a client with a loop thread) is created lazily and
never pickled (``read`` runs on executors with only the partition).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from headwater.errors import HeadwaterError
from headwater_spark.options import parse_source_options
from headwater_spark.partition import HeadwaterPartition
from headwater_spark.planning import (
    PartitionOffsets,
    from_json,
    ranges_between,
    rate_limit,
    split_ranges,
    to_json,
)
from headwater_spark.reader import read_range
from headwater_spark.resolver import Resolver

log = logging.getLogger(__name__)


class HeadwaterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_source_options(options, streaming=True)
        self._resolver: Resolver | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow end
        self._group_committed: PartitionOffsets = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_resolver"] = None
        return state

    @property
    def resolver(self) -> Resolver:
        if self._resolver is None:
            self._resolver = Resolver(self.opts)
        return self._resolver

    # ------------------------------------------------------------ offsets

    def initialOffset(self) -> dict[str, Any]:
        r = self.resolver
        return to_json(r.starting(r.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.resolver
        self._target = r.latest(r.partitions())
        log.info("Trigger.AvailableNow: reading up to %s", to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        r = self.resolver
        begin = from_json(start)
        self._commit_group(begin)
        tps = r.partitions()
        latest = r.latest(tps)
        if self._target is not None:
            latest = {
                tp: min(n, self._target[tp]) for tp, n in latest.items() if tp in self._target
            }
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin.update(r.earliest(new))
        # a log shorter than our position was truncated: nothing to read until it grows back
        latest = {tp: max(n, begin[tp]) for tp, n in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        end = {tp: begin[tp] for tp in begin if tp not in latest}  # vanished: keep position
        end.update(latest)
        return to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        r = self.resolver
        return to_json(r.latest(r.partitions()))

    # ------------------------------------------------------------ a micro-batch

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        r = self.resolver
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(r.earliest(new))
        todo = {tp: begin[tp] for tp in stop if stop[tp] > begin[tp]}
        if not todo:
            return []
        todo = r.check_loss(todo, "micro-batch")
        ranges = split_ranges(
            ranges_between(todo, {tp: stop[tp] for tp in todo}),
            min_partitions=self.opts.min_partitions,
            max_records=self.opts.max_records_per_partition,
        )
        cfg = self.opts.executor_config()
        return [HeadwaterPartition(rng, cfg) for rng in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, HeadwaterPartition)
        return read_range(partition.cfg, partition.rng)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(from_json(end))

    def _commit_group(self, offsets: PartitionOffsets) -> None:
        group = self.opts.commit_to_group
        if not group or not offsets or offsets == self._group_committed:
            return
        try:
            self.resolver.admin.alter_consumer_group_offsets(group, offsets)
            self._group_committed = dict(offsets)
        except HeadwaterError as exc:  # lag reporting is best effort; the checkpoint rules
            log.warning("committing offsets to group %s failed: %s", group, exc)

    def stop(self) -> None:
        if self._resolver is not None:
            self._resolver.close()
            self._resolver = None
