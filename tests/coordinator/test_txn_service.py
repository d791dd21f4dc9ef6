"""The transaction coordinator against real processes: 1 broker, 1 controller, 2 coordinators.

Scripted over raw gRPC (tests/coordinator/txn_helpers.py) plus the Python client for
transactional data and read_committed reads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import transaction_pb2 as tpb
from headwater.v1.errors_pb2 import ErrorCode
from tests.coordinator.service_helpers import create_topics, owner
from tests.coordinator.txn_helpers import add, describe, end, init, txn_owner
from tests.helpers.wait import wait_for

ARGS = ["--offsets-topic-partitions", "3", "--transaction-state-partitions", "3"]
ARGS += ["--lease-ttl", "2"]


@pytest.fixture(scope="module")
def tcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("txn")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        coordinator_args=ARGS,
        etcd_unsafe_no_fsync=True,
    ) as c:
        asyncio.run(_create(c, "txn-out"))
        create_topics(c, "in")  # offsets are committed for in[0]
        yield c


async def _create(c: LocalCluster, topic: str) -> None:
    admin = AsyncAdminClient(c.bootstrap)
    try:
        await admin.create_topic(topic, partitions=2)
    finally:
        await admin.close()


def test_init_fences_and_a_delayed_end_txn_never_ends_a_later_transaction(
    tcluster: LocalCluster,
) -> None:
    tid = "fence-me"
    first = init(tcluster, tid)
    second = init(tcluster, tid)
    pid, e = second.producer_id, second.producer_epoch
    assert (pid, e) == (first.producer_id, first.producer_epoch + 1)
    _cid, s = txn_owner(tcluster, tid)
    assert add(s, tid, pid, first.producer_epoch, "txn-out", 0) == ErrorCode.PRODUCER_FENCED
    assert add(s, tid, pid, e, "txn-out", 0) == ErrorCode.NONE
    done = end(s, tid, pid, e, True)
    assert (done.error_code, done.producer_epoch) == (ErrorCode.NONE, e + 1)
    assert add(s, tid, pid, e + 1, "txn-out", 1) == ErrorCode.NONE  # the next transaction
    for commit in (False, True):  # the old EndTxn, delayed
        assert end(s, tid, pid, e, commit).error_code == ErrorCode.PRODUCER_FENCED
    d = describe(s, tid)
    assert (d.state, d.producer_epoch) == (tpb.TXN_ONGOING, e + 1)
    assert [(tp.topic, list(tp.partitions)) for tp in d.partitions] == [("txn-out", [1])]
    assert end(s, tid, pid, e + 1, False).producer_epoch == e + 2
    assert describe(s, tid).state == tpb.TXN_COMPLETE_ABORT


def test_commit_is_read_committed_visible_and_abort_is_not(tcluster: LocalCluster) -> None:
    async def scenario() -> list[bytes]:
        p = AsyncProducer(tcluster.bootstrap, transactional_id="copier-rc")
        try:
            await p.init_transactions()
            p.begin_transaction()
            for i in range(3):
                await p.send("txn-out", f"c{i}".encode(), partition=0)
            await p.commit_transaction()
            p.begin_transaction()
            await p.send("txn-out", b"aborted", partition=0)
            await p.abort_transaction()
            p.begin_transaction()
            await p.send("txn-out", b"after", partition=0)
            await p.commit_transaction()
        finally:
            await p.close()
        consumer = AsyncConsumer(
            tcluster.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
        )
        got: list[bytes] = []
        try:
            tp = TopicPartition("txn-out", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            for _ in range(100):
                got += [r.value for r in await consumer.poll(timeout_ms=200) if r.value]
                if b"after" in got:
                    break
        finally:
            await consumer.close()
        return got

    got = asyncio.run(scenario())
    assert got == [b"c0", b"c1", b"c2", b"after"]


def test_txn_offsets_invisible_until_commit_and_dropped_on_abort(tcluster: LocalCluster) -> None:
    tid, group = "offsets-copier", "txn-offsets-group"
    r = init(tcluster, tid)
    pid, e = r.producer_id, r.producer_epoch
    _cid, s = txn_owner(tcluster, tid)
    g = owner(tcluster, group)

    def txn_commit(epoch: int, offset: int) -> None:
        req = tpb.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        )
        assert s.AddOffsetsToTxn(req, timeout=20).error_code == ErrorCode.NONE
        resp = g.TxnOffsetCommit(
            pb.TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                generation_id=-1,
                partitions=[pb.OffsetCommitPartition(topic="in", partition=0, offset=offset)],
            ),
            timeout=20,
        )  # fmt: skip
        assert resp.partitions[0].error_code == ErrorCode.NONE

    def fetch(stable: bool) -> tuple[int, int]:
        req = pb.OffsetFetchRequest(
            group_id=group,
            partitions=[pb.TopicPartitions(topic="in", partitions=[0])],
            require_stable=stable,
        )
        o = g.OffsetFetch(req, timeout=20).offsets[0]
        return o.offset, o.error_code

    txn_commit(e, 42)
    assert fetch(False) == (-1, ErrorCode.NONE)
    assert fetch(True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    assert end(s, tid, pid, e, True).error_code == ErrorCode.NONE
    assert fetch(True) == (42, ErrorCode.NONE)  # visible when EndTxn returns
    txn_commit(e + 1, 99)
    assert end(s, tid, pid, e + 1, False).error_code == ErrorCode.NONE
    assert fetch(True) == (42, ErrorCode.NONE)


def test_open_transaction_times_out_and_is_aborted(tcluster: LocalCluster) -> None:
    tid = "forgetful"
    r = init(tcluster, tid, timeout_ms=1_000)
    pid, e = r.producer_id, r.producer_epoch
    _cid, s = txn_owner(tcluster, tid)
    assert add(s, tid, pid, e, "txn-out", 1) == ErrorCode.NONE
    wait_for(
        lambda: describe(s, tid).state == tpb.TXN_COMPLETE_ABORT,
        timeout=30,
        what="the timed-out transaction aborted",
    )
    assert describe(s, tid).producer_epoch == e + 1
    assert end(s, tid, pid, e, True).error_code == ErrorCode.PRODUCER_FENCED
    assert add(s, tid, pid, e, "txn-out", 1) == ErrorCode.PRODUCER_FENCED
