"""The broker's hand-written ProduceRequest parser reads what protobuf's serialiser writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.client.produce_wire import encode_produce_request
from headwater.v1 import broker_pb2
from services.broker.handlers.produce_wire import decode_produce_request

_i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)

_parts = st.lists(
    st.builds(
        broker_pb2.PartitionRecords,
        topic=st.text(max_size=20),
        partition=_i32,
        records=st.binary(max_size=300),
    ),
    max_size=4,
)


@given(
    acks=st.sampled_from([0, 1, 2, 7]),
    timeout_ms=_i32,
    client_id=st.text(max_size=12),
    txn=st.text(max_size=12),
    parts=_parts,
    order=st.tuples(*[st.integers(min_value=0, max_value=2**64 - 1)] * 3),
)
def test_reads_every_field_protobuf_writes(acks, timeout_ms, client_id, txn, parts, order) -> None:
    msg = broker_pb2.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        client_id=client_id,
        transactional_id=txn,
        partitions=parts,
        order_key=order[0],
        order_number=order[1],
        order_after=order[2],
    )
    got = decode_produce_request(msg.SerializeToString())
    assert (got.acks, got.timeout_ms) == (msg.acks, msg.timeout_ms)
    assert (got.order_key, got.order_number, got.order_after) == order
    assert (got.client_id, got.transactional_id) == (msg.client_id, msg.transactional_id)
    assert [(p.topic, p.partition, bytes(p.records)) for p in got.partitions] == [
        (p.topic, p.partition, p.records) for p in msg.partitions
    ]


def test_reads_the_client_encoding_with_views_of_the_request() -> None:
    batches = [b"a" * 100, b"b" * 50]
    wire = encode_produce_request(
        acks=1, timeout_ms=30_000, client_id="c", partitions=[("t", 3, batches)]
    )
    got = decode_produce_request(wire)
    (part,) = got.partitions
    assert (part.topic, part.partition, bytes(part.records)) == ("t", 3, b"".join(batches))
    assert isinstance(part.records, memoryview) and part.records.obj is wire


def test_unknown_fields_are_skipped() -> None:
    extra = b"\x50\x01" + b"\x5a\x02hi" + b"\x61" + bytes(8) + b"\x6d" + bytes(4)
    wire = broker_pb2.ProduceRequest(acks=2, timeout_ms=5).SerializeToString() + extra
    got = decode_produce_request(wire)
    assert (got.acks, got.timeout_ms) == (2, 5)


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_truncated_message_raises(cut: int) -> None:
    msg = broker_pb2.ProduceRequest(
        acks=1, partitions=[broker_pb2.PartitionRecords(topic="t", records=b"xyz" * 5)]
    )
    with pytest.raises(ValueError):
        decode_produce_request(msg.SerializeToString()[:-cut])
