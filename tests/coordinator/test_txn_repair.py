"""The txn runtime's log machinery against an in-memory log whose reader hands out ONE record
per poll, so the interleavings of a takeover are exact (fast unit tests; the fakes stand for
the producer, the tail consumer and the marker writer only).

Regression (the bounce test, pytest-307): the new owner of a ``__transaction_state``
partition loaded a PrepareCommit transaction and finished its markers; its CompleteCommit was
appended right behind a late CompleteCommit of the deposed owner (fenced). Reading the fenced
record first, the runtime "repaired" the key with the value its table held at that moment —
PrepareCommit — and appended it AFTER its own CompleteCommit: the table went back to
PrepareCommit with no marker task left, and InitProducerId answered CONCURRENT_TRANSACTIONS
forever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.client.types import ConsumerRecord
from headwater.v1 import transaction_pb2 as tpb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import records as rec
from services.coordinator.log_runtime import Request
from services.coordinator.outcome import Outcome
from services.coordinator.txn import handlers as h
from services.coordinator.txn.runtime import TxnRuntime
from services.coordinator.txn.state import TxnMetadata, TxnState, TxnTable, txn_key
from tests.helpers.coordinator_log import FakeLog, FakeProducer, OneAtATimeConsumer

pytestmark = pytest.mark.fast

TID = "copier-1"
OLD, NEW = 2, 3  # the deposed owner's and the new owner's ownership epochs


class FakeMarkers:
    def __init__(self) -> None:
        self.written: list[h.MarkerJob] = []

    async def write(self, job: h.MarkerJob, coordinator_epoch: int) -> None:
        self.written.append(job)


def prepared(epoch: int = OLD) -> TxnMetadata:
    return TxnMetadata(
        TID, 1000, 5, 4, state=TxnState.PREPARE_COMMIT,
        partitions=frozenset({("out", 0)}), groups=frozenset({"g"}), start_ms=1, update_ms=2,
    )  # fmt: skip


def runtime() -> tuple[TxnRuntime, FakeLog, FakeMarkers]:
    log, markers = FakeLog(), FakeMarkers()
    rt = TxnRuntime(
        partition=0,
        epoch=NEW,
        coordinator_id=2,
        producer=FakeProducer(log),  # type: ignore[arg-type]
        bootstrap="unused:1",
        allocator=None,  # type: ignore[arg-type]
        markers=markers,  # type: ignore[arg-type]
    )
    rt._consumer = OneAtATimeConsumer(log)  # type: ignore[assignment]
    log.append(rec.marker(OLD, 1))
    log.append(prepared().record(OLD))
    return rt, log, markers


async def load(rt: TxnRuntime) -> None:
    await rt._commit(Outcome(records=[rec.marker(NEW, 2)]))
    assert rt._table.marker_epoch == NEW


async def drain(rt: TxnRuntime, log: FakeLog) -> None:
    while rt._applied < len(log.records):
        await rt._read(timeout_ms=0)


def replayed_from_scratch(log: FakeLog) -> TxnMetadata:
    """What the next owner would load (and what compaction would keep)."""
    t = TxnTable()
    last: dict[bytes, ConsumerRecord] = {}
    for r in log.records:
        t.replay(r.key, r.value, rec.epoch_of(r.headers), 0)
        if r.key is not None:
            last[r.key] = r
    kept = last[txn_key(TID)]
    assert rec.epoch_of(kept.headers) >= NEW, "the key's last record is a fenced late write"
    return t.txns[TID]


def test_fenced_late_write_behind_own_complete_is_not_repaired_with_a_stale_value() -> None:
    async def main() -> None:
        rt, log, _ = runtime()
        await load(rt)
        job = h.job_of(rt._table.txns[TID])
        # the deposed owner's CompleteCommit lands after our marker, before our own append
        log.append(
            prepared().with_(state=TxnState.COMPLETE_COMMIT, partitions=frozenset()).record(OLD)
        )
        out, _ = h.complete(rt._table, job, rt._ctx())
        await rt._commit(out)
        await drain(rt, log)
        assert rt._table.txns[TID].state is TxnState.COMPLETE_COMMIT
        assert replayed_from_scratch(log).state is TxnState.COMPLETE_COMMIT
        assert not any(
            r.key == txn_key(TID) and b"PrepareCommit" in (r.value or b"") for r in log.records[3:]
        ), "a stale PrepareCommit was restated"

    asyncio.run(main())


def test_fenced_late_write_as_the_keys_last_record_is_restated_at_the_new_epoch() -> None:
    async def main() -> None:
        rt, log, _ = runtime()
        await load(rt)
        late = prepared().with_(state=TxnState.COMPLETE_ABORT).record(OLD)
        log.append(late)
        await drain(rt, log)  # reads the late write: nothing of ours outstanding -> repair
        await drain(rt, log)
        assert log.records[-1].key == txn_key(TID)
        assert rec.epoch_of(log.records[-1].headers) == NEW
        assert rt._table.txns[TID].state is TxnState.PREPARE_COMMIT
        assert replayed_from_scratch(log).state is TxnState.PREPARE_COMMIT

    asyncio.run(main())


def test_a_prepare_without_marker_task_is_restarted_by_init_producer_id() -> None:
    async def main() -> None:
        rt, _log, markers = runtime()
        await load(rt)  # _on_loaded (which would start the task) deliberately not called
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        req = tpb.InitProducerIdRequest(
            transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        await rt._handle(Request(req, fut))
        assert fut.result().error_code == ErrorCode.CONCURRENT_TRANSACTIONS
        _, task = rt._jobs[TID]
        assert await task is True
        assert markers.written == [h.job_of(prepared())]
        posted = rt._queue.get_nowait()
        assert posted.request == h.job_of(prepared())
        await rt._handle(posted)
        assert rt._table.txns[TID].state is TxnState.COMPLETE_COMMIT
        assert TID not in rt._jobs

    asyncio.run(main())
