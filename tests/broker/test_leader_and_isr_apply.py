"""How a broker applies one LeaderAndIsr: its partitions concurrently, each partition's states
in request order, every new leadership's epoch in the leader-epoch cache before the answer
(in memory: no file or thread per partition in a failover; the flush pass writes the files
behind)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from headwater.errors import KafkaStorageError
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker import partition as partition_mod
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.storage.leader_epoch import EpochEntry, read_entries
from services.broker.storage.log import Log
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, assignment, request
from tests.helpers.wait import async_wait_for


def _manager(tmp_path: Path) -> ReplicaManager:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    return rm


def test_new_leaderships_write_no_file_and_the_flush_pass_writes_them_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four new leaderships in one request: each starts its epoch in memory without a worker
    thread; the leader-epoch files are written by the next flush pass, once each."""
    parties = 4
    rm = _manager(tmp_path)
    resp = asyncio.run(rm.leader_and_isr(request(*(assignment("t", p, 0) for p in range(parties)))))
    assert resp.error_code == ErrorCode.NONE
    assert rm.log_manager.write_epochs_behind() == parties  # epoch 0 of each, on file
    hops: list[str] = []
    real = asyncio.to_thread

    async def to_thread(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(partition_mod.asyncio, "to_thread", to_thread)
    req = request(*(assignment("t", p, 1) for p in range(parties)))  # a failover's new epoch
    resp = asyncio.run(rm.leader_and_isr(req))
    assert [(r.partition, r.error_code) for r in resp.partitions] == [
        (p, ErrorCode.NONE) for p in range(parties)
    ]
    assert "assign_epoch" not in hops  # (the request's one write-back hop aside)
    parts = [rm.partitions[("t", p)] for p in range(parties)]
    for part in parts:
        assert part.is_leader and part.leader_epoch == 1
        assert part.log.epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 0)]
        assert read_entries(part.log.dir) == [EpochEntry(0, 0)]  # written behind, later
    assert rm.log_manager.write_epochs_behind() == parties
    assert rm.log_manager.write_epochs_behind() == 0
    for part in parts:
        assert read_entries(part.log.dir) == part.log.epochs.entries


def test_one_partitions_states_apply_in_request_order(tmp_path: Path) -> None:
    """A partition named twice: epoch 1 after epoch 0 applies both; epoch 0 after epoch 1 is
    refused as older, while other partitions of the request are applied."""
    rm = _manager(tmp_path)
    resp = asyncio.run(
        rm.leader_and_isr(
            request(assignment("a", 0, 0), assignment("b", 0, 0), assignment("a", 0, 1))
        )
    )
    assert [r.error_code for r in resp.partitions] == [ErrorCode.NONE] * 3
    assert rm.partitions[("a", 0)].leader_epoch == 1
    assert [e.epoch for e in rm.partitions[("a", 0)].log.epochs.entries] == [0, 1]

    resp = asyncio.run(
        rm.leader_and_isr(
            request(assignment("c", 0, 3), assignment("d", 0, 0), assignment("c", 0, 2))
        )
    )
    assert [(r.topic, r.error_code) for r in resp.partitions] == [
        ("c", ErrorCode.NONE),
        ("d", ErrorCode.NONE),
        ("c", ErrorCode.STALE_CONTROLLER_EPOCH),
    ]
    assert rm.partitions[("c", 0)].leader_epoch == 3
    assert rm.partitions[("d", 0)].is_leader


def test_a_cancelled_request_is_applied_once_and_its_resend_finds_it_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's deadline cancels a LeaderAndIsr while its partitions' logs are being
    created: the application goes on, and the resend (queued behind it) creates nothing
    again and answers every partition as applied."""
    parts = 3
    created: list[tuple[str, int]] = []
    release = threading.Event()
    get_or_create = LogManager.get_or_create

    def slow_create(self: LogManager, topic: str, partition: int, *args: object) -> Log:
        created.append((topic, partition))
        assert release.wait(20)
        return get_or_create(self, topic, partition, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LogManager, "get_or_create", slow_create)
    rm = _manager(tmp_path)
    req = request(*(assignment("t", p, 0) for p in range(parts)))

    async def scenario() -> broker_pb2.LeaderAndIsrResponse:
        first = asyncio.create_task(rm.leader_and_isr(req))

        async def all_started() -> bool:
            return len(created) == parts

        await async_wait_for(all_started, timeout=20, what="every log creation started")
        first.cancel()  # the RPC's deadline
        with pytest.raises(asyncio.CancelledError):
            await first
        release.set()
        return await rm.leader_and_isr(req)  # the controller's resend

    resp = asyncio.run(scenario())
    assert [(r.partition, r.error_code) for r in resp.partitions] == [
        (p, ErrorCode.NONE) for p in range(parts)
    ]
    assert sorted(created) == [("t", p) for p in range(parts)]  # each created once
    for p in range(parts):
        part = rm.partitions[("t", p)]
        assert part.is_leader and part.leader_epoch == 0
        assert part.log.epochs.entries == [EpochEntry(0, 0)]


def test_a_request_logs_its_partition_states_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One INFO line per LeaderAndIsr names every partition state it applied, in request
    order (a failover's thousand states were a thousand log calls on the event loop); a
    refused state (an older leader epoch) is not in it."""
    rm = _manager(tmp_path)
    req = request(*(assignment("t", p, 1) for p in range(3)), assignment("t", 1, 0))
    with caplog.at_level("INFO", logger="services.broker.replica_manager"):
        resp = asyncio.run(rm.leader_and_isr(req))
    assert resp.error_code == ErrorCode.NONE
    lines = [r.getMessage() for r in caplog.records if "partition states" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("LeaderAndIsr: 3 partition states: Partition(t-0 leader epoch=1")
    assert lines[0].index("t-0") < lines[0].index("t-1") < lines[0].index("t-2")
    assert lines[0].count(f"(replicas [{ME}], isr [{ME}])") == 3
    assert resp.partitions[3].error_code != ErrorCode.NONE  # epoch 0 after epoch 1


def test_a_hosted_partition_whose_leadership_cannot_be_written_goes_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader-epoch checkpoint of a new leadership fails with an I/O error: the answer is
    KAFKA_STORAGE_ERROR and the partition does not go on leading (taking acks=1 produce the
    controller moved away) but is offline, answering NOT_LEADER_OR_FOLLOWER; a later
    LeaderAndIsr that applies brings it back."""
    rm = _manager(tmp_path)
    resp = asyncio.run(rm.leader_and_isr(request(assignment("t", 0, 0))))
    assert resp.partitions[0].error_code == ErrorCode.NONE
    assign = Log.assign_epoch

    def failing(self: Log, epoch: int) -> None:
        raise KafkaStorageError("leader-epoch checkpoint: EIO")

    monkeypatch.setattr(Log, "assign_epoch", failing)
    resp = asyncio.run(rm.leader_and_isr(request(assignment("t", 0, 1))))
    assert resp.partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    p = rm.partitions[("t", 0)]
    assert not p.is_leader
    with pytest.raises(KafkaStorageError):
        rm.leader_partition("t", 0)  # produce, fetch, replica fetch, list offsets
    with pytest.raises(KafkaStorageError):
        p.check_writable(acks_all=False)

    monkeypatch.setattr(Log, "assign_epoch", assign)
    resp = asyncio.run(rm.leader_and_isr(request(assignment("t", 0, 1))))
    assert resp.partitions[0].error_code == ErrorCode.NONE
    assert rm.leader_partition("t", 0) is p and p.is_leader and p.leader_epoch == 1
    assert [e.epoch for e in p.log.epochs.entries] == [0, 1]


def test_new_partitions_whose_write_back_fails_are_answered_with_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new partition's files are written back by one syncfs after the request
    (``LogManager.sync_created``). When that fails (EIO), the new partitions of that log
    directory must not be answered NONE and go on leading on files that may not survive a
    power loss (an error of the fsyncs it replaced failed the partition): KAFKA_STORAGE_ERROR
    and offline; the controller's resend writes them back again and brings them up."""
    from services.broker.storage import fileio

    rm = _manager(tmp_path)
    assert asyncio.run(rm.leader_and_isr(request(assignment("t", 0, 0)))).partitions[
        0
    ].error_code == (ErrorCode.NONE)
    calls: list[Path] = []

    def failing(path: Path) -> None:
        calls.append(path)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio, "sync_filesystem", failing)
    req = request(assignment("t", 0, 0), assignment("t", 1, 0))
    resp = asyncio.run(rm.leader_and_isr(req))
    assert calls == [tmp_path]
    # the hosted partition was not created by this request: applied; the new one failed
    assert [(r.partition, r.error_code) for r in resp.partitions] == [
        (0, ErrorCode.NONE),
        (1, ErrorCode.KAFKA_STORAGE_ERROR),
    ]
    p = rm.partitions[("t", 1)]
    assert not p.is_leader
    with pytest.raises(KafkaStorageError):
        rm.leader_partition("t", 1)

    synced: list[Path] = []
    monkeypatch.setattr(fileio, "sync_filesystem", synced.append)
    resp = asyncio.run(rm.leader_and_isr(req))
    assert [r.error_code for r in resp.partitions] == [ErrorCode.NONE, ErrorCode.NONE]
    assert synced == [tmp_path]  # written back by the resend
    assert rm.leader_partition("t", 1) is p and p.is_leader
