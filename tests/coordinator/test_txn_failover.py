"""A transaction coordinator killed -9 between PrepareCommit and CompleteCommit: the new owner
of the ``__transaction_state`` partition finishes the commit from the log.

2 brokers; internal topics at RF 1 so that the data partition of the transaction can be made
unavailable (its broker killed) while the transaction's state partition stays writable: the
markers cannot be written, so the transaction is held in PrepareCommit deterministically."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.v1 import transaction_pb2 as tpb
from tests.coordinator.txn_helpers import describe, find_txn, txn_owner
from tests.helpers.wait import async_wait_for, wait_for

TOPIC = "held"
ARGS = ["--offsets-topic-partitions", "2", "--transaction-state-partitions", "2"]
ARGS += ["--offsets-topic-replication-factor", "1", "--lease-ttl", "2"]


@pytest.fixture(scope="module")
def fcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("txn-failover")
    with LocalCluster(
        data_dir,
        brokers=2,
        controllers=1,
        coordinators=2,
        coordinator_args=ARGS,
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


async def _leaders(c: LocalCluster, topic: str) -> dict[int, int]:
    admin = AsyncAdminClient(c.bootstrap)
    try:
        [d] = await admin.describe_topics([topic])
        return {p.partition: p.leader for p in d.partitions}
    finally:
        await admin.close()


async def _setup(c: LocalCluster, tid: str) -> tuple[int, int]:
    """Create the data topic, produce one transactional record to a partition whose leader
    does not lead the transaction's state partition; returns (partition, its leader)."""
    found = find_txn(c, tid)
    assert found is not None
    state_leader = (await _leaders(c, "__transaction_state"))[found.offsets_partition]
    admin = AsyncAdminClient(c.bootstrap)
    try:
        await admin.create_topic(TOPIC, partitions=4)
    finally:
        await admin.close()

    async def all_led() -> dict[int, int] | None:
        leaders = await _leaders(c, TOPIC)  # UnknownTopic until the brokers learn of it
        return leaders if len(leaders) == 4 and all(b > 0 for b in leaders.values()) else None

    leaders = await async_wait_for(all_led, timeout=30, what=f"leaders of {TOPIC}")
    p = next(p for p, b in sorted(leaders.items()) if b != state_leader)
    producer = AsyncProducer(c.bootstrap, transactional_id=tid)
    try:
        await producer.init_transactions()
        producer.begin_transaction()
        fut = await producer.send(TOPIC, b"held-commit", partition=p)
        await asyncio.wait_for(fut, 30)
    finally:
        await producer.close()
    return p, leaders[p]


async def _read_committed(c: LocalCluster, p: int) -> list[bytes]:
    consumer = AsyncConsumer(
        c.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    got: list[bytes] = []
    try:
        tp = TopicPartition(TOPIC, p)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        for _ in range(150):
            got += [r.value for r in await consumer.poll(timeout_ms=200) if r.value]
            if got:
                break
    finally:
        await consumer.close()
    return got


def test_kill9_between_prepare_and_complete_is_finished_by_the_new_owner(
    fcluster: LocalCluster,
) -> None:
    tid = "failover-copier"
    txn_owner(fcluster, tid)
    p, data_broker = asyncio.run(_setup(fcluster, tid))
    cid, s = txn_owner(fcluster, tid)
    d = describe(s, tid)
    assert d.state == tpb.TXN_ONGOING
    pid, e = d.producer_id, d.producer_epoch
    fcluster.kill_broker(data_broker)  # the markers cannot land now
    req = tpb.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=e, committed=True)
    call = s.EndTxn.future(req, timeout=60)
    wait_for(
        lambda: describe(s, tid).state == tpb.TXN_PREPARE_COMMIT,
        timeout=30,
        what="PrepareCommit persisted",
    )
    fcluster.kill_coordinator(cid)
    with pytest.raises(grpc.RpcError):
        call.result()  # the killed owner never answered
    fcluster.restart_broker(data_broker)

    def completed() -> tpb.DescribedTransaction | None:
        r = find_txn(fcluster, tid)
        if r is None or r.coordinator.broker_id == cid:
            return None
        _cid, s2 = txn_owner(fcluster, tid)
        try:
            d2 = describe(s2, tid)
        except grpc.RpcError:
            return None
        return d2 if d2.state == tpb.TXN_COMPLETE_COMMIT else None

    d2 = wait_for(completed, timeout=60, what="the new owner completing the commit")
    assert (d2.producer_id, d2.producer_epoch) == (pid, e + 1)
    assert asyncio.run(_read_committed(fcluster, p)) == [b"held-commit"]
    fcluster.restart_coordinator(cid)
