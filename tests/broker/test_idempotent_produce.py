"""Idempotent produce through real broker processes (docs/transactions.md, "Producer state on
the partition leader"): duplicates answered with the original offset and stored once, sequence
gaps and stale epochs refused with nothing appended, Broker.InitProducerId, and a new leader
that still recognises a duplicate written before a kill -9 of the old one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from broker_helpers import ActingController, BrokerProc, fetch_once, list_offset, produce
from txn_helpers import counter, idem_batch, init_pid

from headwater.batch import iter_headers
from headwater.client import AdminClient
from headwater.client.admin import PartitionDescription
from headwater.dev.cluster import LocalCluster
from headwater.errors import UnknownTopicOrPartitionError, from_rpc_error
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.wait import wait_for

ALL = broker_pb2.ACKS_ALL


def _offsets(c: ActingController, topic: str) -> list[tuple[int, int]]:
    """(base offset, record count) of every batch in the log."""
    got = fetch_once(c, topic, 0, 0)
    assert got.error_code == ErrorCode.NONE, got
    return [(h.base_offset, h.record_count) for _, h in iter_headers(got.records)]


def test_duplicate_gets_the_original_offset_and_is_stored_once(
    controller: ActingController, broker: BrokerProc
) -> None:
    controller.create_topic("idem-dup")
    before = counter(
        broker.metrics_port, "headwater_broker_produce_duplicates_total", topic="idem-dup"
    )
    pid = 7001
    b0, b1 = idem_batch(3, pid, 0, 0), idem_batch(2, pid, 0, 3)
    assert produce(controller, "idem-dup", 0, b0, ALL).base_offset == 0
    assert produce(controller, "idem-dup", 0, b1, ALL).base_offset == 3
    for buf, base in ((b0, 0), (b1, 3), (b1, 3)):  # retries of both, the newest twice
        r = produce(controller, "idem-dup", 0, buf, ALL)
        assert r.error_code == ErrorCode.NONE and r.base_offset == base, r
    assert _offsets(controller, "idem-dup") == [(0, 3), (3, 2)]
    after = counter(
        broker.metrics_port, "headwater_broker_produce_duplicates_total", topic="idem-dup"
    )
    assert after - before == 3
    # the next sequence continues after the duplicates
    assert produce(controller, "idem-dup", 0, idem_batch(1, pid, 0, 5), ALL).base_offset == 5


def test_sequence_gap_and_unknown_producer_append_nothing(
    controller: ActingController, broker: BrokerProc
) -> None:
    controller.create_topic("idem-gap")
    pid = 7002
    assert produce(controller, "idem-gap", 0, idem_batch(2, pid, 0, 0)).error_code == 0
    gap = produce(controller, "idem-gap", 0, idem_batch(2, pid, 0, 5))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
    unknown = produce(controller, "idem-gap", 0, idem_batch(1, 7003, 0, 9))
    assert unknown.error_code == ErrorCode.UNKNOWN_PRODUCER_ID, unknown
    assert list_offset(controller, "idem-gap", 0, -1).offset == 2
    assert _offsets(controller, "idem-gap") == [(0, 2)]
    assert (
        counter(
            broker.metrics_port,
            "headwater_broker_producer_rejections_total",
            topic="idem-gap",
            reason="out_of_order",
        )
        == 1
    )
    # the producer goes on from where it really is
    assert produce(controller, "idem-gap", 0, idem_batch(1, pid, 0, 2)).base_offset == 2


def test_stale_epoch_is_fenced(controller: ActingController, broker: BrokerProc) -> None:
    controller.create_topic("idem-epoch")
    pid = 7004
    assert produce(controller, "idem-epoch", 0, idem_batch(1, pid, 0, 0)).error_code == 0
    assert produce(controller, "idem-epoch", 0, idem_batch(1, pid, 1, 0)).base_offset == 1
    stale = produce(controller, "idem-epoch", 0, idem_batch(1, pid, 0, 1))
    assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, stale
    # a new epoch must start at sequence 0
    bad = produce(controller, "idem-epoch", 0, idem_batch(1, pid, 2, 4))
    assert bad.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, bad
    assert list_offset(controller, "idem-epoch", 0, -1).offset == 2
    assert (
        counter(
            broker.metrics_port,
            "headwater_broker_producer_rejections_total",
            topic="idem-epoch",
            reason="fenced",
        )
        == 1
    )


def test_init_producer_id_refuses_a_transactional_id(controller: ActingController) -> None:
    code, pid, epoch = init_pid(controller.stub, "my-txn")
    assert code == ErrorCode.NOT_COORDINATOR and pid == -1 and epoch == -1


# ------------------------------------------------ the records path (ProduceRecords)


def _produce_records(
    c: ActingController, topic: str, values: list[bytes], **idem: int
) -> broker_pb2.PartitionProduceResult:
    """ProduceRecords of ``values`` to partition 0 with acks=all and the given idempotence
    fields (producer_id, producer_epoch, base_sequence)."""
    resp = c.stub.ProduceRecords(
        broker_pb2.ProduceRecordsRequest(
            topic=topic,
            partition=0,
            acks=ALL,
            records=[broker_pb2.Record(value=v) for v in values],
            **idem,
        ),
        timeout=30,
    )
    (result,) = resp.partitions
    return result


def _record_values(c: ActingController, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of partition 0, through FetchRecords."""
    stream = c.stub.FetchRecords(
        broker_pb2.FetchRequest(topic=topic, partition=0, current_leader_epoch=-1), timeout=30
    )
    try:
        first = next(stream)
    finally:
        stream.cancel()
    assert first.error_code == ErrorCode.NONE, first
    return [(r.offset, r.value) for r in first.records]


def test_produce_records_retry_gets_the_original_offset_and_no_duplicate(
    controller: ActingController, broker: BrokerProc
) -> None:
    topic = "idem-records"
    controller.create_topic(topic)
    code, pid, epoch = init_pid(controller.stub)
    assert code == ErrorCode.NONE and pid >= 0 and epoch == 0
    idem = {"producer_id": pid, "producer_epoch": epoch}
    before = counter(broker.metrics_port, "headwater_broker_produce_duplicates_total", topic=topic)

    first = _produce_records(controller, topic, [b"a", b"b", b"c"], **idem, base_sequence=0)
    assert first.error_code == ErrorCode.NONE and first.base_offset == 0, first
    # another writer's records land between the first request and its retry
    other = _produce_records(controller, topic, [b"other"])
    assert other.base_offset == 3, other
    # the same request again (a retry after a lost answer): the original offset, nothing added
    for _ in range(2):
        retry = _produce_records(controller, topic, [b"a", b"b", b"c"], **idem, base_sequence=0)
        assert retry.error_code == ErrorCode.NONE and retry.base_offset == 0, retry
    after = counter(broker.metrics_port, "headwater_broker_produce_duplicates_total", topic=topic)
    assert after - before == 2
    assert _record_values(controller, topic) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"other")]

    # the next request continues at base_sequence + 3 records
    nxt = _produce_records(controller, topic, [b"d"], **idem, base_sequence=3)
    assert nxt.error_code == ErrorCode.NONE and nxt.base_offset == 4, nxt
    # a gap in the sequence (4 skipped) is refused with the typed error and appends nothing
    gap = _produce_records(controller, topic, [b"e"], **idem, base_sequence=5)
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
    assert "sequence 5 does not follow 3" in gap.error_message and gap.base_offset == -1
    assert list_offset(controller, topic, 0, -1).offset == 5
    # a producer the partition has never seen must start at 0
    unknown = _produce_records(
        controller, topic, [b"f"], producer_id=pid + 1, producer_epoch=0, base_sequence=7
    )
    assert unknown.error_code == ErrorCode.UNKNOWN_PRODUCER_ID, unknown
    # the producer goes on from where it really is
    resumed = _produce_records(controller, topic, [b"e"], **idem, base_sequence=4)
    assert resumed.error_code == ErrorCode.NONE and resumed.base_offset == 5, resumed
    values = [v for _, v in _record_values(controller, topic)]
    assert values == [b"a", b"b", b"c", b"other", b"d", b"e"]


@pytest.mark.parametrize(
    ("partition", "idem", "needle"),
    [
        (-1, {"producer_id": 1, "producer_epoch": 0}, "names its partition"),
        (0, {"producer_id": -2}, "producer_id must be >= 0"),
        (0, {"producer_id": 1, "producer_epoch": -1}, "producer_epoch must be 0..32767"),
        (0, {"producer_id": 1, "producer_epoch": 40_000}, "producer_epoch must be 0..32767"),
        (0, {"producer_id": 1, "base_sequence": -3}, "base_sequence must be >= 0"),
        (0, {"base_sequence": 4}, "need a producer_id"),
        (0, {"producer_id": -1, "producer_epoch": 2}, "need a producer_id"),
    ],
)
def test_produce_records_refuses_inconsistent_producer_fields(
    controller: ActingController, partition: int, idem: dict[str, int], needle: str
) -> None:
    topic = "idem-records-bad"
    if topic not in controller.topics:
        controller.create_topic(topic)
    with pytest.raises(grpc.RpcError) as info:
        controller.stub.ProduceRecords(
            broker_pb2.ProduceRecordsRequest(
                topic=topic, partition=partition, records=[broker_pb2.Record(value=b"x")], **idem
            ),
            timeout=30,
        )
    err = from_rpc_error(info.value)
    assert err.code == ErrorCode.INVALID_REQUEST and needle in str(err), err
    assert list_offset(controller, topic, 0, -1).offset == 0


# ------------------------------------------------------------------ three-broker cluster


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("idem-c3")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "1500", "--session-timeout-s", "3"],
    ) as c:
        yield c


def _stub(address: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    ch = grpc.insecure_channel(address)
    return ch, broker_pb2_grpc.BrokerStub(ch)


def test_init_producer_id_is_distinct_across_brokers(c3: LocalCluster) -> None:
    seen: list[int] = []
    for bid in (1, 2, 1, 3, 2):
        ch, s = _stub(c3.brokers[bid].address)
        with ch:
            code, pid, epoch = init_pid(s)
        assert code == ErrorCode.NONE and epoch == 0 and pid >= 0
        seen.append(pid)
    assert len(set(seen)) == len(seen), seen


def _produce(address: str, topic: str, buf: bytes) -> broker_pb2.PartitionProduceResult:
    ch, s = _stub(address)
    with ch:
        resp = s.Produce(
            broker_pb2.ProduceRequest(
                acks=ALL,
                timeout_ms=10_000,
                partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=buf)],
            ),
            timeout=30,
        )
    return resp.partitions[0]


def _partition0(admin: AdminClient, topic: str) -> PartitionDescription | None:
    """Partition 0 as broker metadata describes it (None until the topic is known)."""
    try:
        (d,) = admin.describe_topics([topic])
    except UnknownTopicOrPartitionError:
        return None
    return d.partitions[0]


def test_new_leader_detects_a_duplicate_written_before_the_failover(c3: LocalCluster) -> None:
    topic = "idem-failover"
    with AdminClient(c3.bootstrap_servers) as admin:
        admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})

        def full_isr_leader() -> int | None:
            p = _partition0(admin, topic)
            return p.leader if p is not None and p.leader > 0 and len(p.isr) == 3 else None

        old = wait_for(full_isr_leader, timeout=30, what="a leader with a full ISR")
        ch, s = _stub(c3.brokers[old].address)
        with ch:
            code, pid, _ = init_pid(s)
        assert code == ErrorCode.NONE
        b0, b1 = idem_batch(4, pid, 0, 0), idem_batch(3, pid, 0, 4)
        assert _produce(c3.brokers[old].address, topic, b0).base_offset == 0
        assert _produce(c3.brokers[old].address, topic, b1).base_offset == 4

        c3.kill_broker(old)

        def new_leader() -> int | None:
            p = _partition0(admin, topic)
            return p.leader if p is not None and p.leader > 0 and p.leader != old else None

        new = wait_for(new_leader, timeout=30, what="a new leader")
    addr = c3.brokers[new].address

    def retried() -> broker_pb2.PartitionProduceResult | None:
        r = _produce(addr, topic, b1)  # the client's retry of the last batch
        return r if r.error_code == ErrorCode.NONE else None

    r = wait_for(retried, timeout=30, what="the new leader to accept produce")
    assert r.base_offset == 4, r
    gap = _produce(addr, topic, idem_batch(1, pid, 0, 9))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
    assert _produce(addr, topic, idem_batch(1, pid, 0, 7)).base_offset == 7
