"""Topic ids on disk (``partition.metadata``) and the checks built on them (issue 15 item 6):
a log is never handed out, or kept at start, under another topic id than the cluster's."""

from __future__ import annotations

import os
import uuid

import pytest
from storage_helpers import append, make_batch, read_all

from headwater.config import TopicConfig
from headwater.errors import KafkaStorageError
from services.broker.storage import fileio, partition_metadata
from services.broker.storage.fileio import DELETE_SUFFIX
from services.broker.storage.log_manager import LogManager

pytestmark = pytest.mark.fast

OLD = uuid.uuid4().hex
NEW = uuid.uuid4().hex


def _filled(mgr: LogManager, topic: str, partition: int, topic_id: str, n: int = 3) -> None:
    log = mgr.get_or_create(topic, partition, TopicConfig(), topic_id)
    for _ in range(n):
        append(log, make_batch(1))


def test_new_log_stores_its_topic_id_in_kafkas_format(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "t", 0, OLD)
    pdir = tmp_path / "d" / "t-0"
    assert (pdir / "partition.metadata").read_text() == f"version: 0\ntopic_id: {OLD}\n"
    assert not list(pdir.glob("*.tmp"))
    assert mgr.topic_id("t", 0) == OLD
    mgr.close()
    again = LogManager([tmp_path / "d"], clock=clock)
    assert again.topic_id("t", 0) == OLD
    again.close()


def test_get_or_create_replaces_a_log_of_another_topic_id(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "t", 0, OLD, n=5)
    mgr.close()
    again = LogManager([tmp_path / "d"], clock=clock)
    assert again.get("t", 0).log_end_offset == 5  # type: ignore[union-attr]
    same = again.get_or_create("t", 0, TopicConfig(), OLD)
    assert same.log_end_offset == 5  # the same topic: kept
    fresh = again.get_or_create("t", 0, TopicConfig(), NEW)
    assert fresh is not same and same.closed
    assert fresh.log_end_offset == 0 and fresh.log_start_offset == 0 and read_all(fresh) == b""
    assert again.topic_id("t", 0) == NEW
    assert append(fresh, make_batch(1)).first_offset == 0
    assert partition_metadata.read_topic_id(tmp_path / "d" / "t-0") == NEW
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [".lock", "t-0"]
    again.close()


def test_a_directory_without_id_adopts_the_clusters(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "legacy", 0, "", n=4)  # as written before topic ids were stored
    _filled(mgr, "legacy", 1, "", n=2)
    mgr.close()
    assert not (tmp_path / "d" / "legacy-0" / "partition.metadata").exists()
    again = LogManager([tmp_path / "d"], clock=clock)
    assert again.topic_id("legacy", 0) is None
    assert again.get_or_create("legacy", 0, TopicConfig(), NEW).log_end_offset == 4
    assert again.topic_id("legacy", 0) == NEW
    assert again.remove_stale({("legacy", 0): NEW, ("legacy", 1): NEW}) == []
    assert partition_metadata.read_topic_id(tmp_path / "d" / "legacy-1") == NEW
    assert again.get("legacy", 1).log_end_offset == 2  # type: ignore[union-attr]
    again.close()


def test_remove_stale_deletes_deleted_recreated_and_moved_partitions(tmp_path, clock):
    mgr = LogManager([tmp_path / "d0", tmp_path / "d1"], clock=clock)
    _filled(mgr, "kept", 0, OLD)
    _filled(mgr, "deleted", 0, OLD)
    _filled(mgr, "recreated", 0, OLD)
    _filled(mgr, "moved", 0, OLD)
    _filled(mgr, "unreadable", 0, OLD)
    _filled(mgr, "gone-legacy", 0, "")
    mgr.close()

    again = LogManager([tmp_path / "d0", tmp_path / "d1"], clock=clock)
    expected = {("kept", 0): OLD, ("recreated", 0): NEW, ("moved", 1): OLD}
    removed = again.remove_stale(expected, unknown_topics={"unreadable"})
    assert removed == [("deleted", 0), ("gone-legacy", 0), ("moved", 0), ("recreated", 0)]
    assert again.partitions() == [("kept", 0), ("unreadable", 0)]
    on_disk = sorted(p.name for d in ("d0", "d1") for p in (tmp_path / d).iterdir() if p.is_dir())
    assert on_disk == ["kept-0", "unreadable-0"]
    assert again.get("kept", 0).log_end_offset == 3  # type: ignore[union-attr]
    # the re-created topic starts from nothing
    assert again.get_or_create("recreated", 0, TopicConfig(), NEW).log_end_offset == 0
    again.close()


def test_remove_stale_leaves_logs_already_handed_out(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "t", 0, OLD)
    assert mgr.remove_stale({}) == []  # opened by get_or_create: the controller's business
    assert mgr.get("t", 0) is not None
    mgr.close()


def test_an_interrupted_deletion_is_finished_at_start(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "t", 0, OLD)
    mgr.close()
    aside = tmp_path / "d" / f"t-0.{uuid.uuid4().hex}{DELETE_SUFFIX}"
    os.rename(tmp_path / "d" / "t-0", aside)  # a crash after the rename, before the rmtree
    again = LogManager([tmp_path / "d"], clock=clock)
    assert again.partitions() == [] and not aside.exists()
    again.close()


def test_damaged_partition_metadata_is_a_storage_error(tmp_path, clock):
    mgr = LogManager([tmp_path / "d"], clock=clock)
    _filled(mgr, "t", 0, OLD)
    mgr.close()
    (tmp_path / "d" / "t-0" / "partition.metadata").write_text("version: 7\ntopic_id: x\n")
    with pytest.raises(KafkaStorageError, match="malformed"):
        LogManager([tmp_path / "d"], clock=clock)
    with pytest.raises(KafkaStorageError, match="not a topic id"):
        partition_metadata.write_topic_id(tmp_path / "d" / "t-0", "two\nlines")


def test_new_logs_are_written_back_once_not_fsynced_each(tmp_path, clock, monkeypatch):
    """Thousands of partitions created by one LeaderAndIsr (issue 17 item 4): a new log's
    files (topic id, checkpoint, epoch file) and directories are not fsynced one by one;
    ``sync_created`` writes them back with one call per log directory."""
    mgr = LogManager([tmp_path / "a", tmp_path / "b"], clock=clock)
    fsyncs: list[int] = []
    synced: list[object] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(fileio, "sync_filesystem", synced.append)
    for p in range(20):
        mgr.get_or_create("t", p, TopicConfig(), OLD)
    assert fsyncs == [] and synced == []
    mgr.sync_created()
    assert sorted(synced) == [tmp_path / "a", tmp_path / "b"]
    mgr.sync_created()  # nothing new since
    assert len(synced) == 2
    # an existing log's checkpoint is still fsynced when it changes
    log = mgr.get_or_create("t", 0, TopicConfig(), OLD)
    append(log, make_batch(1))
    log.flush()
    assert fsyncs
    monkeypatch.undo()
    mgr.close()
    again = LogManager([tmp_path / "a", tmp_path / "b"], clock=clock)
    assert [again.topic_id("t", p) for p in range(20)] == [OLD] * 20
    again.close()


def test_sync_filesystem_writes_back_a_directory(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    fileio.sync_filesystem(tmp_path)  # raises OSError when the system call fails
    with pytest.raises(OSError):
        fileio.sync_filesystem(tmp_path / "missing")


def test_an_empty_topic_id_file_reads_as_none(tmp_path):
    """A power loss before a new directory was written back may leave the file empty."""
    (tmp_path / "partition.metadata").write_bytes(b"")
    assert partition_metadata.read_topic_id(tmp_path) is None
    (tmp_path / "partition.metadata").write_bytes(b"version: 0\n")
    with pytest.raises(KafkaStorageError):
        partition_metadata.read_topic_id(tmp_path)
