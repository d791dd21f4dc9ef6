"""One partition hosted by this broker: its Log, leadership state and high watermark.

Ownership and threads:

* A ``Partition`` object lives on the broker's event loop. Leadership state (``role``,
  ``leader_epoch``, ``isr``, ...) is changed only by the replica manager's control path
  (LeaderAndIsr / StopReplica, which are serialised by the replica manager).
* Appends are serialised per partition by ``_append_lock`` (one writer at a time); the blocking
  ``Log.append`` runs in a worker thread. Nothing else mutates the log except the replica
  manager's retention/flush passes, which take the same lock (see ``run_exclusive``).
* Reads (``read``, ``offset_for_timestamp``) run in worker threads concurrently with the
  writer; the storage contract guarantees they see a consistent prefix.
* ``high_watermark`` is advanced only on the loop, after an append returns (or, with
  followers, when a replica's fetch position is reported via ``update_replica_end``).

High watermark: the smallest log end offset among the ISR members whose end offset the
leader knows. The leader always knows its own; followers report theirs by fetching (follower
fetching arrives with replication). With ISR == [self] the HW is the log end offset after each
append. Fetch streams of consumers read up to the HW and wait on ``changed()``: an
``asyncio.Event`` replaced after every HW advance or state change, so a waiter captures the
current event, checks its condition, and awaits the event without missing a wake-up.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from headwater.batch import BatchHeader
from headwater.config import TopicConfig
from headwater.errors import (
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from services.broker import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    #: closed by StopReplica or shutdown; every waiter is woken and every call fails.
    OFFLINE = "offline"


@dataclass(frozen=True)
class ProduceResult:
    """What an append assigned: offsets of the first and last record, the append time."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int
    size: int


class Partition:
    """A partition replica: the Log plus leader epoch, ISR and high watermark."""

    def __init__(self, topic: str, partition: int, log_: Any, config: TopicConfig, broker_id: int):
        self.topic = topic
        self.partition = partition
        self.log = log_
        self.config = config
        self.broker_id = broker_id
        self.role = Role.FOLLOWER
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.topic_id = ""
        self.high_watermark = 0
        #: log end offsets of replicas as known to the leader (its own is always current).
        self._replica_end: dict[int, int] = {}
        self._append_lock = asyncio.Lock()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ state (control path)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition} {self.role.value} "
            f"epoch={self.leader_epoch} hw={self.high_watermark})"
        )

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def log_start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.log.log_end_offset)

    def apply_state(
        self,
        *,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
    ) -> None:
        """Become leader or follower as the controller says (caller checked the epochs)."""
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.role = Role.LEADER if leader == self.broker_id else Role.FOLLOWER
        if self.is_leader:
            self._replica_end = {r: e for r, e in self._replica_end.items() if r in self.isr}
            self._replica_end[self.broker_id] = self.log_end_offset
            if set(self.isr) <= {self.broker_id}:
                # Sole in-sync replica: everything in the local log is committed.
                self.high_watermark = max(self.high_watermark, self.log_end_offset)
            self._advance_high_watermark()
        else:
            self._replica_end.clear()
            # A follower serves nothing to consumers; keep the HW within the log.
            self.high_watermark = min(
                max(self.high_watermark, self.log_start_offset), self.log_end_offset
            )
        self._notify()

    def update_config(self, config: TopicConfig) -> None:
        if config != self.config:
            self.log.update_config(config)
            self.config = config

    def go_offline(self) -> None:
        """Stop serving: fail further calls and wake every waiting fetch stream."""
        self.role = Role.OFFLINE
        self._notify()

    # ------------------------------------------------------------------ notification

    def changed(self) -> asyncio.Event:
        """The event set at the next HW advance or state change (capture, check, then wait)."""
        return self._changed

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    # ------------------------------------------------------------------ high watermark

    def update_replica_end(self, replica: int, end_offset: int) -> None:
        """A follower reported its log end offset (by fetching from ``end_offset``)."""
        if self.is_leader and replica in self.replicas:
            self._replica_end[replica] = end_offset
            self._advance_high_watermark()

    def _advance_high_watermark(self) -> None:
        """HW = min log end offset over the ISR members known; it never moves back."""
        ends = [self._replica_end[r] for r in self.isr if r in self._replica_end]
        if not ends or len(ends) < len(self.isr):
            return
        new_hw = min(ends)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self._notify()

    # ------------------------------------------------------------------ appends

    def check_writable(self, acks_all: bool) -> None:
        """Raise unless this replica may take a produce request now."""
        if self.role is Role.OFFLINE:
            raise UnknownTopicOrPartitionError(f"{self.topic}-{self.partition} is not hosted here")
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader {self.leader_id})"
            )
        if acks_all and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {list(self.isr)} is smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}"
            )

    async def append(
        self,
        buf: bytes,
        batches: list[tuple[int, BatchHeader]],
        *,
        acks_all: bool,
        timeout_ms: int,
    ) -> ProduceResult:
        """Append validated batches as leader; returns once acknowledged per ``acks``.

        acks=0/1: after the local append. acks=all: once the HW has passed the last offset
        (immediately with ISR == [self]); REQUEST_TIMED_OUT after ``timeout_ms`` otherwise.
        """
        async with self._append_lock:
            self.check_writable(acks_all)
            epoch = self.leader_epoch
            info = await asyncio.to_thread(self.log.append, buf, batches, epoch)
            self._replica_end[self.broker_id] = int(info.last_offset) + 1
            self._advance_high_watermark()
        records = sum(h.record_count for _, h in batches)
        metrics.BYTES_IN.labels(self.topic).inc(len(buf))
        metrics.RECORDS_IN.labels(self.topic).inc(records)
        metrics.set_log_size(self.topic, self.partition, int(self.log.size_in_bytes))
        result = ProduceResult(
            base_offset=int(info.first_offset),
            last_offset=int(info.last_offset),
            log_append_time=int(info.log_append_time),
            log_start_offset=self.log_start_offset,
            records=records,
            size=len(buf),
        )
        if acks_all:
            await self._wait_committed(result.last_offset + 1, timeout_ms)
        return result

    async def _wait_committed(self, offset: int, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000.0
        while self.high_watermark < offset:
            if self.role is not Role.LEADER:
                raise NotLeaderOrFollowerError(
                    f"leadership of {self.topic}-{self.partition} moved before the write committed"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.partition}: offset {offset - 1} not replicated to the "
                    f"ISR within {timeout_ms} ms"
                )
            try:
                await asyncio.wait_for(self.changed().wait(), remaining)
            except TimeoutError:
                continue

    async def run_exclusive(self, fn: Callable[[], T]) -> T:
        """Run a blocking log mutation (retention, flush, close) as the partition's writer."""
        async with self._append_lock:
            return await asyncio.to_thread(fn)

    # ------------------------------------------------------------------ reads

    async def read(self, offset: int, max_bytes: int, max_offset: int | None) -> Any:
        """Whole batches from ``offset`` up to ``max_offset`` (a FetchSlice), off the loop."""
        return await asyncio.to_thread(self.log.read, offset, max_bytes, max_offset)

    async def offset_for_timestamp(self, timestamp: int) -> Any:
        return await asyncio.to_thread(self.log.offset_for_timestamp, timestamp)
