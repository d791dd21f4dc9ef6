"""The hand-written ProduceRequest encoding is the protobuf encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.client.produce_wire import encode_produce_request
from headwater.protowire import encode_varint as varint
from headwater.v1 import broker_pb2

pytestmark = pytest.mark.fast

_parts = st.lists(
    st.tuples(
        st.text(min_size=0, max_size=20),
        st.integers(min_value=0, max_value=2**31 - 1),
        st.lists(st.binary(max_size=300), max_size=3),
    ),
    max_size=4,
)


@given(
    acks=st.sampled_from([0, 1, 2]),
    timeout_ms=st.integers(min_value=0, max_value=2**31 - 1),
    client_id=st.text(max_size=12),
    txn=st.text(max_size=12),
    parts=_parts,
    order=st.tuples(*[st.integers(min_value=0, max_value=2**64 - 1)] * 3),
)
def test_parses_back_to_the_same_message(acks, timeout_ms, client_id, txn, parts, order) -> None:
    request = dict(
        acks=acks,
        timeout_ms=timeout_ms,
        client_id=client_id,
        partitions=parts,
        transactional_id=txn,
        order=order,
    )
    wire = encode_produce_request(**request)
    expected = broker_pb2.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        client_id=client_id,
        transactional_id=txn,
        order_key=order[0],
        order_number=order[1],
        order_after=order[2],
        partitions=[
            broker_pb2.PartitionRecords(topic=t, partition=p, records=b"".join(bs))
            for t, p, bs in parts
        ],
    )
    assert broker_pb2.ProduceRequest.FromString(wire) == expected
    assert wire == expected.SerializeToString(deterministic=True)
    # the sender passes each partition's length (its batches' encoded_size): the same bytes
    lens = [sum(map(len, bs)) for _, _, bs in parts]
    assert encode_produce_request(**request, records_lens=lens) == wire


def test_varint_matches_protobuf_for_edge_values() -> None:
    for value in (1, 127, 128, 300, 2**31 - 1, -1, -(2**31)):
        msg = broker_pb2.PartitionRecords(partition=value)
        assert b"\x10" + varint(value) == msg.SerializeToString()
    assert varint(0) == b"\x00"
