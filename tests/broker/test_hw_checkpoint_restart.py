"""The high-watermark checkpoint across a restart: the logs on disk that no LeaderAndIsr has
opened yet in this process keep their checkpointed high watermarks. A checkpoint pass that
runs before the first LeaderAndIsr (its timer starts with the broker) must not write an
empty file, or a crash right after would restart every partition with HW 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.v1 import broker_pb2
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.storage import hw_checkpoint
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, assignment, request

pytestmark = pytest.mark.fast


def _broker(log_dir: Path) -> ReplicaManager:
    """A ReplicaManager over its log directory as a (re)started broker builds it."""
    rm = ReplicaManager(ME, LogManager([log_dir]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    rm.load_high_watermarks()
    return rm


async def _produce(rm: ReplicaManager, key: tuple[str, int], n: int) -> None:
    buf = encode_batch([b"v%d" % i for i in range(n)])
    await rm.partitions[key].append(
        buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=1000
    )


def test_a_checkpoint_before_the_first_leader_and_isr_keeps_the_logs_on_disk(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        first = _broker(tmp_path)
        await first.leader_and_isr(request(assignment("t", 0, 0), assignment("t", 1, 0)))
        await _produce(first, ("t", 0), 5)
        await _produce(first, ("t", 1), 2)
        assert first.partitions[("t", 0)].high_watermark == 5
        await first.shutdown()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 5, ("t", 1): 2}

        # Restarted: the checkpoint timer fires before the controller's first LeaderAndIsr.
        second = _broker(tmp_path)
        await second.checkpoint_high_watermarks()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 5, ("t", 1): 2}
        # Only t-0 is opened (the rest of the LeaderAndIsr has not arrived); t-1 is kept.
        await second.leader_and_isr(request(assignment("t", 0, 1)))
        await _produce(second, ("t", 0), 1)
        await second.checkpoint_high_watermarks()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 6, ("t", 1): 2}
        # Crash: no shutdown checkpoint; only the directory lock is released.
        await asyncio.to_thread(second.log_manager.close)

        third = _broker(tmp_path)
        await third.leader_and_isr(request(assignment("t", 0, 2), assignment("t", 1, 2)))
        assert third.partitions[("t", 0)].high_watermark == 6
        assert third.partitions[("t", 1)].high_watermark == 2
        await third.shutdown()

    asyncio.run(scenario())


def _stop(topic: str, partition: int, *, delete: bool) -> broker_pb2.StopReplicaRequest:
    return broker_pb2.StopReplicaRequest(
        controller_epoch=1,
        broker_epoch=BROKER_EPOCH,
        partitions=[
            broker_pb2.StopReplicaPartition(topic=topic, partition=partition, delete=delete)
        ],
    )


def test_a_stopped_replica_whose_log_stays_keeps_its_high_watermark(tmp_path: Path) -> None:
    """StopReplica without delete closes the log but leaves it on disk: its high watermark
    stays in the checkpoint for the next start."""

    async def scenario() -> None:
        first = _broker(tmp_path)
        await first.leader_and_isr(request(assignment("t", 0, 0), assignment("t", 1, 0)))
        await _produce(first, ("t", 0), 4)
        resp = await first.stop_replica(_stop("t", 0, delete=False))
        assert [p.error_code for p in resp.partitions] == [0]
        await first.checkpoint_high_watermarks()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 4, ("t", 1): 0}
        await first.shutdown()

        second = _broker(tmp_path)
        await second.leader_and_isr(request(assignment("t", 0, 1)))
        assert second.partitions[("t", 0)].high_watermark == 4
        await second.shutdown()

    asyncio.run(scenario())


def test_a_deleted_log_that_was_never_opened_leaves_the_checkpoint(tmp_path: Path) -> None:
    """A StopReplica(delete) for a partition not opened since the restart removes its entry
    (its log is gone; a later partition of that name starts from its own empty log)."""

    async def scenario() -> None:
        first = _broker(tmp_path)
        await first.leader_and_isr(request(assignment("t", 0, 0), assignment("t", 1, 0)))
        await _produce(first, ("t", 0), 3)
        await _produce(first, ("t", 1), 4)
        await first.shutdown()

        second = _broker(tmp_path)
        resp = await second.stop_replica(_stop("t", 1, delete=True))
        assert [p.error_code for p in resp.partitions] == [0]
        await second.checkpoint_high_watermarks()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 3}
        await second.shutdown()

    asyncio.run(scenario())
