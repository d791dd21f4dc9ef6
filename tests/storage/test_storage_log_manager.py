"""LogManager: several log dirs, placement, reload, delete, directory locks, periodic passes."""

from __future__ import annotations

import pytest
from storage_helpers import append, make_batch, read_all

from headwater.config import TopicConfig
from headwater.errors import InvalidTopicError, KafkaStorageError
from services.broker.storage.log_manager import LogManager

pytestmark = pytest.mark.fast


def test_partitions_spread_over_log_dirs_and_reload(tmp_path, clock):
    dirs = [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]
    mgr = LogManager(dirs, clock=clock)
    cfg = TopicConfig()
    for p in range(6):
        append(mgr.get_or_create("orders-eu", p, cfg), make_batch(p + 1))
    counts = {d: len([x for x in d.iterdir() if x.is_dir()]) for d in dirs}
    assert sorted(counts.values()) == [2, 2, 2]
    assert mgr.get_or_create("orders-eu", 3, cfg) is mgr.get("orders-eu", 3)
    mgr.close()

    again = LogManager(dirs, clock=clock)
    assert again.partitions() == [("orders-eu", p) for p in range(6)]
    for p in range(6):
        log = again.get("orders-eu", p)
        assert log is not None and log.log_end_offset == p + 1
    # a new partition goes to a least-loaded dir
    again.delete("orders-eu", 0)
    home = again.log_dir_of("orders-eu", 1)
    emptier = [d for d in dirs if len(list(d.glob("orders-eu-*"))) == 1]
    assert len(emptier) == 1 and emptier[0] != home
    again.get_or_create("other", 0, cfg)
    assert again.log_dir_of("other", 0) == emptier[0]
    again.close()


def test_delete_removes_the_directory(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    log = mgr.get_or_create("t", 0, TopicConfig())
    append(log, make_batch(2))
    assert mgr.delete("t", 0) is True
    assert not (tmp_path / "d" / "t-0").exists()
    assert mgr.get("t", 0) is None and mgr.delete("t", 0) is False
    mgr.close()


def test_two_managers_cannot_share_a_log_dir(tmp_path, clock):
    mgr = LogManager([tmp_path / "a", tmp_path / "b"], clock=clock)
    with pytest.raises(KafkaStorageError):
        LogManager([tmp_path / "c", tmp_path / "b"], clock=clock)
    mgr.close()
    LogManager([tmp_path / "b"], clock=clock).close()  # free again after close


def test_unsafe_topic_names_are_refused(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    for bad in ["", "..", "a/b"]:
        with pytest.raises(InvalidTopicError):
            mgr.get_or_create(bad, 0, TopicConfig())
    mgr.close()


def test_closed_log_is_reopened_by_get_or_create(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    log = mgr.get_or_create("t", 0, TopicConfig())
    append(log, make_batch(3))
    log.close()
    assert mgr.retention_pass(clock.now) == 0 and mgr.flush_pass(clock.now) == 0  # skipped
    reopened = mgr.get_or_create("t", 0, TopicConfig())
    assert reopened is not log and reopened.log_end_offset == 3
    mgr.close()


def test_retention_and_flush_passes(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    cfg = TopicConfig(segment_bytes=1024, retention_ms=1000, flush_ms=0)
    log = mgr.get_or_create("t", 0, cfg)
    for i in range(20):
        append(log, make_batch(3, ts=clock.now - 5000, value_size=50, tag=i))
    segments = log.num_segments
    assert segments > 2
    assert mgr.retention_pass(clock.now) == segments - 1
    assert mgr.flush_pass(clock.now) == 1 and log.recovery_point == log.log_end_offset
    assert read_all(log)
    mgr.close()


def test_retention_waits_for_the_real_config_of_loaded_logs(tmp_path, clock):
    cfg = TopicConfig(segment_bytes=1024, retention_ms=-1)
    mgr = LogManager([tmp_path / "d"], clock=clock)
    log = mgr.get_or_create("t", 0, cfg)
    for i in range(10):
        append(log, make_batch(3, ts=0, value_size=100, tag=i))  # very old records
    segments = log.num_segments
    mgr.close()
    again = LogManager([tmp_path / "d"], clock=clock)  # default retention: 7 days
    assert again.retention_pass(clock.now) == 0
    assert again.get_or_create("t", 0, cfg).num_segments == segments
    assert again.retention_pass(clock.now) == 0
    again.get_or_create("t", 0, TopicConfig(segment_bytes=1024, retention_ms=1000))
    assert again.retention_pass(clock.now) == segments - 1
    again.close()


def test_lookups_do_not_wait_behind_a_log_being_created(tmp_path, monkeypatch) -> None:
    """A new log's files are created outside the manager's lock: while one creation is held
    up (its fsyncs, on a busy disk), lookups and other partitions' creations go on, and a
    second caller for the same partition gets the same log once it exists."""
    import threading

    from services.broker.storage import log_manager as lm_mod

    entered = threading.Event()
    release = threading.Event()
    real_log = lm_mod.Log

    def slow_log(path, *args, **kwargs):
        if path.name == "slow-0":
            entered.set()
            assert release.wait(20)
        return real_log(path, *args, **kwargs)

    monkeypatch.setattr(lm_mod, "Log", slow_log)
    m = LogManager([tmp_path])
    got: dict[str, object] = {}

    def create(key: str) -> None:
        got[key] = m.get_or_create("slow", 0, TopicConfig(), "id-slow")

    first = threading.Thread(target=create, args=("first",))
    first.start()
    assert entered.wait(20)
    looked_up: dict[str, object] = {}

    def lookups() -> None:
        looked_up["dir"] = m.log_dir_of("slow", 0)
        looked_up["id"] = m.topic_id("slow", 0)
        looked_up["other"] = m.get_or_create("fast", 0, TopicConfig(), "id-fast")

    other = threading.Thread(target=lookups)
    other.start()
    other.join(20)
    # done while the slow creation is still held up (before, they waited for the lock)
    assert not other.is_alive() and not release.is_set()
    assert looked_up["dir"] == tmp_path and looked_up["id"] is None
    second = threading.Thread(target=create, args=("second",))
    second.start()
    release.set()
    first.join(20)
    second.join(20)
    assert got["first"] is got["second"] is m.get("slow", 0)
    assert m.topic_id("slow", 0) == "id-slow"
    assert m.partitions() == [("fast", 0), ("slow", 0)]
    m.close()


def test_the_flush_pass_writes_changed_epoch_files_behind(tmp_path, clock, monkeypatch, caplog):
    """A new leader epoch is only in memory; the flush pass writes each changed log's
    leader-epoch file once, without fsync. A log whose write fails is logged, the others are
    written, and the next pass writes it."""
    from services.broker.storage import fileio, leader_epoch

    mgr = LogManager([tmp_path], clock=clock)
    logs = [mgr.get_or_create("t", p, TopicConfig()) for p in range(3)]
    mgr.sync_created()
    logs[0].assign_epoch(2)
    logs[2].assign_epoch(5)
    real, fsyncs = leader_epoch.write_entries, []
    failing = {logs[2].dir}

    def write(directory, entries, *, sync=True):
        if directory in failing:
            failing.discard(directory)
            raise KafkaStorageError("leader-epoch-checkpoint: EIO")
        real(directory, entries, sync=sync)

    monkeypatch.setattr(leader_epoch, "write_entries", write)
    monkeypatch.setattr(fileio.os, "fsync", lambda fd: fsyncs.append(fd))
    with caplog.at_level("WARNING", logger="services.broker.storage.log_manager"):
        assert mgr.flush_pass(clock()) == 0
    assert "leader-epoch files of 1 logs not written" in caplog.text
    assert leader_epoch.read_entries(logs[0].dir) == [leader_epoch.EpochEntry(2, 0)]
    assert leader_epoch.read_entries(logs[1].dir) == []  # unchanged: not written
    assert leader_epoch.read_entries(logs[2].dir) == []
    assert logs[2].epochs.dirty
    assert mgr.write_epochs_behind() == 1  # the next pass
    assert leader_epoch.read_entries(logs[2].dir) == [leader_epoch.EpochEntry(5, 0)]
    assert fsyncs == []
    monkeypatch.undo()
    mgr.close()


def test_the_flush_pass_looks_only_at_logs_that_changed(tmp_path, clock, monkeypatch):
    """An idle pass looks at no log; a changed log is looked at by the next pass, and one
    whose flush is due later under ``flush.ms`` stays looked at until it is flushed, with no
    further change. A log changed from another thread is seen as well."""
    from services.broker.storage.log import Log

    mgr = LogManager([tmp_path], clock=clock)
    timed = TopicConfig(flush_ms=1000)
    logs = [mgr.get_or_create("t", p, timed if p == 2 else TopicConfig()) for p in range(4)]
    mgr.sync_created()
    mgr.flush_pass(clock())  # the new logs, once
    mgr.flush_pass(clock())  # what that pass itself did to them
    looked: list[Log] = []
    real = Log.maybe_flush

    def maybe_flush(self: Log, now_ms: int) -> bool:
        looked.append(self)
        return real(self, now_ms)

    monkeypatch.setattr(Log, "maybe_flush", maybe_flush)
    assert mgr.flush_pass(clock()) == 0 and looked == []  # idle: no log looked at
    assert mgr.retention_pass(clock()) == 0  # one segment each: passed over, not "changed"
    assert mgr.flush_pass(clock()) == 0 and looked == []

    append(logs[1], make_batch(2))
    logs[3].assign_epoch(4)
    mgr.flush_pass(clock())
    assert sorted(looked, key=id) == sorted([logs[1], logs[3]], key=id)
    assert leader_epoch_entries(logs[3]) == [(4, 0)]  # written behind by that pass
    looked.clear()
    mgr.flush_pass(clock())  # their pass took their locks (maybe_flush): once more
    looked.clear()
    assert mgr.flush_pass(clock()) == 0 and looked == []

    append(logs[2], make_batch(3))  # flush.ms=1000: due in a second
    clock.advance(10)
    assert mgr.flush_pass(clock()) == 0 and looked == [logs[2]]
    clock.advance(10)
    assert mgr.flush_pass(clock()) == 0 and looked == [logs[2], logs[2]]  # not due, kept
    assert logs[2].recovery_point == 0
    clock.advance(1000)
    assert mgr.flush_pass(clock()) == 1 and logs[2].recovery_point == 3
    looked.clear()
    mgr.flush_pass(clock())
    looked.clear()
    assert mgr.flush_pass(clock()) == 0 and looked == []

    import threading

    writer = threading.Thread(target=lambda: append(logs[0], make_batch(1)))
    writer.start()
    writer.join()
    mgr.flush_pass(clock())
    assert looked == [logs[0]]
    monkeypatch.undo()
    mgr.close()


def test_a_failed_flush_keeps_the_log_for_the_next_pass(tmp_path, clock, monkeypatch):
    """A flush that raises leaves its log (and the logs not reached) for the next pass."""
    from services.broker.storage.log import Log

    mgr = LogManager([tmp_path], clock=clock)
    log = mgr.get_or_create("t", 0, TopicConfig(flush_ms=0))
    mgr.sync_created()
    mgr.flush_pass(clock())
    append(log, make_batch(2))
    real = Log.flush

    def failing(self: Log) -> None:
        raise KafkaStorageError("EIO")

    monkeypatch.setattr(Log, "flush", failing)
    with pytest.raises(KafkaStorageError):
        mgr.flush_pass(clock())
    monkeypatch.setattr(Log, "flush", real)
    assert mgr.flush_pass(clock()) == 1 and log.recovery_point == 2
    mgr.close()


def leader_epoch_entries(log):
    from services.broker.storage import leader_epoch

    return [(e.epoch, e.start_offset) for e in leader_epoch.read_entries(log.dir)]


def test_a_burst_of_new_epochs_is_written_behind_over_several_passes(tmp_path, clock, monkeypatch):
    """A failover's thousands of new epochs: each pass writes at most EPOCH_WRITES_PER_PASS
    files, oldest change first, and the rest stay for the next passes until all are written;
    a flush that moves a log's recovery point writes (and fsyncs) its file itself."""
    from services.broker.storage import leader_epoch, log_manager

    monkeypatch.setattr(log_manager, "EPOCH_WRITES_PER_PASS", 2)
    mgr = LogManager([tmp_path], clock=clock)
    logs = [mgr.get_or_create("t", p, TopicConfig()) for p in range(5)]
    mgr.sync_created()
    mgr.flush_pass(clock())
    mgr.flush_pass(clock())
    for epoch, log in enumerate(logs, start=1):
        log.assign_epoch(epoch)

    def on_file() -> list[int]:
        return [p for p, log in enumerate(logs) if leader_epoch.read_entries(log.dir)]

    mgr.flush_pass(clock())
    assert on_file() == [0, 1]
    mgr.flush_pass(clock())
    assert on_file() == [0, 1, 2, 3]
    logs[4].flush()  # a flush does not wait for the pass
    assert on_file() == [0, 1, 2, 3, 4]
    mgr.flush_pass(clock())
    assert all(not log.epochs.dirty for log in logs)
    for epoch, log in enumerate(logs, start=1):
        assert leader_epoch.read_entries(log.dir) == [leader_epoch.EpochEntry(epoch, 0)]
    mgr.close()
