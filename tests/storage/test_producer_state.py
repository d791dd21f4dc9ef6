"""Producer state on a real log: sequence rules, duplicates, markers, follower state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import append, headers_of, make_batch

from headwater.batch import encode_batch, iter_headers
from headwater.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from services.broker.storage.log import Log
from services.broker.storage.producer_state import (
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
)

pytestmark = pytest.mark.fast

OpenLog = Callable[..., Log]


def pbatch(pid: int, epoch: int, seq: int, n: int = 2, *, txn: bool = False) -> bytes:
    return encode_batch(
        [f"{pid}:{seq + i}".encode() for i in range(n)],
        timestamps=1_700_000_000_000 + seq,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def marker(log: Log, pid: int, epoch: int, *, commit: bool, coord: int = 0) -> None:
    log.append_control(
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
        coordinator_epoch=coord,
        leader_epoch=0,
    )


def test_sequences_advance_and_duplicates_return_original_offsets(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch(3))  # non-idempotent: offsets 0-2
    a = append(log, pbatch(7, 0, 0))
    b = append(log, pbatch(7, 0, 2))
    assert (a.first_offset, b.first_offset, b.last_offset) == (3, 5, 6)
    dup = append(log, pbatch(7, 0, 0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (3, 4)
    assert log.log_end_offset == 7
    e = log.producer_entry(7)
    assert e is not None and e.epoch == 0 and e.last_seq == 3
    assert [(m.first_seq, m.last_seq, m.first_offset) for m in e.batches] == [(0, 1, 3), (2, 3, 5)]


def test_only_five_batches_are_remembered(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(7):
        append(log, pbatch(1, 0, i, n=1))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(1, 0, 1, n=1))  # evicted: no longer a known duplicate
    assert append(log, pbatch(1, 0, 2, n=1)).duplicate


def test_mixed_call_writes_only_new_batches(open_log: OpenLog) -> None:
    log = open_log()
    append(log, pbatch(1, 0, 0))
    buf = pbatch(1, 0, 0) + pbatch(1, 0, 2) + pbatch(1, 0, 4)
    info = log.append(buf, headers_of(buf), 0)
    assert not info.duplicate
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (2, 5, 6)


def test_sequence_errors_write_nothing(open_log: OpenLog) -> None:
    log = open_log()
    append(log, pbatch(1, 0, 0))
    end = log.log_end_offset
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(1, 0, 5))  # gap
    with pytest.raises(UnknownProducerIdError):
        append(log, pbatch(2, 0, 3))  # unknown pid not at 0
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(1, 1, 4))  # new epoch must start at 0
    buf = pbatch(1, 0, 2) + pbatch(1, 0, 9)  # second batch of the call breaks the order
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(buf, headers_of(buf), 0)
    assert log.log_end_offset == end
    append(log, pbatch(1, 1, 0))  # epoch bump from 0 is fine
    with pytest.raises(InvalidProducerEpochError):
        append(log, pbatch(1, 0, 2))  # old epoch fenced
    assert log.producer_entry(1).epoch == 1  # type: ignore[union-attr]


def test_sequence_wraps_at_2_pow_31() -> None:
    top = 2**31 - 1
    state = ProducerStateManager([ProducerEntry(4, 0, [BatchMetadata(top - 1, top, 0, 1, 0)])])
    raw = encode_batch([b"c", b"d"], producer_id=4, producer_epoch=0, base_sequence=0)
    ((pos, h),) = iter_headers(raw)
    assert state.check([(pos, h)]) == [None]
    state.apply_data(h, 2)
    assert state.entries[4].last_seq == 1
    bad = encode_batch([b"e"], producer_id=4, producer_epoch=0, base_sequence=top)
    with pytest.raises(OutOfOrderSequenceNumberError):
        state.check(list(iter_headers(bad)))


def test_control_batch_from_client_rejected_by_log(open_log: OpenLog) -> None:
    log = open_log()
    raw = encode_batch(
        [b"\0" * 6],
        [b"\0" * 4],
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    with pytest.raises(InvalidRequestError):
        log.append(raw, list(iter_headers(raw)), 0)
    assert log.log_end_offset == 0


def test_transaction_lifecycle_and_lso(open_log: OpenLog) -> None:
    log = open_log()
    append(log, make_batch(2))
    append(log, pbatch(1, 0, 0, txn=True))  # offsets 2-3, opens txn at 2
    assert log.first_unstable_offset == 2
    with pytest.raises(InvalidTxnStateError):
        append(log, pbatch(1, 0, 2))  # non-transactional while open
    append(log, pbatch(2, 0, 0, txn=True))  # 4-5
    append(log, pbatch(1, 0, 2, txn=True))  # 6-7, same txn
    assert log.producer_entry(1).current_txn_first_offset == 2  # type: ignore[union-attr]
    marker(log, 1, 1, commit=True)  # offset 8, epoch bumped by the coordinator
    assert log.first_unstable_offset == 4
    e = log.producer_entry(1)
    assert e is not None and e.epoch == 1 and e.batches == [] and e.current_txn_first_offset == -1
    with pytest.raises(InvalidProducerEpochError):
        append(log, pbatch(1, 0, 4, txn=True))  # delayed produce of the ended epoch
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(1, 1, 4, txn=True))  # the new epoch starts at 0
    marker(log, 2, 1, commit=False)  # offset 9 aborts pid 2's txn [4, 9]
    assert log.first_unstable_offset is None
    assert log.aborted_transactions(0, 100) == [(2, 4)]
    # a retried marker is written and harmless
    marker(log, 2, 1, commit=False)
    assert log.aborted_transactions(0, 100) == [(2, 4)]
    assert log.log_end_offset == 11


def test_marker_fencing(open_log: OpenLog) -> None:
    log = open_log()
    append(log, pbatch(1, 3, 0, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, 2, commit=True)
    marker(log, 1, 4, commit=False, coord=5)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log, 1, 4, commit=True, coord=4)
    assert log.log_end_offset == 3
    e = log.producer_entry(1)
    assert e is not None and (e.epoch, e.coordinator_epoch) == (4, 5)


def test_follower_builds_identical_state(open_log: OpenLog, tmp_path: Path) -> None:
    leader = open_log()
    append(leader, pbatch(1, 0, 0, txn=True))
    append(leader, pbatch(2, 0, 0))
    append(leader, pbatch(3, 0, 0, txn=True))
    marker(leader, 1, 1, commit=False, coord=2)
    append(leader, pbatch(2, 0, 2))
    data = leader.read(0, 1 << 20).data
    follower = open_log(tmp_path / "f-0")
    follower.append_as_follower(data, list(iter_headers(data)))
    for pid in (1, 2, 3):
        assert follower.producer_entry(pid) == leader.producer_entry(pid)
    assert follower.first_unstable_offset == leader.first_unstable_offset == 4
    assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100) == [(1, 0)]
