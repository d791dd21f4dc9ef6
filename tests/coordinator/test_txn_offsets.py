"""The group side of transactions (pure): TxnOffsetCommit stays pending, invisible to
OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable) until WriteTxnOffsetMarker commits
it; abort drops it; markers are idempotent, replay-safe and leave a later transaction's
pending offsets alone."""

from __future__ import annotations

import pytest

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import offsets, txn_offsets
from services.coordinator.group import GroupTable
from tests.coordinator.harness import Harness

pytestmark = pytest.mark.fast


def _commit(hn: Harness, pid: int, epoch: int, offset: int, p: int = 0) -> pb.OffsetCommitResponse:
    req = pb.TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1,
        partitions=[pb.OffsetCommitPartition(topic="in", partition=p, offset=offset)],
    )  # fmt: skip
    resp: pb.OffsetCommitResponse = hn.apply(txn_offsets.txn_commit(hn.table, req, hn.ctx()))
    return resp


def _marker(hn: Harness, pid: int, epoch: int, committed: bool) -> int:
    before = len(hn.log)
    req = pb.WriteTxnOffsetMarkerRequest(
        group_id="g", producer_id=pid, producer_epoch=epoch, committed=committed
    )
    assert hn.apply(txn_offsets.txn_marker(hn.table, req, hn.ctx())).error_code == ErrorCode.NONE
    return len(hn.log) - before


def _fetch(table: GroupTable, stable: bool) -> list[tuple[int, int]]:
    req = pb.OffsetFetchRequest(
        group_id="g", partitions=[pb.TopicPartitions(topic="in", partitions=[0])],
        require_stable=stable,
    )  # fmt: skip
    return [(o.offset, o.error_code) for o in offsets.fetch(table, req).offsets]


def test_pending_until_commit_marker() -> None:
    hn = Harness()
    hn.apply(offsets.commit(hn.table, pb.OffsetCommitRequest(
        group_id="g", generation_id=-1,
        partitions=[pb.OffsetCommitPartition(topic="in", partition=0, offset=5)],
    ), hn.ctx()))  # fmt: skip
    assert _commit(hn, 7, 0, 10).partitions[0].error_code == ErrorCode.NONE
    assert _fetch(hn.table, False) == [(5, ErrorCode.NONE)]
    assert _fetch(hn.table, True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    assert _marker(hn, 7, 1, True) == 2  # the offset record + the pending tombstone
    assert _fetch(hn.table, True) == [(10, ErrorCode.NONE)]
    assert _marker(hn, 7, 1, True) == 0  # retried marker: nothing left, nothing written
    replayed = GroupTable()
    for k, v, e in hn.log:
        replayed.replay(k, v, e, hn.now)
    assert replayed.durable_view() == hn.table.durable_view()
    assert _fetch(replayed, True) == [(10, ErrorCode.NONE)]


def test_abort_drops_and_a_later_transactions_offsets_survive_an_old_marker() -> None:
    hn = Harness()
    _commit(hn, 7, 0, 10)
    assert _marker(hn, 7, 1, False) == 1
    assert _fetch(hn.table, True) == [(-1, ErrorCode.NONE)]
    _commit(hn, 7, 1, 20)  # next transaction, epoch 1
    assert _marker(hn, 7, 1, True) == 0  # the epoch-1 marker (retried) ends epoch-0 work only
    assert _fetch(hn.table, True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    _marker(hn, 8, 5, True)  # another producer's marker
    assert _fetch(hn.table, True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    _marker(hn, 7, 2, True)
    assert _fetch(hn.table, True) == [(20, ErrorCode.NONE)]


def test_bad_requests_write_nothing() -> None:
    hn = Harness()
    before = list(hn.log)
    assert _commit(hn, -1, 0, 10).error_code == ErrorCode.INVALID_REQUEST
    assert _commit(hn, 7, 0, -3).partitions[0].error_code == ErrorCode.INVALID_REQUEST
    req = pb.TxnOffsetCommitRequest(group_id="g", producer_id=7, producer_epoch=0,
                                    member_id="ghost", generation_id=3)  # fmt: skip
    resp = hn.apply(txn_offsets.txn_commit(hn.table, req, hn.ctx()))
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert hn.log == before


def test_a_zombies_late_pending_offset_is_never_committed() -> None:
    hn = Harness()
    _commit(hn, 7, 3, 30)  # the current transaction, epoch 3
    assert _commit(hn, 7, 2, 99).error_code == ErrorCode.PRODUCER_FENCED  # a zombie at 2
    _marker(hn, 7, 4, True)
    assert _fetch(hn.table, True) == [(30, ErrorCode.NONE)]
    _commit(hn, 7, 1, 77)  # a zombie's write that arrives when nothing is pending
    _commit(hn, 7, 4, 40, p=1)  # the next transaction at epoch 4, another partition
    _marker(hn, 7, 5, True)
    assert _fetch(hn.table, True) == [(30, ErrorCode.NONE)]  # 77 dropped, not committed
    assert not hn.table.groups["g"].pending
