"""KIP-890's defence, scripted at the RPC level: a produce or EndTxn delayed from an ended
transaction's epoch never joins, commits or aborts a later transaction.

The script plays a transactional producer by hand (any gRPC client could): it opens
transaction 1 at epoch e, writes record A, and *holds back* two requests of that epoch — a
produce of record D and an EndTxn(abort). It commits transaction 1 (the coordinator answers
with epoch e+1), opens transaction 2 at e+1 and writes B. Then the held requests arrive late:
the produce is fenced by the partition (INVALID_PRODUCER_EPOCH, nothing appended) and the
EndTxn by the coordinator (PRODUCER_FENCED), and transaction 2 is still open with its
partition. Committing it makes exactly A and B visible to read_committed; D is nowhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from headwater.batch import decode_batches, encode_batch
from headwater.client import AsyncAdminClient, NewTopic
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2, broker_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from headwater.v1 import transaction_pb2 as tx
from headwater.v1 import transaction_pb2_grpc as tx_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.wait import async_wait_for

TOPIC, TXN_ID = "fence", "fencing-script"


@pytest.fixture(scope="module")
def fcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("txn-fencing"),
        brokers=1,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


def _batch(value: bytes, pid: int, epoch: int, seq: int) -> bytes:
    return encode_batch(
        [value],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


async def _produce(broker: broker_pb2_grpc.BrokerStub, batch: bytes) -> int:
    resp = await broker.Produce(
        broker_pb2.ProduceRequest(
            acks=broker_pb2.ACKS_ALL,
            timeout_ms=10_000,
            partitions=[broker_pb2.PartitionRecords(topic=TOPIC, partition=0, records=batch)],
        )
    )
    return int(resp.partitions[0].error_code)


async def _read(broker: broker_pb2_grpc.BrokerStub, isolation: int) -> list[bytes | None]:
    """Every data record of partition 0 visible at ``isolation``, up to its end."""
    out: list[bytes | None] = []
    stream = broker.Fetch(
        broker_pb2.FetchRequest(
            topic=TOPIC,
            partition=0,
            offset=0,
            max_wait_ms=200,
            max_bytes=1 << 20,
            isolation_level=isolation,
        )
    )
    async for resp in stream:
        assert resp.error_code == ErrorCode.NONE, resp.error_message
        aborted = {a.producer_id for a in resp.aborted_transactions}
        for b in decode_batches(resp.records):
            if b.header.attributes & 0x20:  # control batch: a marker, not data
                continue
            if isolation == broker_pb2.READ_COMMITTED and b.header.producer_id in aborted:
                continue
            out.extend(b.values())
        end = (
            resp.last_stable_offset
            if isolation == broker_pb2.READ_COMMITTED
            else (resp.high_watermark)
        )
        if resp.next_offset >= end:
            break
    stream.cancel()
    return out


def test_delayed_produce_and_end_txn_from_an_old_epoch_change_nothing(
    fcluster: LocalCluster,
) -> None:
    async def run() -> None:
        async with AsyncAdminClient(fcluster.bootstrap) as admin:
            await admin.create_topics([NewTopic(TOPIC, 1, 1)])

            async def led() -> bool:
                (desc,) = await admin.describe_topics([TOPIC])
                return desc.partitions[0].leader > 0

            await async_wait_for(led, timeout=60, what=f"a leader of {TOPIC}-0")
        async with grpc.aio.insecure_channel(fcluster.bootstrap) as bch:
            broker = broker_pb2_grpc.BrokerStub(bch)
            any_coord = fcluster.coordinator_addresses[0]
            async with grpc.aio.insecure_channel(any_coord) as gch:
                groups = coordinator_pb2_grpc.GroupCoordinatorStub(gch)

                async def find() -> coordinator_pb2.FindCoordinatorResponse | None:
                    r = await groups.FindCoordinator(
                        coordinator_pb2.FindCoordinatorRequest(
                            group_id=TXN_ID, key_type=coordinator_pb2.TRANSACTION
                        )
                    )
                    return r if r.error_code == ErrorCode.NONE else None

                found = await async_wait_for(find, timeout=60, what="a transaction coordinator")
            address = f"{found.coordinator.host}:{found.coordinator.port}"
            async with grpc.aio.insecure_channel(address) as tch:
                txn = tx_grpc.TransactionCoordinatorStub(tch)
                await _script(broker, txn)

    async def _script(
        broker: broker_pb2_grpc.BrokerStub, txn: tx_grpc.TransactionCoordinatorStub
    ) -> None:
        init = await txn.InitProducerId(
            tx.InitProducerIdRequest(
                transactional_id=TXN_ID,
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            )
        )
        assert init.error_code == ErrorCode.NONE, init.error_message
        pid, e = init.producer_id, init.producer_epoch
        parts = [tx.TxnTopicPartitions(topic=TOPIC, partitions=[0])]

        async def add(epoch: int) -> None:
            r = await txn.AddPartitionsToTxn(
                tx.AddPartitionsToTxnRequest(
                    transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, partitions=parts
                )
            )
            assert r.error_code == ErrorCode.NONE, r.error_message
            assert all(x.error_code == ErrorCode.NONE for x in r.results)

        # transaction 1 at epoch e: A lands; D and an EndTxn(abort) are held back
        await add(e)
        assert await _produce(broker, _batch(b"A", pid, e, 0)) == ErrorCode.NONE
        delayed_produce = _batch(b"D", pid, e, 1)
        delayed_end = tx.EndTxnRequest(
            transactional_id=TXN_ID, producer_id=pid, producer_epoch=e, committed=False
        )
        end1 = await txn.EndTxn(
            tx.EndTxnRequest(
                transactional_id=TXN_ID, producer_id=pid, producer_epoch=e, committed=True
            )
        )
        assert end1.error_code == ErrorCode.NONE, end1.error_message
        assert end1.producer_id == pid and end1.producer_epoch == e + 1, "epoch not bumped"

        # transaction 2 at epoch e + 1: B lands
        await add(e + 1)
        assert await _produce(broker, _batch(b"B", pid, e + 1, 0)) == ErrorCode.NONE

        # the held-back requests of epoch e arrive now
        assert await _produce(broker, delayed_produce) == ErrorCode.INVALID_PRODUCER_EPOCH
        late = await txn.EndTxn(delayed_end)
        assert late.error_code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH), (
            ErrorCode.Name(late.error_code)
        )

        desc = await txn.DescribeTransactions(
            tx.DescribeTransactionsRequest(transactional_ids=[TXN_ID])
        )
        (t,) = desc.transactions
        assert t.state == tx.TXN_ONGOING, tx.TransactionState.Name(t.state)
        assert t.producer_epoch == e + 1
        assert [(p.topic, list(p.partitions)) for p in t.partitions] == [(TOPIC, [0])]
        # transaction 2 is still open: read_committed sees only A
        assert await _read(broker, broker_pb2.READ_COMMITTED) == [b"A"]

        end2 = await txn.EndTxn(
            tx.EndTxnRequest(
                transactional_id=TXN_ID, producer_id=pid, producer_epoch=e + 1, committed=True
            )
        )
        assert end2.error_code == ErrorCode.NONE, end2.error_message
        assert await _read(broker, broker_pb2.READ_COMMITTED) == [b"A", b"B"]
        assert await _read(broker, broker_pb2.READ_UNCOMMITTED) == [b"A", b"B"]

    asyncio.run(run())
