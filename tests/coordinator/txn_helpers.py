"""Raw-gRPC helpers for transaction-coordinator tests against real processes (LocalCluster)."""

from __future__ import annotations

import grpc

from headwater.dev.cluster import LocalCluster
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import transaction_pb2 as tpb
from headwater.v1 import transaction_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.coordinator.service_helpers import stub
from tests.helpers.wait import wait_for

TxnStub = transaction_pb2_grpc.TransactionCoordinatorStub


def find_txn(c: LocalCluster, txn_id: str) -> pb.FindCoordinatorResponse | None:
    req = pb.FindCoordinatorRequest(group_id=txn_id, key_type=pb.TRANSACTION)
    for address in c.coordinator_addresses:
        try:
            r = stub(address).FindCoordinator(req, timeout=5)
        except grpc.RpcError:
            continue
        if r.error_code == ErrorCode.NONE:
            return r
    return None


def txn_owner(c: LocalCluster, txn_id: str) -> tuple[int, TxnStub]:
    """(coordinator id, stub) of the transaction coordinator of ``txn_id``, once loaded."""
    r = wait_for(lambda: find_txn(c, txn_id), timeout=30, what=f"a txn owner for {txn_id}")
    s = TxnStub(grpc.insecure_channel(f"{r.coordinator.host}:{r.coordinator.port}"))
    return r.coordinator.broker_id, s


def init(c: LocalCluster, txn_id: str, timeout_ms: int = 60_000) -> tpb.InitProducerIdResponse:
    """InitProducerId at the owner, retried over NOT_COORDINATOR / CONCURRENT_TRANSACTIONS /
    a partition still loading."""
    retry = (ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS)
    req = tpb.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1,
        producer_epoch=-1,
    )  # fmt: skip

    def attempt() -> tpb.InitProducerIdResponse | None:
        _cid, s = txn_owner(c, txn_id)
        try:
            r = s.InitProducerId(req, timeout=20)
        except grpc.RpcError:
            return None
        return None if r.error_code in retry else r

    r: tpb.InitProducerIdResponse = wait_for(attempt, timeout=60, what="InitProducerId")
    return r


def add(s: TxnStub, txn_id: str, pid: int, epoch: int, topic: str, *parts: int) -> int:
    req = tpb.AddPartitionsToTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
        partitions=[tpb.TxnTopicPartitions(topic=topic, partitions=list(parts))],
    )  # fmt: skip
    return int(s.AddPartitionsToTxn(req, timeout=20).error_code)


def end(s: TxnStub, txn_id: str, pid: int, epoch: int, commit: bool) -> tpb.EndTxnResponse:
    req = tpb.EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    r: tpb.EndTxnResponse = s.EndTxn(req, timeout=60)
    return r


def describe(s: TxnStub, txn_id: str) -> tpb.DescribedTransaction:
    req = tpb.DescribeTransactionsRequest(transactional_ids=[txn_id])
    d: tpb.DescribedTransaction = s.DescribeTransactions(req, timeout=20).transactions[0]
    return d
