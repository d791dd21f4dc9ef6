"""Leader-epoch cache: Kafka's endOffsetFor rules, truncation, persistence and rebuild, and
how ``Log`` keeps it (leader appends, follower appends, truncation, retention)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from headwater.batch import encode_batch, iter_headers, validate_batches
from headwater.config import TopicConfig
from headwater.errors import CorruptRecordError, InvalidRequestError
from services.broker.storage import fileio
from services.broker.storage.leader_epoch import (
    EPOCH_FILE,
    EpochEntry,
    LeaderEpochCache,
    read_entries,
)
from services.broker.storage.log import Log

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


def test_a_follower_append_on_the_loop_declines_a_new_epoch_and_a_held_log(
    tmp_path: Path,
) -> None:
    """Log.append_as_follower_if_uncontended (a follower's small appends on the event loop)
    appends as append_as_follower does, but leaves to a worker thread (None, nothing written)
    a batch that would add a leader-epoch entry (a file) and a log another thread holds."""
    leader = Log(tmp_path / "a" / "t-0", TopicConfig())
    follower = Log(tmp_path / "b" / "t-0", TopicConfig())
    leader_append(leader, batch(3), 1)
    first = read_all(leader)
    assert follower.append_as_follower_if_uncontended(first, replicated(first)) is None
    assert follower.log_end_offset == 0 and follower.epochs.entries == []
    follower.append_as_follower(first, replicated(first))  # the worker-thread path
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
    assert follower.append_as_follower_if_uncontended(new_epoch, replicated(new_epoch)) is None
    assert follower.log_end_offset == 5
    follower.append_as_follower(new_epoch, replicated(new_epoch))
    assert read_all(follower) == read_all(leader)
    assert follower.epochs.entries == leader.epochs.entries == [EpochEntry(1, 0), EpochEntry(4, 6)]
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


def test_new_epochs_are_written_without_fsync_and_synced_by_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig())
    leader_append(log, batch(2), 0)
    log.flush()
    fsyncs = _count_fsyncs(monkeypatch)
    log.assign_epoch(3)  # a new leadership
    leader_append(log, batch(2, tag=1), 3)
    follower_batch = _epoch_batch(4, 4)
    log.append_as_follower(follower_batch, replicated(follower_batch))  # as a follower
    assert fsyncs == []
    assert read_entries(d) == [EpochEntry(0, 0), EpochEntry(3, 2), EpochEntry(4, 4)]
    assert log.epochs.unsynced
    log.flush()  # before the recovery point moves past them, the entries are fsynced
    assert not log.epochs.unsynced
    assert len(fsyncs) >= 2  # the checkpoint's tmp file and its directory (then segments)
    log.close()


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
