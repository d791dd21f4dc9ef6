"""Produce and fetch through a real broker process: byte identity, offsets, long poll,
the protobuf records path, ListOffsets and Metadata."""

from __future__ import annotations

import threading
import time

import crc32c
from broker_helpers import ActingController, fetch_once, list_offset, produce

from headwater.batch import encode_batch, iter_headers
from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode


def test_produce_then_fetch_returns_the_same_bytes(controller: ActingController) -> None:
    controller.create_topic("bytes", partitions=2, leader_epoch=3)
    b1 = encode_batch([b"a", b"bb", None], [b"k1", None, b"k3"], timestamps=1_000)
    b2 = encode_batch([b"x" * 1000] * 5, compression_type="lz4", timestamps=2_000)
    b3 = encode_batch([b"zstd"] * 7, headers=[[("h", b"v")]] * 7, compression_type="zstd")
    r = produce(controller, "bytes", 0, b1 + b2)
    assert r.error_code == ErrorCode.NONE, r
    assert r.base_offset == 0 and r.log_append_time == -1
    r = produce(controller, "bytes", 0, b3)
    assert r.error_code == ErrorCode.NONE and r.base_offset == 8  # 3 + 5 records before

    got = fetch_once(controller, "bytes", 0, 0)
    assert got.error_code == ErrorCode.NONE
    assert got.high_watermark == 15 and got.next_offset == 15 and got.log_start_offset == 0
    sent = [b1, b2, b3]
    batches = list(iter_headers(got.records))
    assert len(batches) == 3
    expected_base = 0
    for (pos, h), original in zip(batches, sent, strict=True):
        raw = got.records[pos : pos + h.total_size]
        assert raw[16:] == original[16:]  # everything from the magic on is untouched
        assert raw[8:12] == original[8:12]  # batch length
        assert h.base_offset == expected_base and h.partition_leader_epoch == 3
        expected_base += h.record_count
    # the other partition is independent
    assert produce(controller, "bytes", 1, b1).base_offset == 0


def test_fetch_from_the_middle_starts_at_the_containing_batch(controller: ActingController) -> None:
    controller.create_topic("middle")
    b = encode_batch([b"r%d" % i for i in range(10)])
    produce(controller, "middle", 0, b)
    produce(controller, "middle", 0, b)
    got = fetch_once(controller, "middle", 0, 13)
    ((_, h),) = list(iter_headers(got.records))
    assert h.base_offset == 10 and got.next_offset == 20


def test_long_poll_stream_receives_a_batch_produced_after_it_opened(
    controller: ActingController,
) -> None:
    controller.create_topic("poll")
    req = broker_pb2.FetchRequest(
        topic="poll",
        partition=0,
        offset=0,
        max_wait_ms=20_000,
        max_bytes=1 << 20,
        replica_id=-1,
        current_leader_epoch=-1,
    )
    stream = controller.stub.Fetch(req, timeout=60)
    received: list[broker_pb2.FetchResponse] = []
    started = threading.Event()

    def reader() -> None:
        started.set()
        received.append(next(stream))

    t = threading.Thread(target=reader)
    t.start()
    started.wait(5)
    batch = encode_batch([b"late"])
    opened = time.monotonic()
    assert produce(controller, "poll", 0, batch).error_code == ErrorCode.NONE
    t.join(15)
    assert not t.is_alive(), "the stream did not deliver the appended batch"
    elapsed = time.monotonic() - opened
    assert elapsed < 10, "woken by the append, not by max_wait"
    assert received[0].records[16:] == batch[16:] and received[0].high_watermark == 1
    # the same stream continues from next_offset: an idle answer carries the HW
    stream.cancel()

    idle = fetch_once(controller, "poll", 0, 1, max_wait_ms=100)
    assert idle.error_code == ErrorCode.NONE and idle.records == b""
    assert idle.high_watermark == 1 and idle.next_offset == 1


def test_stream_keeps_serving_successive_appends(controller: ActingController) -> None:
    controller.create_topic("successive")
    req = broker_pb2.FetchRequest(
        topic="successive",
        partition=0,
        offset=0,
        max_wait_ms=50,
        max_bytes=1 << 20,
        replica_id=-1,
        current_leader_epoch=-1,
    )
    stream = controller.stub.Fetch(req, timeout=60)
    try:
        for i in range(3):
            produce(controller, "successive", 0, encode_batch([b"v%d" % i]))
        seen = 0
        deadline = time.monotonic() + 15
        while seen < 3 and time.monotonic() < deadline:
            resp = next(stream)
            assert resp.error_code == ErrorCode.NONE
            seen += sum(h.record_count for _, h in iter_headers(resp.records))
            assert resp.next_offset == seen
        assert seen == 3
    finally:
        stream.cancel()


def test_min_bytes_waits_for_enough_data(controller: ActingController) -> None:
    controller.create_topic("minbytes")
    small = encode_batch([b"s"])
    produce(controller, "minbytes", 0, small)
    start = time.monotonic()
    got = fetch_once(controller, "minbytes", 0, 0, min_bytes=1 << 20, max_wait_ms=300)
    assert time.monotonic() - start >= 0.25  # held for max_wait since min_bytes was not met
    assert got.records[16:] == small[16:]


def test_produce_records_and_fetch_records_round_trip(controller: ActingController) -> None:
    controller.create_topic("records", partitions=3)
    base = int(time.time() * 1000) - 1000
    recs = [
        broker_pb2.Record(key=b"user-%d" % i, value=b"value-%d" % i, timestamp=base + i)
        for i in range(30)
    ]
    recs.append(broker_pb2.Record(key=b"tomb"))  # null value
    recs.append(
        broker_pb2.Record(
            value=b"with headers",
            headers=[
                broker_pb2.RecordHeader(key="a", value=b"1"),
                broker_pb2.RecordHeader(key="n"),
            ],
        )
    )
    resp = controller.stub.ProduceRecords(
        broker_pb2.ProduceRecordsRequest(
            topic="records", partition=-1, records=recs, compression="zstd"
        ),
        timeout=30,
    )
    assert all(p.error_code == ErrorCode.NONE for p in resp.partitions), resp
    got: dict[int, list[broker_pb2.Record]] = {}
    for p in range(3):
        stream = controller.stub.FetchRecords(
            broker_pb2.FetchRequest(
                topic="records",
                partition=p,
                offset=0,
                max_wait_ms=50,
                max_bytes=1 << 20,
                current_leader_epoch=-1,
            ),
            timeout=30,
        )
        first = next(stream)
        stream.cancel()
        assert first.error_code == ErrorCode.NONE
        got[p] = list(first.records)
        assert [r.offset for r in got[p]] == list(range(len(got[p])))
    # keyed records follow the documented partitioner: unsigned crc32c(key) % partitions
    for r in recs[:31]:
        p = crc32c.crc32c(r.key) % 3
        match = [g for g in got[p] if g.HasField("key") and g.key == r.key]
        assert len(match) == 1
        assert match[0].HasField("value") == r.HasField("value")
        if r.HasField("value"):
            assert match[0].value == r.value and match[0].timestamp == r.timestamp
    unkeyed = [g for rs in got.values() for g in rs if not g.HasField("key")]
    assert len(unkeyed) == 1
    assert [(h.key, h.HasField("value"), h.value) for h in unkeyed[0].headers] == [
        ("a", True, b"1"),
        ("n", False, b""),
    ]
    assert unkeyed[0].timestamp >= base + 1000  # 0 on produce: the broker's clock

    # FetchRecords from the middle of a batch drops the records before the position
    stream = controller.stub.FetchRecords(
        broker_pb2.FetchRequest(
            topic="records",
            partition=0,
            offset=2,
            max_wait_ms=50,
            max_bytes=1 << 20,
            current_leader_epoch=-1,
        ),
        timeout=30,
    )
    mid = next(stream)
    stream.cancel()
    assert [r.offset for r in mid.records] == list(range(2, len(got[0])))


def test_list_offsets(controller: ActingController) -> None:
    controller.create_topic("offsets")
    assert list_offset(controller, "offsets", 0, -1).offset == 0  # empty log
    assert list_offset(controller, "offsets", 0, 5_000).offset == -1
    produce(controller, "offsets", 0, encode_batch([b"a", b"b"], timestamps=[1_000, 2_000]))
    produce(controller, "offsets", 0, encode_batch([b"c", b"d"], timestamps=[3_000, 4_000]))
    assert list_offset(controller, "offsets", 0, -2).offset == 0
    latest = list_offset(controller, "offsets", 0, -1)
    assert latest.error_code == ErrorCode.NONE and latest.offset == 4
    by_ts = list_offset(controller, "offsets", 0, 2_500)
    assert by_ts.error_code == ErrorCode.NONE and by_ts.offset >= 2 and by_ts.timestamp >= 2_500
    assert by_ts.offset <= 2  # the first batch with max timestamp >= 2500 starts at 2
    assert list_offset(controller, "offsets", 0, 1).offset == 0
    assert list_offset(controller, "offsets", 0, 10_000).offset == -1
    assert list_offset(controller, "nope", 0, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_log_append_time_topic(controller: ActingController) -> None:
    controller.create_topic("appendtime", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    r = produce(controller, "appendtime", 0, encode_batch([b"x"], timestamps=5))
    assert r.error_code == ErrorCode.NONE and r.log_append_time >= before
    got = fetch_once(controller, "appendtime", 0, 0)
    ((_, h),) = list(iter_headers(got.records))
    assert h.max_timestamp == r.log_append_time


def test_metadata(controller: ActingController) -> None:
    controller.create_topic("meta", partitions=2)
    md = controller.stub.Metadata(
        metadata_pb2.MetadataRequest(topics=["meta", "missing"]), timeout=30
    )
    assert md.cluster_id == "test-cluster" and md.controller_id == 1000
    assert md.controller.broker_id == 1000
    assert [b.broker_id for b in md.brokers] == [controller.broker.broker_id]
    by_name = {t.name: t for t in md.topics}
    assert by_name["meta"].error_code == ErrorCode.NONE and len(by_name["meta"].partitions) == 2
    assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    everything = controller.stub.Metadata(metadata_pb2.MetadataRequest(), timeout=30)
    assert "meta" in {t.name for t in everything.topics}


def test_acks_all_with_single_replica_isr(controller: ActingController) -> None:
    controller.create_topic("acksall")
    r = produce(controller, "acksall", 0, encode_batch([b"x"]), acks=broker_pb2.ACKS_ALL)
    assert r.error_code == ErrorCode.NONE and r.base_offset == 0
    r = produce(controller, "acksall", 0, encode_batch([b"y"]), acks=broker_pb2.ACKS_NONE)
    assert r.error_code == ErrorCode.NONE and r.base_offset == 1


def test_health_and_metrics(controller: ActingController) -> None:
    import urllib.request

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    controller.create_topic("metered")  # an UpdateMetadata: the broker now serves
    health = health_pb2_grpc.HealthStub(controller.channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="headwater.v1.Broker"), timeout=10)
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    produce(controller, "metered", 0, encode_batch([b"m" * 100]))
    port = controller.broker.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'headwater_broker_bytes_in_total{topic="metered"}' in text
    assert 'headwater_broker_log_size_bytes{partition="0",topic="metered"}' in text
