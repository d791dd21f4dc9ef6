"""The consumer's transaction filter on hand-built batches (docs/transactions.md).

Batches are encoded with headwater.batch.encode_batch (data) and
headwater.batch.control.encode_control_batch (markers) at chosen base offsets, concatenated
like a fetch response and decoded as the consumer does.
"""

from __future__ import annotations

import asyncio

import pytest

from headwater import errors
from headwater.batch import decode_batches, encode_batch
from headwater.batch.codec import patch_header
from headwater.batch.control import encode_control_batch
from headwater.client.consumer import AsyncConsumer
from headwater.client.txn_filter import control_type, keep_flags
from headwater.client.types import TopicPartition

pytestmark = pytest.mark.fast

P1, P2 = 1001, 1002


def data(offset: int, pid: int = -1, n: int = 2, *, txn: bool = False) -> bytes:
    raw = encode_batch(
        [b"v%d" % i for i in range(n)],
        base_offset=0,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        transactional=txn,
    )
    buf = bytearray(raw)
    patch_header(buf, offset, 0)
    return bytes(buf)


def marker(offset: int, pid: int, *, commit: bool) -> bytes:
    buf = bytearray(
        encode_control_batch(
            producer_id=pid, producer_epoch=1, committed=commit, coordinator_epoch=0, timestamp_ms=1
        )
    )
    patch_header(buf, offset, 0)
    return bytes(buf)


def flags(parts: list[bytes], aborted: list[tuple[int, int]], rc: bool = True) -> list[bool]:
    batches = decode_batches(b"".join(parts))
    return keep_flags(batches, aborted, read_committed=rc)


def test_control_batches_are_never_delivered_even_read_uncommitted() -> None:
    parts = [data(0), marker(2, P1, commit=True), data(3)]
    assert flags(parts, [], rc=False) == [True, False, True]
    assert flags(parts, [], rc=True) == [True, False, True]
    batches = decode_batches(parts[1])
    assert control_type(batches[0]) == 1


def test_aborted_pid_dropped_from_first_offset_to_its_abort_marker() -> None:
    # P1 txn at 0..3 aborted at 6; P2 commits; a plain batch in between; P1 again after abort
    parts = [
        data(0, P1, txn=True),  # 0-1 dropped
        data(2, P2, txn=True),  # 2-3 kept (P2 commits)
        data(4),  # 4-5 non-transactional: kept
        marker(6, P1, commit=False),  # abort marker: dropped, P1 leaves the set
        marker(7, P2, commit=True),
        data(8, P1, txn=True),  # a later P1 transaction (not aborted): kept
    ]
    assert flags(parts, [(P1, 0)]) == [False, True, True, False, False, True]
    # read_uncommitted delivers every data batch
    assert flags(parts, [(P1, 0)], rc=False) == [True, True, True, False, False, True]


def test_pid_joins_only_when_a_batch_reaches_its_first_offset() -> None:
    parts = [
        data(0, P1, txn=True),  # an earlier, committed transaction of P1
        marker(2, P1, commit=True),
        data(3, P1, txn=True),  # the aborted one starts here
        marker(5, P1, commit=False),
    ]
    assert flags(parts, [(P1, 3)]) == [True, False, False, False]


def test_aborted_transaction_that_began_before_the_response() -> None:
    # the fetch starts mid-transaction: the entry's first offset is below the first batch
    parts = [data(10, P2, txn=True), data(12, P1, txn=True), marker(14, P2, commit=False)]
    assert flags(parts, [(P2, 4)]) == [False, True, False]


def test_two_aborted_transactions_of_one_pid_in_one_response() -> None:
    parts = [
        data(0, P1, txn=True),
        marker(2, P1, commit=False),
        data(3, P1, txn=True),
        marker(5, P1, commit=True),
        data(6, P1, txn=True),
        marker(8, P1, commit=False),
    ]
    assert flags(parts, [(P1, 0), (P1, 6)]) == [False, False, True, False, False, False]


def test_non_transactional_batch_of_an_aborted_pid_is_kept() -> None:
    parts = [data(0, P1, txn=True), data(2, P1, txn=False), marker(4, P1, commit=False)]
    assert flags(parts, [(P1, 0)]) == [False, True, False]


def test_consumer_positions_advance_past_dropped_batches() -> None:
    async def go() -> None:
        tp = TopicPartition("t", 0)
        c = AsyncConsumer("127.0.0.1:1", isolation_level="read_committed")
        c.assign([tp])
        st = c._parts[tp]
        st.position = 0
        raw = b"".join(
            [
                data(0, P1, txn=True),
                data(2),
                marker(4, P1, commit=False),
                marker(5, P2, commit=True),
            ]
        )
        st.pending.append((st.epoch, raw, [(P1, 0)]))
        st.buffered = len(raw)
        assert c._fetcher is not None
        got = c._fetcher.collect(None)
        assert [fb.offsets().tolist() for fb in got] == [[2, 3]]
        assert st.position == 6  # past the two markers
        assert st.buffered == 0
        await c.close()

    asyncio.run(go())


def test_isolation_level_is_validated() -> None:
    with pytest.raises(errors.InvalidConfigError):
        AsyncConsumer("127.0.0.1:1", isolation_level="committed")
