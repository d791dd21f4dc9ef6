"""ReplicaFetchResponse by hand: the leader's writer and the follower's parser agree with
protobuf's own serialisation, field by field, and records cross without a copy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.v1 import broker_pb2
from services.broker.replication.fetch_wire import (
    PartitionDataView,
    ReplicaFetchView,
    decode_replica_fetch_response,
    encode_replica_fetch_response,
)

pytestmark = pytest.mark.fast

_i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)

_partition = st.builds(
    PartitionDataView,
    st.text(max_size=20),
    _i32,
    error_code=st.integers(min_value=0, max_value=120),
    error_message=st.text(max_size=30),
    high_watermark=_i64,
    log_start_offset=_i64,
    records=st.binary(max_size=2000),
)
_response = st.builds(
    ReplicaFetchView,
    st.lists(_partition, max_size=4),
    error_code=st.integers(min_value=0, max_value=120),
    incremental=st.booleans(),
)

_FIELDS = (
    "topic",
    "partition",
    "error_code",
    "error_message",
    "high_watermark",
    "log_start_offset",
)


def _fields(d: Any) -> tuple[object, ...]:
    return (*(getattr(d, f) for f in _FIELDS), bytes(d.records))


@given(_response)
def test_the_leaders_bytes_are_what_protobuf_writes(resp: ReplicaFetchView) -> None:
    wire = encode_replica_fetch_response(resp)
    msg = broker_pb2.ReplicaFetchResponse(
        error_code=resp.error_code,  # type: ignore[arg-type]
        incremental=resp.incremental,
        partitions=[
            broker_pb2.ReplicaFetchPartitionData(
                topic=d.topic,
                partition=d.partition,
                error_code=d.error_code,  # type: ignore[arg-type]
                error_message=d.error_message,
                high_watermark=d.high_watermark,
                log_start_offset=d.log_start_offset,
                records=bytes(d.records),
            )
            for d in resp.partitions
        ],
    )
    assert broker_pb2.ReplicaFetchResponse.FromString(wire) == msg
    assert wire == msg.SerializeToString()


@given(_response)
def test_the_follower_reads_every_field_protobuf_writes(resp: ReplicaFetchView) -> None:
    msg = broker_pb2.ReplicaFetchResponse.FromString(encode_replica_fetch_response(resp))
    got = decode_replica_fetch_response(msg.SerializeToString())
    assert (got.error_code, got.incremental) == (msg.error_code, msg.incremental)
    assert [_fields(d) for d in got.partitions] == [_fields(d) for d in msg.partitions]


def test_records_cross_as_a_view_of_the_received_message() -> None:
    leader = ReplicaFetchView([PartitionDataView("t", 1, records=memoryview(b"batch" * 100))])
    wire = encode_replica_fetch_response(leader)
    got = decode_replica_fetch_response(wire)
    assert isinstance(got.partitions[0].records, memoryview)
    assert got.partitions[0].records.obj is wire
    assert bytes(got.partitions[0].records) == b"batch" * 100


def test_unknown_fields_are_skipped() -> None:
    extra = b"\x50\x01" + b"\x5a\x02hi" + b"\x61" + bytes(8) + b"\x6d" + bytes(4)
    part = broker_pb2.ReplicaFetchPartitionData(topic="t", partition=2).SerializeToString()
    wire = b"\x12" + bytes([len(part) + len(extra)]) + part + extra + b"\x18\x01" + extra
    got = decode_replica_fetch_response(wire)
    assert got.incremental and [(d.topic, d.partition) for d in got.partitions] == [("t", 2)]


@pytest.mark.parametrize("cut", [1, 3, 6, 9])
def test_a_truncated_message_raises_value_error(cut: int) -> None:
    wire = encode_replica_fetch_response(
        ReplicaFetchView([PartitionDataView("topic", 3, records=b"records")], incremental=True)
    )
    with pytest.raises(ValueError):
        decode_replica_fetch_response(wire[:-cut])
