"""The transaction coordinator's state machine (pure handlers over a TxnTable): a fake clock,
a list as the log (every record replayed as the runtime does), marker jobs collected instead
of written."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.v1 import transaction_pb2 as tpb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import records as rec
from services.coordinator.txn import handlers as h
from services.coordinator.txn.state import MAX_EPOCH, TxnMetadata, TxnState, TxnTable

pytestmark = pytest.mark.fast

TID = "copier-1"


class TxnHarness:
    def __init__(self, epoch: int = 1) -> None:
        self.table = TxnTable()
        self.log: list[tuple[bytes, bytes | None, int]] = []
        self.now = 1_000_000
        self.epoch = epoch
        self.next_pid = 100
        self.jobs: list[h.MarkerJob] = []
        self.parked: dict[Any, Any] = {}
        self.replay(rec.marker(epoch, 1))

    def replay(self, r: rec.Record) -> None:
        self.log.append((r.key, r.value, r.epoch))
        self.table.replay(r.key, r.value, r.epoch, self.now)

    def ctx(self, request: object = None) -> h.TxnCtx:
        pid = -1
        if request is not None and h.needs_new_pid(self.table, request):
            pid, self.next_pid = self.next_pid, self.next_pid + 1
        return h.TxnCtx(
            now_ms=self.now, epoch=self.epoch, max_timeout_ms=60_000, new_producer_id=pid
        )

    def apply(self, result: h.Result) -> Any:
        out, jobs = result
        for r in out.records:
            self.replay(r)
        self.jobs.extend(jobs)
        for key, resp in out.replies:
            self.parked[key] = resp
        if out.wait is not None:
            self.parked.setdefault(out.wait, None)
            return "parked"
        return out.response

    def send(self, request: object) -> Any:
        """``request`` to its handler, found by its type, as the runtime does."""
        return self.apply(h.HANDLERS.handle(self.table, request, self.ctx(request)))

    def init(self, tid: str = TID, timeout_ms: int = 10_000, pid: int = -1, epoch: int = -1) -> Any:
        req = tpb.InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid,
            producer_epoch=epoch,
        )  # fmt: skip
        return self.send(req)

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], tid: str = TID) -> Any:
        req = tpb.AddPartitionsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch,
            partitions=[tpb.TxnTopicPartitions(topic=t, partitions=[p]) for t, p in tps],
        )  # fmt: skip
        return self.send(req)

    def add_group(self, pid: int, epoch: int, group: str, tid: str = TID) -> Any:
        req = tpb.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        )
        return self.send(req)

    def end(self, pid: int, epoch: int, commit: bool, tid: str = TID) -> Any:
        req = tpb.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
        )
        return self.send(req)

    def markers_done(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            self.send(job)

    def meta(self, tid: str = TID) -> TxnMetadata:
        return self.table.txns[tid]

    def reloaded(self) -> TxnTable:
        t = TxnTable()
        for k, v, e in self.log:
            t.replay(k, v, e, self.now)
        return t


def test_init_allocates_then_bumps_and_fences_the_old_epoch() -> None:
    hn = TxnHarness()
    r1 = hn.init()
    assert (r1.error_code, r1.producer_id, r1.producer_epoch) == (ErrorCode.NONE, 100, 0)
    r2 = hn.init()
    assert (r2.producer_id, r2.producer_epoch) == (100, 1)
    assert hn.add(100, 0, ("t", 0)).error_code == ErrorCode.PRODUCER_FENCED
    assert hn.meta().state is TxnState.EMPTY and not hn.meta().partitions
    assert hn.add(100, 1, ("t", 0)).error_code == ErrorCode.NONE
    assert hn.meta().state is TxnState.ONGOING


def test_commit_bumps_the_epoch_and_markers_carry_it() -> None:
    hn = TxnHarness()
    hn.init()
    hn.add(100, 0, ("t", 0), ("t", 1))
    hn.add_group(100, 0, "g")
    assert hn.end(100, 0, True) == "parked"
    m = hn.meta()
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (TxnState.PREPARE_COMMIT, 1, 0)
    [job] = hn.jobs
    assert job.committed and job.producer_epoch == 1
    assert job.partitions == {("t", 0), ("t", 1)} and job.groups == {"g"}
    # while completing: a retry is CONCURRENT_TRANSACTIONS, a new transaction is fenced
    assert hn.end(100, 0, True).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert hn.init().error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    hn.markers_done()
    resp = hn.parked[h.end_key(TID)]
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (ErrorCode.NONE, 100, 1)
    assert hn.meta().state is TxnState.COMPLETE_COMMIT and not hn.meta().partitions


def test_retried_end_txn_is_idempotent_but_never_ends_a_later_transaction() -> None:
    hn = TxnHarness()
    hn.init()
    hn.add(100, 0, ("t", 0))
    hn.end(100, 0, True)
    hn.markers_done()
    again = hn.end(100, 0, True)  # the retry of a commit that completed
    assert (again.error_code, again.producer_epoch) == (ErrorCode.NONE, 1)
    assert hn.end(100, 0, False).error_code == ErrorCode.PRODUCER_FENCED  # other outcome
    # the next transaction at epoch 1; the old EndTxn (epoch 0, abort) must not touch it
    hn.add(100, 1, ("t", 2))
    for commit in (False, True):
        assert hn.end(100, 0, commit).error_code == ErrorCode.PRODUCER_FENCED
    m = hn.meta()
    assert (m.state, m.producer_epoch, m.partitions) == (TxnState.ONGOING, 1, {("t", 2)})
    assert not hn.jobs
    assert hn.end(100, 1, False) == "parked"
    hn.markers_done()
    assert hn.meta().state is TxnState.COMPLETE_ABORT and hn.meta().producer_epoch == 2


def test_end_without_a_transaction_and_bad_ids_change_nothing() -> None:
    hn = TxnHarness()
    hn.init()
    before = list(hn.log)
    assert hn.end(100, 0, True).error_code == ErrorCode.INVALID_TXN_STATE
    assert hn.end(7, 0, True).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert hn.add(100, 0, ("t", 0), tid="other").error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert hn.add(100, 0, ("", 0)).error_code == ErrorCode.INVALID_REQUEST
    assert hn.init(timeout_ms=-1).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert hn.init(timeout_ms=60_001).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert hn.add_group(100, 0, "").error_code == ErrorCode.INVALID_GROUP_ID
    assert hn.log == before


def test_unset_transaction_timeout_is_the_default() -> None:
    hn = TxnHarness()
    assert hn.init(timeout_ms=0).error_code == ErrorCode.NONE
    assert hn.meta().timeout_ms == h.DEFAULT_TIMEOUT_MS


def test_timeout_aborts_an_open_transaction_and_fences_its_producer() -> None:
    hn = TxnHarness()
    hn.init(timeout_ms=5_000)
    hn.add(100, 0, ("t", 0))
    hn.now += 4_999
    assert hn.apply(h.tick(hn.table, hn.ctx())) is None and not hn.jobs
    hn.now += 1
    hn.apply(h.tick(hn.table, hn.ctx()))
    [job] = hn.jobs
    assert not job.committed and job.producer_epoch == 1
    assert hn.meta().state is TxnState.PREPARE_ABORT
    hn.markers_done()
    assert hn.meta().state is TxnState.COMPLETE_ABORT
    assert hn.end(100, 0, True).error_code == ErrorCode.PRODUCER_FENCED
    assert hn.add(100, 0, ("t", 0)).error_code == ErrorCode.PRODUCER_FENCED


def test_init_while_ongoing_aborts_first_then_bumps() -> None:
    hn = TxnHarness()
    hn.init()
    hn.add(100, 0, ("t", 0))
    assert hn.init().error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    [job] = hn.jobs
    assert not job.committed and job.producer_epoch == 1
    assert hn.init().error_code == ErrorCode.CONCURRENT_TRANSACTIONS  # markers not written yet
    hn.markers_done()
    r = hn.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 100, 2)


def test_kip360_reinit_with_a_stale_identity_is_fenced() -> None:
    hn = TxnHarness()
    hn.init()
    hn.init()  # epoch 1
    assert hn.init(pid=100, epoch=1).producer_epoch == 2
    assert hn.init(pid=100, epoch=0).error_code == ErrorCode.PRODUCER_FENCED
    assert hn.init(pid=99, epoch=2).error_code == ErrorCode.PRODUCER_FENCED


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    hn = TxnHarness()
    hn.init()
    hn.replay(hn.meta().with_(producer_epoch=MAX_EPOCH - 1).record(hn.epoch))
    hn.add(100, MAX_EPOCH - 1, ("t", 0))
    hn.end(100, MAX_EPOCH - 1, True)
    assert hn.jobs[0].producer_epoch == MAX_EPOCH and hn.jobs[0].producer_id == 100
    hn.markers_done()
    resp = hn.parked[h.end_key(TID)]
    assert (resp.producer_id, resp.producer_epoch) == (101, 0)
    hn.replay(hn.meta().with_(producer_epoch=MAX_EPOCH - 1).record(hn.epoch))
    r = hn.init()
    assert (r.producer_id, r.producer_epoch) == (102, 0)


def test_replay_rebuilds_the_table_and_finds_preparing_transactions() -> None:
    hn = TxnHarness()
    hn.init()
    hn.add(100, 0, ("t", 0))
    hn.end(100, 0, True)
    hn.init(tid="b")
    reloaded = hn.reloaded()
    assert reloaded.txns == hn.table.txns
    [job] = h.preparing_jobs(reloaded)
    assert (job.transactional_id, job.committed, job.producer_epoch) == (TID, True, 1)


def test_a_deposed_owners_late_write_is_ignored_and_restated() -> None:
    hn = TxnHarness(epoch=1)
    hn.init()
    stale = hn.meta().with_(producer_epoch=9).record(1)
    hn.replay(rec.marker(2, 2))
    assert not hn.table.replay(stale.key, stale.value, stale.epoch, hn.now)
    assert hn.meta().producer_epoch == 0
    fixed = hn.table.current_record(stale.key, 2)
    assert TxnMetadata.from_value(TID, fixed.value or b"").producer_epoch == 0


def test_describe_and_list() -> None:
    hn = TxnHarness()
    hn.init()
    hn.add(100, 0, ("t", 1), ("t", 0))
    hn.init(tid="b")
    d = h.describe(hn.table, TID)
    assert d.state == tpb.TXN_ONGOING and d.transaction_start_ms == hn.now
    assert [(tp.topic, list(tp.partitions)) for tp in d.partitions] == [("t", [0, 1])]
    assert h.describe(hn.table, "nope").error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert [t.transactional_id for t in h.list_txns(hn.table, [])] == ["b", TID]
    assert [t.transactional_id for t in h.list_txns(hn.table, [tpb.TXN_EMPTY])] == ["b"]
