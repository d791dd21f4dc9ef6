"""Coordinator kill -9 while groups commit and the broker compacts ``__consumer_offsets``.

etcd, a controller, one broker (log cleaner every 200 ms) and 2 coordinators. Once the
coordinators have created ``__consumer_offsets``, its configs are altered through the
controller (16 KiB segments, any dirty ratio cleanable, no compaction lag); the broker applies
them to the existing logs from the controller's UpdateMetadata. The commit stream then
rolls many segments and the cleaner compacts them while commits keep flowing. Compaction is
proven on disk (a ``cleaner.checkpoint`` past several segments) and through the log (far fewer
records read from the beginning than offsets written) before the owner of some groups is
killed -9; the survivor replays the compacted partitions and must return every last
acknowledged offset (0 mismatches of K; only a last commit whose answer was lost in transit
may show instead).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client import AdminClient, AsyncConsumer, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.coordinator.service_helpers import Committer, create_topics, find, owner
from tests.helpers.wait import wait_for

OFFSETS = "__consumer_offsets"
PARTITIONS = 3
KEYS = [f"kdc-{i:02d}" for i in range(16)]
META = "m" * 96  # ~200-byte commit records: a 16 KiB segment holds ~80 of them


@pytest.fixture(scope="module")
def kcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("kill-compaction")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        broker_args=["--log-cleaner-backoff-ms", "200", "--controlled-shutdown-timeout-s", "0"],
        coordinator_args=["--offsets-topic-partitions", str(PARTITIONS), "--lease-ttl", "2"],
        etcd_unsafe_no_fsync=True,
    ) as c:
        create_topics(c, "t")
        yield c


def first_dirty(data_dir: Path, partition: int) -> int:
    """The cleaner checkpoint of one offsets partition (0 while it was never cleaned).

    Globs the fixed layout ``broker-*/log-*/<topic>-<p>/`` rather than ``rglob``: a recursive
    walk can descend into the cleaner's ``.cleaned-*`` staging directory just as it is
    swapped away."""
    best = 0
    for cp in data_dir.glob(f"broker-*/log-*/{OFFSETS}-{partition}/cleaner.checkpoint"):
        try:
            best = max(best, int(json.loads(cp.read_text())["first_dirty_offset"]))
        except (OSError, ValueError, KeyError):
            continue
    return best


def records_from_beginning(bootstrap: str, partition: int) -> tuple[int, int]:
    """(records read from the log start up to the end offset seen first, that end offset)."""

    async def run() -> tuple[int, int]:
        tp = TopicPartition(OFFSETS, partition)
        async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
            end = (await c.end_offsets([tp]))[tp]
            c.assign([tp])
            await c.seek_to_beginning(tp)
            count, last = 0, -1
            deadline = time.monotonic() + 20
            while last < end - 1 and time.monotonic() < deadline:
                for rec in await c.poll(timeout_ms=300):
                    last = rec.offset
                    count += rec.offset < end
            assert last >= end - 1, f"read up to {last} of {end} in {OFFSETS}-{partition}"
            return count, end

    return asyncio.run(run())


def test_commits_survive_coordinator_kill9_during_compaction(kcluster: LocalCluster) -> None:
    for g in KEYS:
        owner(kcluster, g)  # the offsets topic exists and every key has an owner
    victim = find(kcluster, KEYS[0])
    assert victim is not None
    vid, vpart = victim.coordinator.broker_id, victim.offsets_partition
    admin = AdminClient(kcluster.bootstrap)
    try:
        admin.alter_topic_configs(
            OFFSETS,
            {"segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
             "min.compaction.lag.ms": "0"},
        )  # fmt: skip
    finally:
        admin.close()
    for g in KEYS:
        owner(kcluster, g)
    committer = Committer(kcluster, KEYS, metadata=META)
    committer.start()
    try:
        # several cleaned 16 KiB segments of the victim's partition, while commits flow
        wait_for(
            lambda: first_dirty(kcluster.data_dir, vpart) >= 600,
            timeout=60,
            what=f"the cleaner to compact {OFFSETS}-{vpart}",
        )
        count, end = records_from_beginning(kcluster.bootstrap, vpart)
        print(f"{OFFSETS}-{vpart}: {count} records left of {end} written")
        assert count < end // 2, (count, end)
        cleaned_at_kill = first_dirty(kcluster.data_dir, vpart)
        kcluster.kill_coordinator(vid)
        committer.after_kill.set()
        wait_for(
            lambda: committer.acks_after_kill >= set(KEYS),
            timeout=45,
            what="commits of every key acknowledged after the kill",
        )
        # the cleaner keeps compacting the partition the survivor took over, under its commits
        wait_for(
            lambda: first_dirty(kcluster.data_dir, vpart) > cleaned_at_kill,
            timeout=45,
            what=f"another cleaning of {OFFSETS}-{vpart} after the kill",
        )
    finally:
        committer.stop()
    assert all(a is not None and a.coordinator.broker_id != vid
               for a in (find(kcluster, g) for g in KEYS))  # fmt: skip
    mismatches = committer.mismatches()
    print(f"committed offsets lost: {len(mismatches)} of {len(KEYS)}")
    assert mismatches == [], f"{len(mismatches)} of {len(KEYS)} mismatched: {mismatches}"
    kcluster.restart_coordinator(vid)
    wait_for(lambda: all(find(kcluster, g) for g in KEYS), timeout=30, what="owners after restart")
