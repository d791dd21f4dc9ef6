"""``spark.readStream.format("headwater")``: the micro-batch stream reader.

Offsets in Spark's checkpoint are ``{"topic": {"partition": next_offset}}`` (as Spark's Kafka
source). Each micro-batch reads, per partition, ``[start, end)`` where ``start`` is the previous
batch's end (or ``startingOffsets`` for the first batch; partitions that appear later start at
their log start) and ``end`` is the latest offset, limited by the engine's ReadLimit:
``maxOffsetsPerTrigger`` becomes ``ReadMaxRows`` (shared among partitions by backlog), and
``Trigger.AvailableNow`` fixes the end at the offsets seen by
``prepareForTriggerAvailableNow``. ``minOffsetsPerTrigger`` skips a trigger (returns
``start``, so no micro-batch runs) while fewer offsets are available, until
``maxTriggerDelay`` has passed since the last admitted micro-batch (as Spark's Kafka source).
Lost offsets (retention deleted them before they were read) are handled per
``failOnDataLoss`` on the driver when a batch is planned and again on the executor while
reading.

With a group (``kafka.group.id`` or ``commitToGroup``; with ``groupIdPrefix``,
``<prefix>-<uuid>``, new per query run, as Spark names its groups), the end offsets of every
finished micro-batch become the group's committed offsets, so ``headwater groups describe``
shows the job's lag. They are committed from ``commit(end)`` and from
``latestOffset(start, ...)``: Spark calls the latter only after the batch ending at ``start``
is done (its commit-log entry written; an unfinished batch is re-run before any new offset is
asked for), and calls it once more when a Trigger.AvailableNow query has caught up, whereas
``commit`` for a batch comes only when the next batch is planned. Spark's checkpoint, not the
group, stays the source of truth for where the query resumes.

Runs on the driver; the :class:`Resolver` (a client with a loop thread) is created lazily and
never pickled (``read`` runs on executors with only the partition).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from headwater.errors import HeadwaterError
from headwater_spark.options import parse_source_options
from headwater_spark.partition import HeadwaterPartition, plan, read_partition
from headwater_spark.planning import (
    PartitionOffsets,
    from_json,
    ranges_between,
    rate_limit,
    to_json,
)
from headwater_spark.resolver import Resolver

log = logging.getLogger(__name__)


class HeadwaterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = parse_source_options(options, streaming=True)
        self._resolver: Resolver | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow end
        self._group_committed: PartitionOffsets = {}
        #: the group offsets are committed to: kafka.group.id / commitToGroup, or with
        #: groupIdPrefix a new one per query run (Spark's "<prefix>-<uuid>" naming)
        self.group = self.opts.commit_to_group
        if self.group is None and self.opts.group_id_prefix:
            self.group = f"{self.opts.group_id_prefix}-{uuid.uuid4()}"
            log.info("committing offsets to group %s (groupIdPrefix)", self.group)
        #: when the last micro-batch was admitted (minOffsetsPerTrigger); 0: the first
        #: trigger is always admitted, as in Spark's Kafka source
        self._last_trigger_ms = 0.0
        #: the partition list looked up by initialOffset / prepareForTriggerAvailableNow at
        #: the query's start is still fresh for the first latestOffset (the same trigger)
        self._listing_fresh = False

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
        self._listing_fresh = True
        return to_json(r.starting(r.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as ReadMaxRows, else minOffsetsPerTrigger as ReadMinRows, else
        everything. (Python sources get one ReadLimit back, not Spark's composite of both:
        the minimum is applied from the options whenever the engine's limit is not
        ReadAllAvailable, which it passes when a trigger wants everything.)"""
        n = self.opts.max_offsets_per_trigger
        if n:
            return ReadMaxRows(n)
        m = self.opts.min_offsets_per_trigger
        return ReadMinRows(m) if m else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.resolver
        self._target = r.latest(r.partitions(cached=self._listing_fresh))
        self._listing_fresh = True
        log.info("Trigger.AvailableNow: reading up to %s", to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        r = self.resolver
        begin = from_json(start)
        self._commit_group(begin)
        # each trigger looks the partitions up afresh (new partitions and topics join here,
        # as in Spark's Kafka source), except the first right after the query's start
        tps = r.partitions(cached=self._listing_fresh)
        self._listing_fresh = False
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
        if self._delay(begin, latest, limit):
            return start
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        end = {tp: begin[tp] for tp in begin if tp not in latest}  # vanished: keep position
        end.update(latest)
        return to_json(end)

    def _delay(self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay, as Spark's Kafka source: skip this trigger
        (no new micro-batch) while fewer than the minimum offsets are available, until
        maxTriggerDelay has passed since the last admitted micro-batch. Not applied to
        Trigger.AvailableNow (it must finish) nor when the engine asks for everything."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self._target is not None or isinstance(limit, ReadAllAvailable):
            return False
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        available = sum(latest[tp] - begin.get(tp, 0) for tp in latest)
        if available < minimum:
            log.debug("delaying the micro-batch: %d offsets available < %d", available, minimum)
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        r = self.resolver
        return to_json(r.latest(r.partitions(cached=True)))

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
        return plan(ranges_between(todo, {tp: stop[tp] for tp in todo}), self.opts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, HeadwaterPartition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(from_json(end))

    def _commit_group(self, offsets: PartitionOffsets) -> None:
        group = self.group
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
