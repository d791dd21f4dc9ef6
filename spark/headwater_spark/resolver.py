"""Driver-side cluster lookups: which partitions a query reads and where its ranges begin
and end (ListOffsets through the client's AdminClient).

Runs only on the Spark driver. One :class:`Resolver` owns one blocking
:class:`headwater.client.AdminClient` (its private loop thread); ``close`` releases it.
"""

from __future__ import annotations

import logging
import re

from headwater.client import AdminClient, Consumer
from headwater.client.types import TopicPartition
from headwater.errors import InvalidConfigError, OffsetOutOfRangeError
from headwater_spark.options import (
    EARLIEST_SPEC,
    LATEST_SPEC,
    OffsetSpec,
    SourceOptions,
    TimestampSpec,
)
from headwater_spark.planning import PartitionOffsets

log = logging.getLogger(__name__)


class DataLossError(OffsetOutOfRangeError):
    """Offsets a query was due to read are gone (retention, deleted topic/partition) and
    failOnDataLoss is true."""


class Resolver:
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.security = opts.security.client_security()
        self.admin = AdminClient(opts.bootstrap, security=self.security)
        self._listed: list[TopicPartition] | None = None  # the last partitions() answer

    def close(self) -> None:
        self.admin.close()

    # ------------------------------------------------------------ partitions

    def partitions(self, *, cached: bool = False) -> list[TopicPartition]:
        """The partitions the query reads now (subscribe, subscribePattern or assign).
        Subscribed topics that do not exist (yet) contribute no partitions, as in Spark.

        ``cached=True`` returns the previous answer when there is one instead of asking the
        cluster again (a list_topics + describe_topics round): for the calls of one trigger
        or one batch plan, after the call that looked up the partitions afresh."""
        if cached and self._listed is not None:
            return list(self._listed)
        self._listed = self._list_partitions()
        return list(self._listed)

    def _list_partitions(self) -> list[TopicPartition]:
        o = self.opts
        if o.assign is not None:
            return sorted(o.assign)
        existing = self.admin.list_topics()
        if o.subscribe is not None:
            names = [t for t in o.subscribe if t in existing]
        else:
            assert o.subscribe_pattern is not None
            rx = re.compile(o.subscribe_pattern)
            names = [t for t in existing if rx.fullmatch(t) and not t.startswith("__")]
        topics = self.admin.describe_topics(names) if names else []
        return sorted(TopicPartition(t.name, p.partition) for t in topics for p in t.partitions)

    # ------------------------------------------------------------ offsets

    def earliest(self, tps: list[TopicPartition]) -> PartitionOffsets:
        found = self.admin.list_offsets(dict.fromkeys(tps, "earliest"))
        return {tp: found[tp].offset for tp in tps}

    def latest(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """The end of each partition: the high watermark, or with
        ``kafka.isolation.level=read_committed`` the last stable offset (nothing of an open
        transaction is planned, so executors never wait on undecided records)."""
        if self.opts.isolation_level == "read_committed" and tps:
            consumer = Consumer(
                self.opts.bootstrap, isolation_level="read_committed", security=self.security
            )
            try:
                ends = consumer.end_offsets(tps)
            finally:
                consumer.close()
            return {tp: ends[tp] for tp in tps}
        found = self.admin.list_offsets(dict.fromkeys(tps, "latest"))
        return {tp: found[tp].offset for tp in tps}

    def by_spec(self, spec: OffsetSpec, tps: list[TopicPartition], name: str) -> PartitionOffsets:
        """Resolve earliest / latest / a per-partition JSON spec (-2, -1 allowed)."""
        if spec == "earliest":
            return self.earliest(tps)
        if spec == "latest":
            return self.latest(tps)
        assert isinstance(spec, dict)
        missing = [tp for tp in tps if tp not in spec]
        extra = [tp for tp in spec if tp not in tps]
        if missing or extra:
            raise InvalidConfigError(
                f"{name} must name every partition read and no other: missing {missing}, "
                f"not read {extra}"
            )
        need_e = [tp for tp in tps if spec[tp] == EARLIEST_SPEC]
        need_l = [tp for tp in tps if spec[tp] == LATEST_SPEC]
        out = {tp: spec[tp] for tp in tps if spec[tp] >= 0}
        if need_e:
            out.update(self.earliest(need_e))
        if need_l:
            out.update(self.latest(need_l))
        return out

    def by_timestamp(
        self, spec: TimestampSpec, tps: list[TopicPartition], *, starting: bool
    ) -> PartitionOffsets:
        """First offset with timestamp >= the given ms, per partition. No such record: the
        end (for ending offsets, or startingOffsetsByTimestampStrategy=latest); else an
        error, as Spark's Kafka source."""
        assert spec is not None
        wanted = dict.fromkeys(tps, spec) if isinstance(spec, int) else dict(spec)
        if not isinstance(spec, int) and set(wanted) != set(tps):
            raise InvalidConfigError(
                "OffsetsByTimestamp must name every partition read and no other"
            )
        found = self.admin.list_offsets({tp: wanted[tp] for tp in tps})
        out: PartitionOffsets = {}
        none = [tp for tp in tps if found[tp].offset < 0]
        if none and starting and self.opts.starting_ts_strategy == "error":
            raise InvalidConfigError(
                f"no record at or after the starting timestamp in {none}; set "
                "startingOffsetsByTimestampStrategy=latest to start at the end instead"
            )
        ends = self.latest(none) if none else {}
        for tp in tps:
            out[tp] = found[tp].offset if found[tp].offset >= 0 else ends[tp]
        return out

    def starting(self, tps: list[TopicPartition]) -> PartitionOffsets:
        o = self.opts
        if o.starting_ts is not None:
            return self.by_timestamp(o.starting_ts, tps, starting=True)
        return self.by_spec(o.starting, tps, "startingOffsets")

    def ending(self, tps: list[TopicPartition]) -> PartitionOffsets:
        o = self.opts
        if o.ending_ts is not None:
            return self.by_timestamp(o.ending_ts, tps, starting=False)
        return self.by_spec(o.ending, tps, "endingOffsets")

    def check_loss(self, start: PartitionOffsets, what: str) -> PartitionOffsets:
        """Compare ``start`` with each partition's log start: offsets below it were deleted.
        failOnDataLoss=true raises DataLossError; false logs a warning and moves the start up
        to the log start. Partitions that no longer exist count as lost too (as of the last
        partition lookup: the one that planned ``start``)."""
        known = set(self.partitions(cached=True))
        gone = [tp for tp in start if tp not in known]
        log_start = self.earliest([tp for tp in start if tp in known])
        lost = {tp: (start[tp], log_start[tp]) for tp in log_start if start[tp] < log_start[tp]}
        if (lost or gone) and self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}: offsets were deleted before they were read (retention or topic "
                f"deletion): {_describe(lost)} {('gone: ' + str(gone)) if gone else ''}. "
                "Set failOnDataLoss=false to skip to the earliest available offset instead."
            )
        if lost or gone:
            log.warning("%s: data lost, skipping ahead: %s gone=%s", what, _describe(lost), gone)
        out = {tp: max(n, log_start.get(tp, n)) for tp, n in start.items() if tp in known}
        return out


def _describe(lost: dict[TopicPartition, tuple[int, int]]) -> str:
    return ", ".join(
        f"{tp.topic}[{tp.partition}] wanted {a}, earliest available {b}"
        for tp, (a, b) in sorted(lost.items())
    )
