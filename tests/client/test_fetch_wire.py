"""The hand-written FetchResponse parser reads what protobuf's serialiser writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.client.fetch_wire import decode_fetch_response
from headwater.v1 import broker_pb2

pytestmark = pytest.mark.fast

_i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@given(
    error_code=st.integers(min_value=0, max_value=120),
    error_message=st.text(max_size=30),
    high_watermark=_i64,
    last_stable_offset=_i64,
    log_start_offset=_i64,
    records=st.binary(max_size=2000),
    next_offset=_i64,
    throttle_time_ms=_i32,
    aborted=st.lists(st.tuples(_i64, _i64), max_size=4),
)
def test_reads_every_field_protobuf_writes(
    error_code,
    error_message,
    high_watermark,
    last_stable_offset,
    log_start_offset,
    records,
    next_offset,
    throttle_time_ms,
    aborted,
) -> None:
    msg = broker_pb2.FetchResponse(
        error_code=error_code,
        error_message=error_message,
        high_watermark=high_watermark,
        last_stable_offset=last_stable_offset,
        log_start_offset=log_start_offset,
        records=records,
        next_offset=next_offset,
        throttle_time_ms=throttle_time_ms,
        aborted_transactions=[
            broker_pb2.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted
        ],
    )
    wire = msg.SerializeToString()
    got = decode_fetch_response(wire)
    assert got.error_code == msg.error_code
    assert got.error_message == msg.error_message
    assert got.high_watermark == msg.high_watermark
    assert got.last_stable_offset == msg.last_stable_offset
    assert got.log_start_offset == msg.log_start_offset
    assert bytes(got.records) == msg.records
    assert got.next_offset == msg.next_offset
    assert got.throttle_time_ms == msg.throttle_time_ms
    assert got.aborted == [(a.producer_id, a.first_offset) for a in msg.aborted_transactions]


def test_records_are_a_view_of_the_message_not_a_copy() -> None:
    wire = broker_pb2.FetchResponse(records=b"batch" * 100, next_offset=7).SerializeToString()
    got = decode_fetch_response(wire)
    assert isinstance(got.records, memoryview)
    assert got.records.obj is wire


def test_unknown_fields_are_skipped() -> None:
    extra = b"\x50\x01" + b"\x5a\x02hi" + b"\x61" + bytes(8) + b"\x6d" + bytes(4)
    wire = broker_pb2.FetchResponse(next_offset=3).SerializeToString() + extra
    assert decode_fetch_response(wire).next_offset == 3


@pytest.mark.parametrize("cut", [1, 3, 6])
def test_truncated_message_raises(cut: int) -> None:
    wire = broker_pb2.FetchResponse(records=b"abcdef", high_watermark=300).SerializeToString()
    with pytest.raises(ValueError):
        decode_fetch_response(wire[:-cut])
