"""Leader-epoch cache: Kafka's endOffsetFor rules, truncation, persistence and rebuild, and
how ``Log`` keeps it (leader appends, follower appends, truncation, retention)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from headwater.batch import encode_batch, iter_headers, validate_batches
from headwater.config import TopicConfig
from headwater.errors import CorruptRecordError, InvalidRequestError
from services.broker.storage import fileio, leader_epoch
from services.broker.storage.leader_epoch import (
    EPOCH_FILE,
    EpochEntry,
    LeaderEpochCache,
    read_entries,
)
from services.broker.storage.log import Log
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.fast


def batch(n: int = 2, tag: int = 0) -> bytes:
    return encode_batch(
        [f"{tag}:{i}".encode() for i in range(n)], timestamps=[1000 + i for i in range(n)]
    )


def hdrs(buf: bytes) -> list:
    return validate_batches(buf, max_batch_bytes=1 << 26)


def replicated(buf: bytes) -> list:
    return list(iter_headers(buf))


def leader_append(log: Log, buf: bytes, epoch: int) -> None:
    log.append(buf, hdrs(buf), epoch)


def read_all(log: Log) -> bytes:
    out, pos = bytearray(), log.log_start_offset
    while pos < log.log_end_offset:
        s = log.read(pos, 1 << 20)
        out += s.data
        pos = s.next_offset
    return bytes(out)


def cache_with(tmp_path: Path, *pairs: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache(tmp_path)
    for e, s in pairs:
        c.assign(e, s)
    return c


def test_end_offset_for_follows_kafka_rules(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    assert c.end_offset_for(6, 40) == (6, 40)  # latest epoch: ends at the log end
    assert c.end_offset_for(3, 40) == (3, 25)
    assert c.end_offset_for(4, 40) == (3, 25)  # unknown epoch: the largest below it
    assert c.end_offset_for(0, 40) == (0, 0)  # below every entry: the first start
    assert c.end_offset_for(7, 40) == (-1, -1)  # above every entry
    assert c.end_offset_for(-1, 40) == (-1, -1)
    assert LeaderEpochCache(tmp_path / "x").end_offset_for(2, 5) == (-1, -1)


def test_assign_keeps_first_start_and_drops_contradicting_entries(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (1, 0), (2, 5))
    assert not c.assign(2, 9)  # same epoch again: its start stays 5
    assert c.assign(4, 8)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 5), EpochEntry(4, 8)]
    assert c.assign(3, 6)  # a log truncated under epoch 4: entries >= 3 or starting > 6 go
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 5), EpochEntry(3, 6)]


def test_truncation_from_end_and_start(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (1, 0), (3, 10), (6, 25))
    c.truncate_from_end(25)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 10)]
    c.truncate_from_start(12)
    assert c.entries == [EpochEntry(3, 12)]
    c.truncate_from_start(12)
    assert c.entries == [EpochEntry(3, 12)]
    assert read_entries(tmp_path) == [EpochEntry(3, 12)]  # persisted on every change


@pytest.mark.parametrize(
    "content", ["", "0\n2\n1 0\n", "1\n1\n1 0\n", "0\n2\n3 0\n1 5\n", "0\n1\nx y\n", "0\n1\n-4 0\n"]
)
def test_damaged_files_read_as_absent(tmp_path: Path, content: str) -> None:
    (tmp_path / EPOCH_FILE).write_text(content)
    assert read_entries(tmp_path) is None


def test_leader_appends_record_the_first_offset_of_each_epoch(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", TopicConfig())
    leader_append(log, batch(3), 0)
    leader_append(log, batch(2), 0)
    log.assign_epoch(2)  # became leader of epoch 2 at LEO 5
    leader_append(log, batch(4), 2)
    leader_append(log, batch(1), 5)
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(5, 9)]
    assert log.end_offset_for_epoch(2) == (2, 9)
    assert log.end_offset_for_epoch(3) == (2, 9)
    assert log.end_offset_for_epoch(5) == (5, 10)
    log.close()


def test_follower_append_keeps_leader_bytes_and_history(tmp_path: Path) -> None:
    leader = Log(tmp_path / "a" / "t-0", TopicConfig())
    follower = Log(tmp_path / "b" / "t-0", TopicConfig())
    leader_append(leader, batch(3), 1)
    leader_append(leader, batch(2, tag=1), 1)
    leader_append(leader, batch(2, tag=2), 4)
    data = read_all(leader)
    follower.append_as_follower(data, replicated(data))
    assert read_all(follower) == data
    assert follower.epochs.entries == leader.epochs.entries == [EpochEntry(1, 0), EpochEntry(4, 5)]
    # a gap, a repeat, or a damaged batch is refused and writes nothing
    with pytest.raises(InvalidRequestError):
        follower.append_as_follower(data, replicated(data))
    leader_append(leader, batch(1), 4)
    tail = leader.read(7, 1 << 20).data
    bad = bytearray(tail)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(bad), replicated(tail))
    assert follower.log_end_offset == 7
    follower.append_as_follower(tail, replicated(tail))
    assert read_all(follower) == read_all(leader)
    leader.close()
    follower.close()


def test_a_follower_append_on_the_loop_declines_a_held_log_and_takes_a_new_epoch(
    tmp_path: Path,
) -> None:
    """Log.append_as_follower_if_uncontended (a follower's small appends on the event loop)
    appends as append_as_follower does, the first batches of a new leader epoch included (the
    entry is kept in memory: no file), but leaves to a worker thread (None, nothing written)
    a log another thread holds."""
    leader = Log(tmp_path / "a" / "t-0", TopicConfig())
    follower = Log(tmp_path / "b" / "t-0", TopicConfig())
    follower.epochs.flush()  # the follower's file as a flush left it: no entry
    leader_append(leader, batch(3), 1)
    first = read_all(leader)
    info = follower.append_as_follower_if_uncontended(first, replicated(first))
    assert info is not None and follower.log_end_offset == 3
    assert follower.epochs.entries == [EpochEntry(1, 0)]
    assert read_entries(follower.dir) == []  # written behind, not by the append
    leader_append(leader, batch(2, tag=1), 1)
    same_epoch = leader.read(3, 1 << 20).data
    info = follower.append_as_follower_if_uncontended(same_epoch, replicated(same_epoch))
    assert info is not None and info.first_offset == 3 and follower.log_end_offset == 5
    # checked like append_as_follower: a repeat is refused and writes nothing
    with pytest.raises(InvalidRequestError):
        follower.append_as_follower_if_uncontended(same_epoch, replicated(same_epoch))
    leader_append(leader, batch(1, tag=2), 1)
    tail = leader.read(5, 1 << 20).data
    results: list[object] = []
    with follower._lock:  # another thread's flush pass would hold it (the lock is reentrant)
        held = threading.Thread(
            target=lambda: results.append(
                follower.append_as_follower_if_uncontended(tail, replicated(tail))
            )
        )
        held.start()
        held.join(10)
    assert results == [None] and follower.log_end_offset == 5
    leader_append(leader, batch(1, tag=3), 4)
    new_epoch = leader.read(5, 1 << 20).data  # epoch 1's batch, then epoch 4's
    assert follower.append_as_follower_if_uncontended(new_epoch, replicated(new_epoch))
    assert read_all(follower) == read_all(leader)
    assert follower.epochs.entries == leader.epochs.entries == [EpochEntry(1, 0), EpochEntry(4, 6)]
    assert follower.write_epochs_behind()
    assert read_entries(follower.dir) == follower.epochs.entries
    leader.close()
    follower.close()


def test_truncation_and_retention_cut_the_cache(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", TopicConfig(segment_bytes=200))
    for epoch in (0, 0, 1, 1, 3, 3):
        leader_append(log, batch(2, tag=epoch), epoch)
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 4), EpochEntry(3, 8)]
    log.truncate_to(8)
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 4)]
    assert log.end_offset_for_epoch(1) == (1, 8)
    log.truncate_fully_and_start_at(20)
    assert log.epochs.entries == []
    assert log.latest_epoch == -1
    log.close()


def test_retention_moves_the_first_entry_to_the_log_start(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", TopicConfig(segment_bytes=1, retention_bytes=0))
    for epoch in (0, 0, 2):
        leader_append(log, batch(2, tag=epoch), epoch)
    assert log.delete_retention(0) >= 1
    start = log.log_start_offset
    assert start > 0
    assert log.epochs.entries[0].start_offset == start
    log.close()


def test_missing_or_damaged_file_is_rebuilt_from_batch_headers(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    for epoch in (0, 2, 2, 7):
        leader_append(log, batch(2, tag=epoch), epoch)
    expected = log.epochs.entries
    log.close()
    (d / EPOCH_FILE).unlink()
    again = Log(d, TopicConfig())
    assert again.epochs.entries == expected
    again.close()
    (d / EPOCH_FILE).write_text("garbage")
    third = Log(d, TopicConfig())
    assert (
        third.epochs.entries == expected == [EpochEntry(0, 0), EpochEntry(2, 2), EpochEntry(7, 6)]
    )
    assert read_entries(d) == expected
    third.close()


def test_entries_past_a_recovered_log_end_are_dropped_at_open(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    log.close()
    # the process wrote the epoch entry but died before the batch reached the disk
    (d / EPOCH_FILE).write_text("0\n2\n0 0\n5 2\n")
    again = Log(d, TopicConfig())
    assert again.epochs.entries == [EpochEntry(0, 0)]
    again.close()


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = fileio.os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(fileio.os, "fsync", counting)
    return calls


def test_new_epochs_write_no_file_until_written_behind_or_synced_by_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new leadership and a follower's first batch of a new epoch change only the memory;
    write_epochs_behind (the flush pass) writes the file once without fsync, and a flush
    fsyncs it before the recovery point moves past the entries."""
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    log.flush()
    writes = _count_writes(monkeypatch)
    fsyncs = _count_fsyncs(monkeypatch)
    log.assign_epoch(3)  # a new leadership
    leader_append(log, batch(2, tag=1), 3)
    follower_batch = _epoch_batch(4, 4)
    log.append_as_follower(follower_batch, replicated(follower_batch))  # as a follower
    assert writes == [] and fsyncs == []
    assert read_entries(d) == [EpochEntry(0, 0)]
    assert log.epochs.dirty and log.epochs.unsynced
    assert log.end_offset_for_epoch(3) == (3, 4)  # answered from memory
    assert log.write_epochs_behind()
    assert not log.write_epochs_behind()  # up to date: nothing more to write
    assert len(writes) == 1 and fsyncs == []
    assert read_entries(d) == [EpochEntry(0, 0), EpochEntry(3, 2), EpochEntry(4, 4)]
    assert not log.epochs.dirty and log.epochs.unsynced
    log.flush()  # before the recovery point moves past them, the entries are fsynced
    assert not log.epochs.unsynced
    assert len(writes) == 2 and len(fsyncs) >= 2  # the tmp file and its directory
    log.close()
    assert len(writes) == 2  # close found the file durable


def _count_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[EpochEntry]]:
    calls: list[list[EpochEntry]] = []
    real = leader_epoch.write_entries

    def counting(directory: Path, entries: Any, *, sync: bool = True) -> None:
        items = list(entries)
        calls.append(items)
        real(directory, items, sync=sync)

    monkeypatch.setattr(leader_epoch, "write_entries", counting)
    return calls


def _epoch_batch(epoch: int, base: int) -> bytes:
    """A batch as a leader of ``epoch`` wrote it at ``base``."""
    return encode_batch(
        [b"x", b"y"], timestamps=[1000, 1001], base_offset=base, partition_leader_epoch=epoch
    )


def test_unclean_open_adds_epochs_the_file_lost_from_the_headers(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    log.flush()  # recovery point 2, file [(0, 0)] durable
    durable = (d / EPOCH_FILE).read_text()
    log.assign_epoch(3)
    leader_append(log, batch(2, tag=1), 3)
    leader_append(log, batch(2, tag=2), 5)
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 2), EpochEntry(5, 4)]
    log.close(mark_clean=False)
    # a power loss kept the log's tail but not the unsynced checkpoint
    (d / EPOCH_FILE).write_text(durable)
    again = Log(d, TopicConfig())
    assert again.epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 2), EpochEntry(5, 4)]
    assert read_entries(d) == again.epochs.entries
    assert not again.epochs.unsynced
    again.close()


def test_clean_open_trusts_the_file(tmp_path: Path) -> None:
    """Only an unclean shutdown completes the file from the headers: after a clean close the
    file is complete (close fsyncs it), so a hand-edited one is taken as it is."""
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    leader_append(log, batch(2, tag=1), 3)
    log.close()
    assert read_entries(d) == [EpochEntry(0, 0), EpochEntry(3, 2)]
    (d / EPOCH_FILE).write_text("0\n1\n0 0\n")
    again = Log(d, TopicConfig())
    assert again.epochs.entries == [EpochEntry(0, 0)]
    again.close()


class _WatchedLock:
    """A lock that records who is about to wait for it (a test's view of the file lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting: list[str] = []

    def __enter__(self) -> None:
        self.waiting.append(threading.current_thread().name)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_write_behind_never_overtakes_a_truncation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush pass writes a cache's file without the log's lock. A truncation (under the
    log's lock) that removes an entry while that write is under way must have the last word:
    the file must not claim the removed entry afterwards."""
    c = cache_with(tmp_path, (0, 0), (3, 5))
    c.flush()
    c.assign(5, 10)  # in memory; the flush pass is about to write it behind
    lock = _WatchedLock()
    c._file_lock = lock  # type: ignore[assignment]
    started, release = threading.Event(), threading.Event()
    real = leader_epoch.write_entries

    def slow_behind(directory: Path, entries: Any, *, sync: bool = True) -> None:
        items = list(entries)
        if not sync:  # the write behind: it has taken its entries, now it stalls
            started.set()
            assert release.wait(20)
        real(directory, items, sync=sync)

    monkeypatch.setattr(leader_epoch, "write_entries", slow_behind)
    behind = threading.Thread(target=c.write_behind, name="behind")
    behind.start()
    assert started.wait(20)
    cut = threading.Thread(target=c.truncate_from_end, args=(10,), name="truncation")
    cut.start()
    wait_for(
        lambda: "truncation" in lock.waiting or not cut.is_alive(),
        timeout=20,
        what="the truncation to reach the file lock",
    )
    release.set()
    behind.join(20)
    cut.join(20)
    assert not behind.is_alive() and not cut.is_alive()
    assert c.entries == [EpochEntry(0, 0), EpochEntry(3, 5)]
    assert read_entries(tmp_path) == c.entries
    assert not c.dirty and not c.unsynced
    # a write that waited for the file lock writes what the memory holds once it has it
    c.assign(7, 10)
    lock.waiting.clear()
    lock._lock.acquire()  # another write under way
    waited = threading.Thread(target=c.write_behind, name="waited")
    waited.start()
    wait_for(lambda: "waited" in lock.waiting, timeout=20, what="the write to wait")
    c.assign(8, 12)  # a follower's next new epoch meanwhile
    lock._lock.release()
    waited.join(20)
    assert not waited.is_alive()
    assert read_entries(tmp_path) == c.entries
    assert c.entries == [EpochEntry(0, 0), EpochEntry(3, 5), EpochEntry(7, 10), EpochEntry(8, 12)]
    assert not c.dirty


def test_a_closed_or_deleted_log_writes_nothing_behind(tmp_path: Path) -> None:
    """A deleted log's directory may be taken by a new log of the same name at once: the old
    cache's pending entries must never be written there."""
    d = tmp_path / "t-0"
    old = Log(d, TopicConfig())
    leader_append(old, batch(2), 4)
    assert old.epochs.dirty
    old.delete()
    new = Log(d, TopicConfig())  # the topic created again
    assert not old.write_epochs_behind()
    assert not old.epochs.write_behind()  # even asked directly
    assert read_entries(d) == [] and new.epochs.entries == []
    new.close()
    c = cache_with(tmp_path / "c", (1, 0))
    (tmp_path / "c").mkdir()
    c.close()
    assert not c.write_behind()
    assert read_entries(tmp_path / "c") is None


@pytest.mark.parametrize("file_at_crash", ["never written", "written behind", "power loss"])
def test_a_crash_before_the_epoch_file_is_synced_keeps_every_epoch_with_offsets(
    tmp_path: Path, file_at_crash: str
) -> None:
    """The process dies (no clean close) after new epochs that only the memory had: their
    entries come back from the batch headers, an epoch without a batch is not claimed (its
    start is the log end: no offset of the log is in it), and once a new leadership starts
    every OffsetForLeaderEpoch answer ends where the same log's answer without the crash
    ends."""
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    log.flush()  # recovery point 2; the file [(0, 0)] durable
    durable = (d / EPOCH_FILE).read_text()
    log.assign_epoch(3)  # a new leadership
    leader_append(log, batch(2, tag=1), 3)
    follower_batch = _epoch_batch(4, 4)
    log.append_as_follower(follower_batch, replicated(follower_batch))
    log.assign_epoch(6)  # leader again, killed before its first batch
    assert log.epochs.entries == [
        EpochEntry(0, 0),
        EpochEntry(3, 2),
        EpochEntry(4, 4),
        EpochEntry(6, 6),
    ]
    if file_at_crash != "never written":
        assert log.write_epochs_behind()
        assert read_entries(d) == log.epochs.entries
    log.close(mark_clean=False)  # kill -9
    if file_at_crash == "power loss":
        (d / EPOCH_FILE).write_text(durable)  # the page cache lost the unsynced file
    again = Log(d, TopicConfig())
    assert again.epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 2), EpochEntry(4, 4)]
    assert read_entries(d) == again.epochs.entries  # what the file holds after the open
    # no crash: the same history in a log that stayed up
    same = Log(tmp_path / "same", TopicConfig())
    leader_append(same, batch(2), 0)
    same.assign_epoch(3)
    leader_append(same, batch(2, tag=1), 3)
    same.append_as_follower(follower_batch, replicated(follower_batch))
    same.assign_epoch(6)
    for lg in (again, same):
        lg.assign_epoch(7)  # the controller's next leadership after the restart
    for epoch in range(9):
        got, want = again.end_offset_for_epoch(epoch), same.end_offset_for_epoch(epoch)
        assert got[1] == want[1], epoch
        if epoch != 6:  # epoch 6 has no batch: answered as the epoch before it, same end
            assert got == want, epoch
    assert read_all(again) == read_all(same)
    again.close()
    same.close()
