"""Writing a transaction's outcome: Broker.WriteTxnMarkers, GroupCoordinator.WriteTxnOffsetMarker.

:meth:`MarkerWriter.write` runs inside one task per transaction being completed (started and
cancelled by the owning txn runtime, txn/runtime.py) and returns only when every partition's
leader and every group's coordinator has acknowledged the marker; it retries everything else
forever with a capped backoff (cancellation is the only other way out: the coordinator lost
the ``__transaction_state`` partition, and the next owner finishes the job from the Prepare*
record).

Partitions are grouped by their current leader (client metadata, refreshed after any failure);
a partition answers NONE once its marker is below the high watermark. INVALID_PRODUCER_EPOCH /
PRODUCER_FENCED mean the partition already holds a newer epoch of the producer (a later
marker was written): nothing is left to do there. A topic absent from freshly refreshed
metadata was deleted: nothing to do either. Groups are routed to the owner of their
``__consumer_offsets`` partition (etcd, ownership.owner_of); their markers are idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

import grpc

from headwater.client.connection import ConnectionPool
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition
from headwater.platform import etcd as hetcd
from headwater.v1 import broker_pb2
from headwater.v1 import coordinator_pb2 as cpb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import ownership as own
from services.coordinator.txn.handlers import MarkerJob

log = logging.getLogger(__name__)

_DONE_CODES = (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED)


class MarkerWriter:
    """See the module docstring. Shared by the runtimes of one process (same loop)."""

    def __init__(
        self,
        pool: ConnectionPool,
        metadata: Metadata,
        etcd: hetcd.Etcd,
        offsets_partitions: int,
        *,
        request_timeout_s: float = 10.0,
        max_backoff_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._metadata = metadata
        self._etcd = etcd
        self._offsets_partitions = offsets_partitions
        self._timeout = request_timeout_s
        self._max_backoff = max_backoff_s

    async def write(self, job: MarkerJob, coordinator_epoch: int) -> None:
        left_tps = set(job.partitions)
        left_groups = set(job.groups)
        backoff = 0.05
        while True:
            if left_tps:
                left_tps -= await self._round_partitions(job, coordinator_epoch, left_tps)
            if left_groups:
                left_groups -= await self._round_groups(job, coordinator_epoch, left_groups)
            if not left_tps and not left_groups:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def _round_partitions(
        self, job: MarkerJob, coordinator_epoch: int, tps: set[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """One attempt at every partition; returns those now done."""
        try:
            view = await self._metadata.refresh()
        except Exception as exc:  # no broker answered: retry the whole round
            log.info("txn %s markers: metadata refresh failed: %s", job.transactional_id, exc)
            return set()
        done: set[tuple[str, int]] = set()
        by_leader: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for t, p in tps:
            if t not in view.topics:
                log.warning("txn %s: topic %s is gone; no marker", job.transactional_id, t)
                done.add((t, p))
                continue
            addr = view.leader_address(TopicPartition(t, p))
            if addr is not None:
                by_leader[addr].append((t, p))
        for addr, group in by_leader.items():
            marker = broker_pb2.WriteTxnMarker(
                producer_id=job.producer_id,
                producer_epoch=job.producer_epoch,
                committed=job.committed,
                coordinator_epoch=coordinator_epoch,
                partitions=[broker_pb2.TxnMarkerPartition(topic=t, partition=p) for t, p in group],
            )
            try:
                resp = await self._pool.broker(addr).WriteTxnMarkers(
                    broker_pb2.WriteTxnMarkersRequest(markers=[marker]), timeout=self._timeout
                )
            except grpc.RpcError as exc:
                log.info("txn %s markers to %s failed: %s", job.transactional_id, addr, exc.code())
                continue
            for r in resp.results:
                if r.error_code in _DONE_CODES:
                    done.add((r.topic, r.partition))
                else:
                    log.info(
                        "txn %s marker %s[%d]: %s %s",
                        job.transactional_id, r.topic, r.partition,
                        ErrorCode.Name(r.error_code), r.error_message,
                    )  # fmt: skip
        return done & tps

    async def _round_groups(
        self, job: MarkerJob, coordinator_epoch: int, groups: set[str]
    ) -> set[str]:
        done: set[str] = set()
        for g in sorted(groups):
            p = own.partition_for(g, self._offsets_partitions)
            try:
                reg = await own.owner_of(self._etcd, p)
            except hetcd.EtcdError as exc:
                log.info("txn %s: group %s owner unknown: %s", job.transactional_id, g, exc)
                continue
            if reg is None:
                continue
            addr = f"{reg['host']}:{reg['port']}"
            req = cpb.WriteTxnOffsetMarkerRequest(
                group_id=g,
                producer_id=job.producer_id,
                producer_epoch=job.producer_epoch,
                committed=job.committed,
                coordinator_epoch=coordinator_epoch,
            )
            try:
                resp = await self._pool.coordinator(addr).WriteTxnOffsetMarker(
                    req, timeout=self._timeout
                )
            except grpc.RpcError as exc:
                log.info(
                    "txn %s group marker to %s failed: %s", job.transactional_id, addr, exc.code()
                )
                continue
            if resp.error_code == ErrorCode.NONE:
                done.add(g)
            else:
                log.info(
                    "txn %s group %s marker: %s", job.transactional_id, g,
                    ErrorCode.Name(resp.error_code),
                )  # fmt: skip
        return done
