"""The coordinator service as real processes: etcd, a controller, one broker, 2 coordinators.

Raw gRPC against the owner found with FindCoordinator: the group protocol round trip, the
same owner named by every coordinator, and committed offsets surviving a kill -9 of their
coordinator (the survivor takes the partitions over by replaying ``__consumer_offsets``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.dev.cluster import LocalCluster
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from tests.coordinator.service_helpers import (
    Committer,
    commit,
    create_topics,
    fetched,
    find,
    owner,
    stub,
)
from tests.helpers.wait import wait_for

PARTITIONS = 3


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("groups")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        coordinator_args=["--offsets-topic-partitions", str(PARTITIONS), "--lease-ttl", "2"],
        etcd_unsafe_no_fsync=True,
    ) as c:
        create_topics(c, "t")
        yield c


def test_group_protocol_round_trip(gcluster: LocalCluster) -> None:
    g = "round-trip"
    s = owner(gcluster, g)
    sub = pb.ConsumerSubscription(topics=["t"]).SerializeToString()
    join = pb.JoinGroupRequest(
        group_id=g,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[pb.JoinGroupProtocol(name="range", metadata=sub)],
        client_id="c",
    )
    first = s.JoinGroup(join, timeout=20)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    join.member_id = first.member_id
    joined = s.JoinGroup(join, timeout=20)
    assert joined.error_code == ErrorCode.NONE, joined.error_message
    assert joined.generation_id == 1 and joined.leader == first.member_id
    assignment = pb.ConsumerAssignment(
        partitions=[pb.TopicPartitions(topic="t", partitions=[0])]
    ).SerializeToString()
    synced = s.SyncGroup(
        pb.SyncGroupRequest(
            group_id=g,
            generation_id=1,
            member_id=first.member_id,
            assignments=[pb.SyncGroupAssignment(member_id=first.member_id, assignment=assignment)],
        ),
        timeout=20,
    )
    assert synced.error_code == ErrorCode.NONE and synced.assignment == assignment
    hb = pb.HeartbeatRequest(group_id=g, generation_id=1, member_id=first.member_id)
    assert s.Heartbeat(hb, timeout=10).error_code == ErrorCode.NONE
    assert commit(s, g, 42, generation=1, member=first.member_id).error_code == ErrorCode.NONE
    stale = commit(s, g, 43, generation=0, member=first.member_id)
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    got = fetched(s, g)
    assert [(o.topic, o.partition, o.offset) for o in got.offsets] == [("t", 0, 42)]
    described = s.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[g]), timeout=20).groups[0]
    assert described.state == "Stable" and described.members[0].member_id == first.member_id
    listed = [x.group_id for a in gcluster.coordinator_addresses for x in
              stub(a).ListGroups(pb.ListGroupsRequest(), timeout=20).groups]  # fmt: skip
    assert listed.count(g) == 1


def test_find_coordinator_agrees_across_coordinators(gcluster: LocalCluster) -> None:
    for g in ("alpha", "beta", "gamma", "delta"):
        owner(gcluster, g)
        answers = {
            (r.coordinator.broker_id, r.offsets_partition)
            for a in gcluster.coordinator_addresses
            if (r := find(gcluster, g, via=a)) is not None
        }
        assert len(answers) == 1, answers


def test_commits_survive_coordinator_kill9(gcluster: LocalCluster) -> None:
    """A thread commits rising offsets round-robin over K groups, rediscovering owners on
    NOT_COORDINATOR / transport errors, while the owner of some of them is killed -9; every
    last acknowledged offset must then be fetched back (0 mismatches of K; only a last commit
    whose answer was lost in transit may show instead)."""
    keys = [f"survive-{i}" for i in range(12)]
    for g in keys:
        owner(gcluster, g)
    victim = find(gcluster, keys[0])
    assert victim is not None
    vid = victim.coordinator.broker_id
    committer = Committer(gcluster, keys)
    committer.start()
    try:
        wait_for(
            lambda: len(committer.acked) == len(keys), timeout=30, what="a commit of every key"
        )
        gcluster.kill_coordinator(vid)
        committer.after_kill.set()
        wait_for(
            lambda: committer.acks_after_kill >= set(keys),
            timeout=45,
            what="commits of every key acknowledged after the kill",
        )
    finally:
        committer.stop()
    assert all(a is not None and a.coordinator.broker_id != vid
               for a in (find(gcluster, g) for g in keys))  # fmt: skip
    mismatches = committer.mismatches()
    assert mismatches == [], f"{len(mismatches)} of {len(keys)} mismatched"
    gcluster.restart_coordinator(vid)


def _part(topic: str, partition: int, offset: int = 7) -> pb.OffsetCommitPartition:
    return pb.OffsetCommitPartition(topic=topic, partition=partition, offset=offset)


def test_commits_for_partitions_that_do_not_exist_are_refused(gcluster: LocalCluster) -> None:
    g = "unknown-partitions"
    s = owner(gcluster, g)
    req = pb.OffsetCommitRequest(
        group_id=g,
        generation_id=-1,
        partitions=[_part("no-such-topic", 0), _part("t", 0), _part("t", 5)],
    )
    resp = s.OffsetCommit(req, timeout=20)
    assert resp.error_code == ErrorCode.NONE
    assert [(r.topic, r.partition, r.error_code) for r in resp.partitions] == [
        ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 0, ErrorCode.NONE),
        ("t", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    got = fetched(s, g)
    assert [(o.topic, o.partition, o.offset) for o in got.offsets] == [("t", 0, 7)]
    # Only unknown partitions: nothing reaches the group, nothing is written.
    only = pb.OffsetCommitRequest(group_id=g, generation_id=-1, partitions=[_part("nope", 1)])
    assert s.OffsetCommit(only, timeout=20).partitions[0].error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    # Malformed partitions stay INVALID_REQUEST (the runtime's check).
    bad = pb.OffsetCommitRequest(group_id=g, generation_id=-1, partitions=[_part("t", -1)])
    assert s.OffsetCommit(bad, timeout=20).partitions[0].error_code == ErrorCode.INVALID_REQUEST
    # TxnOffsetCommit: the same per-partition answer.
    txn = s.TxnOffsetCommit(
        pb.TxnOffsetCommitRequest(
            transactional_id="tx-unknown",
            group_id="unknown-partitions-txn",
            producer_id=1,
            producer_epoch=0,
            generation_id=-1,
            partitions=[_part("nope", 0)],
        ),
        timeout=20,
    )
    assert [(r.topic, r.error_code) for r in txn.partitions] == [
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    # A topic created after the coordinator's last metadata read is not refused: a miss
    # refreshes once before refusing.
    create_topics(gcluster, "fresh", partitions=2)
    fresh = pb.OffsetCommitRequest(group_id=g, generation_id=-1, partitions=[_part("fresh", 1, 3)])
    assert s.OffsetCommit(fresh, timeout=20).partitions[0].error_code == ErrorCode.NONE
    got = fetched(s, g)
    assert sorted((o.topic, o.partition, o.offset) for o in got.offsets) == [
        ("fresh", 1, 3),
        ("t", 0, 7),
    ]
