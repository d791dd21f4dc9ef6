"""Bad input gets a typed error and appends nothing (the log end offset does not move)."""

from __future__ import annotations

import struct

import grpc
import pytest
from broker_helpers import ActingController, fetch_once, list_offset, produce

from headwater.batch import encode_batch
from headwater.errors import MessageTooLargeError, from_rpc_error
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode


def _patched(buf: bytes, fmt: str, at: int, value: int) -> bytes:
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


@pytest.fixture(scope="module")
def topic(controller: ActingController) -> str:
    controller.create_topic("bad", partitions=2, configs={"max.message.bytes": "2048"})
    r = produce(controller, "bad", 0, encode_batch([b"seed"]))
    assert r.error_code == ErrorCode.NONE
    return "bad"


GOOD = encode_batch([b"hello", b"world"], [b"k", None])


def _corruptions() -> dict[str, tuple[bytes, int]]:
    flipped = bytearray(GOOD)
    flipped[-3] ^= 0xFF  # a value byte: the CRC no longer matches
    return {
        "over max.message.bytes": (encode_batch([b"x" * 4000]), ErrorCode.MESSAGE_TOO_LARGE),
        "bad crc": (bytes(flipped), ErrorCode.CORRUPT_MESSAGE),
        "negative length": (_patched(GOOD, "<i", 8, -8), ErrorCode.CORRUPT_MESSAGE),
        "length past the end": (_patched(GOOD, "<i", 8, len(GOOD) + 52), ErrorCode.CORRUPT_MESSAGE),
        "record count mismatch": (_patched(GOOD, "<i", 60, 5), ErrorCode.CORRUPT_MESSAGE),
        "unknown magic": (GOOD[:16] + b"XYZ" + GOOD[19:], ErrorCode.CORRUPT_MESSAGE),
        "truncated": (GOOD[:40], ErrorCode.CORRUPT_MESSAGE),
        "empty": (b"", ErrorCode.CORRUPT_MESSAGE),
        "good then garbage": (GOOD + b"\x00" * 64, ErrorCode.CORRUPT_MESSAGE),
    }


@pytest.mark.parametrize("case", sorted(_corruptions()))
def test_invalid_batches_are_refused_and_nothing_is_appended(
    controller: ActingController, topic: str, case: str
) -> None:
    buf, code = _corruptions()[case]
    before = list_offset(controller, topic, 0, -1).offset
    r = produce(controller, topic, 0, buf)
    assert r.error_code == code, (case, r)
    assert r.error_message
    assert r.base_offset == -1
    assert list_offset(controller, topic, 0, -1).offset == before
    got = fetch_once(controller, topic, 0, 0)
    assert got.next_offset == before


def test_one_bad_partition_does_not_fail_the_others(
    controller: ActingController, topic: str
) -> None:
    bad = _corruptions()["bad crc"][0]
    before0 = list_offset(controller, topic, 0, -1).offset
    before1 = list_offset(controller, topic, 1, -1).offset
    resp = controller.stub.Produce(
        broker_pb2.ProduceRequest(
            partitions=[
                broker_pb2.PartitionRecords(topic=topic, partition=0, records=bad),
                broker_pb2.PartitionRecords(topic=topic, partition=1, records=GOOD),
                broker_pb2.PartitionRecords(topic="no-such-topic", partition=0, records=GOOD),
                broker_pb2.PartitionRecords(topic=topic, partition=7, records=GOOD),
            ]
        ),
        timeout=30,
    )
    codes = [p.error_code for p in resp.partitions]
    assert codes == [
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert resp.partitions[1].base_offset == before1
    assert list_offset(controller, topic, 0, -1).offset == before0
    assert list_offset(controller, topic, 1, -1).offset == before1 + 2


def test_unknown_acks_fails_the_request(controller: ActingController, topic: str) -> None:
    before = list_offset(controller, topic, 0, -1).offset
    with pytest.raises(grpc.RpcError) as info:
        produce(controller, topic, 0, GOOD, acks=7)
    assert from_rpc_error(info.value).code == ErrorCode.INVALID_REQUIRED_ACKS
    assert list_offset(controller, topic, 0, -1).offset == before


def test_request_over_the_message_limit_is_refused(
    controller: ActingController, topic: str
) -> None:
    before = list_offset(controller, topic, 0, -1).offset
    with pytest.raises(grpc.RpcError) as info:
        produce(controller, topic, 0, b"\x00" * (61 * 1024 * 1024))  # over 60 MiB
    assert isinstance(from_rpc_error(info.value), MessageTooLargeError)
    assert list_offset(controller, topic, 0, -1).offset == before


def test_fetch_errors(controller: ActingController, topic: str) -> None:
    end = list_offset(controller, topic, 0, -1).offset
    cases = {
        "past the end": (dict(offset=end + 1), ErrorCode.OFFSET_OUT_OF_RANGE),
        "negative offset": (dict(offset=-5), ErrorCode.OFFSET_OUT_OF_RANGE),
        "negative max_bytes": (dict(offset=0, max_bytes=-1), ErrorCode.INVALID_FETCH_SIZE),
        "negative max_wait_ms": (dict(offset=0, max_wait_ms=-1), ErrorCode.INVALID_REQUEST),
        "negative min_bytes": (dict(offset=0, min_bytes=-1), ErrorCode.INVALID_REQUEST),
    }
    for name, (kw, code) in cases.items():
        req = broker_pb2.FetchRequest(
            topic=topic, partition=0, current_leader_epoch=-1, **{"max_wait_ms": 50, **kw}
        )
        responses = list(controller.stub.Fetch(req, timeout=30))  # the stream ends by itself
        assert [r.error_code for r in responses] == [code], name
        assert responses[0].error_message
    for name, partition, t in [("unknown topic", 0, "no-such"), ("unknown partition", 9, topic)]:
        req = broker_pb2.FetchRequest(topic=t, partition=partition, offset=0, max_bytes=100)
        responses = list(controller.stub.Fetch(req, timeout=30))
        assert [r.error_code for r in responses] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], name
    records = list(
        controller.stub.FetchRecords(
            broker_pb2.FetchRequest(topic=topic, partition=0, offset=end + 5, max_bytes=100),
            timeout=30,
        )
    )
    assert [r.error_code for r in records] == [ErrorCode.OFFSET_OUT_OF_RANGE]


def test_produce_records_errors(controller: ActingController, topic: str) -> None:
    resp = controller.stub.ProduceRecords(
        broker_pb2.ProduceRecordsRequest(
            topic="no-such", partition=-1, records=[broker_pb2.Record(value=b"x")]
        ),
        timeout=30,
    )
    assert [p.error_code for p in resp.partitions] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    before = list_offset(controller, topic, 0, -1).offset
    resp = controller.stub.ProduceRecords(
        broker_pb2.ProduceRecordsRequest(
            topic=topic, partition=0, records=[broker_pb2.Record(value=b"x" * 5000)]
        ),
        timeout=30,
    )
    assert [p.error_code for p in resp.partitions] == [ErrorCode.MESSAGE_TOO_LARGE]
    with pytest.raises(grpc.RpcError) as info:
        controller.stub.ProduceRecords(
            broker_pb2.ProduceRecordsRequest(
                topic=topic,
                partition=0,
                records=[broker_pb2.Record(value=b"x")],
                compression="snappy",
            ),
            timeout=30,
        )
    assert from_rpc_error(info.value).code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert list_offset(controller, topic, 0, -1).offset == before
