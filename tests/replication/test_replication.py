"""Replication with real processes: three brokers, one controller, etcd (one cluster per module).

Brokers run with ``--replica-lag-time-max-ms 1500`` so ISR shrinking is seen in seconds.
Produce/fetch/metadata go over raw gRPC to the broker under test, so errors are not hidden by
client retries; replica logs are compared byte for byte from each broker's data directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from repl_helpers import (
    StoredBatch,
    create_topic,
    fetched_values,
    fetches_waiting,
    leads,
    log_batches,
    paused,
    produce,
    state_on,
    stub,
    upto,
    values,
)

from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.storage.leader_epoch import read_entries
from tests.helpers.wait import wait_for

ALL = broker_pb2.ACKS_ALL
ONE = broker_pb2.ACKS_LEADER


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("repl")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as c:
        yield c


def leader_of(c: LocalCluster, topic: str, via: int | None = None) -> int:
    def find() -> int | None:
        ids = [via] if via is not None else [b for b, p in c.brokers.items() if p.alive()]
        for b in ids:
            s = state_on(c.brokers[b].address, topic)
            if s is None or s.leader < 0 or not c.brokers[s.leader].alive():
                continue
            if leads(c.brokers[s.leader].address, topic):
                return s.leader
        return None

    return wait_for(find, timeout=40, what=f"a live leader of {topic}")


def isr_on(c: LocalCluster, bid: int, topic: str) -> list[int]:
    s = state_on(c.brokers[bid].address, topic)
    return sorted(s.isr) if s is not None else []


def identical_upto(c: LocalCluster, topic: str, end: int, brokers: list[int]) -> bool:
    logs = [upto(log_batches(c, b, topic), end) for b in brokers]
    return bool(logs[0]) and logs[0][-1].next_offset == end and all(lg == logs[0] for lg in logs)


def test_acks_all_replicates_byte_identical_logs(c3: LocalCluster) -> None:
    topic = "r-identical"
    create_topic(c3, topic, min_insync_replicas="2")
    leader = leader_of(c3, topic)
    addr = c3.brokers[leader].address
    sent: list[bytes] = []
    for i in range(20):
        batch = values(f"b{i}", 25)
        r = produce(addr, topic, batch, acks=ALL)
        assert r.error_code == ErrorCode.NONE, r.error_message
        assert r.base_offset == i * 25
        sent += batch
    got, hw = fetched_values(addr, topic)
    assert hw == 500 and got == sent
    wait_for(
        lambda: identical_upto(c3, topic, 500, [1, 2, 3]),
        timeout=20,
        what="three byte-identical replicas up to the high watermark",
    )
    assert {b.leader_epoch for b in log_batches(c3, leader, topic)} == {0}


def test_hw_isr_shrink_min_insync_and_expand(c3: LocalCluster) -> None:
    topic = "r-isr"
    create_topic(c3, topic, min_insync_replicas="2")
    leader = leader_of(c3, topic)
    followers = [b for b in c3.brokers if b != leader]
    addr = c3.brokers[leader].address
    for i in range(5):
        assert produce(addr, topic, values(f"c{i}", 10), acks=ALL).error_code == ErrorCode.NONE
    wait_for(lambda: isr_on(c3, leader, topic) == [1, 2, 3], timeout=20, what="full ISR")
    with paused(c3, *followers):
        r = produce(addr, topic, values("uncommitted", 10), acks=ONE)
        assert r.error_code == ErrorCode.NONE and r.base_offset == 50
        # consumers see only committed records: the acks=1 batch is above the HW
        got, hw = fetched_values(addr, topic)
        assert hw == 50 and len(got) == 50
        # the followers stopped fetching: the leader shrinks the ISR via the controller
        wait_for(
            lambda: isr_on(c3, leader, topic) == [leader],
            timeout=20,
            what="ISR shrunk to the leader",
        )
        r = produce(addr, topic, values("refused", 5), acks=ALL)
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        # still readable; the HW does not move while the ISR is below min.insync.replicas
        got, hw = fetched_values(addr, topic)
        assert hw == 50 and len(got) == 50
    wait_for(
        lambda: isr_on(c3, leader, topic) == [1, 2, 3],
        timeout=30,
        what="ISR expanded after SIGCONT",
    )
    wait_for(lambda: fetched_values(addr, topic)[1] == 60, timeout=20, what="HW past the tail")
    assert produce(addr, topic, values("after", 5), acks=ALL).error_code == ErrorCode.NONE
    got, hw = fetched_values(addr, topic)
    assert hw == 65 and b"refused-0" not in got and got[50:60] == values("uncommitted", 10)
    wait_for(lambda: identical_upto(c3, topic, 65, [1, 2, 3]), timeout=20, what="identical")


def test_leader_kill_elects_from_isr_and_old_leader_truncates_by_epoch(c3: LocalCluster) -> None:
    """KIP-101: the killed leader's uncommitted tail is cut by leader epoch when it rejoins."""
    topic = "r-failover"
    create_topic(c3, topic, min_insync_replicas="2")
    old = leader_of(c3, topic)
    followers = [b for b in c3.brokers if b != old]
    acked: list[bytes] = []
    for i in range(10):
        batch = values(f"a{i}", 10)
        assert produce(c3.brokers[old].address, topic, batch, acks=ALL).error_code == 0
        acked += batch
    wait_for(lambda: identical_upto(c3, topic, 100, [1, 2, 3]), timeout=20, what="replicated")
    with paused(c3, *followers):
        # the followers' parked fetches are answered before the tail exists, so no follower
        # can receive it (a response already in a paused follower's socket would carry it)
        wait_for(
            lambda: all(fetches_waiting(c3.brokers[old].metrics_url, f) == 0 for f in followers),
            timeout=10,
            what="the paused followers' long polls answered",
        )
        r = produce(c3.brokers[old].address, topic, values("tail", 30), acks=ONE)
        assert r.error_code == ErrorCode.NONE and r.base_offset == 100
        c3.kill_broker(old)
    new = leader_of(c3, topic, via=followers[0])
    assert new in followers
    new_addr = c3.brokers[new].address
    for i in range(5):
        batch = values(f"n{i}", 10)
        r = produce(new_addr, topic, batch, acks=ALL, timeout_ms=15000)
        assert r.error_code == ErrorCode.NONE, r.error_message
        acked += batch
    c3.restart_broker(old)
    wait_for(
        lambda: isr_on(c3, new, topic) == [1, 2, 3],
        timeout=40,
        what="the old leader back in the ISR",
    )
    wait_for(
        lambda: identical_upto(c3, topic, 150, [1, 2, 3]),
        timeout=30,
        what="old leader byte-identical after truncation",
    )
    leader = leader_of(c3, topic, via=new)
    got, hw = fetched_values(c3.brokers[leader].address, topic)
    assert (hw, len(got)) == (150, 150)
    assert got == acked  # no acknowledged record lost, the tail is gone
    old_log = log_batches(c3, old, topic)
    assert [b.leader_epoch for b in old_log if b.base_offset >= 100] == [1] * 5
    assert old_log[-1].next_offset == 150


def test_sigterm_moves_leadership_first(c3: LocalCluster) -> None:
    topic = "r-shutdown"
    create_topic(c3, topic, min_insync_replicas="1")
    leader = leader_of(c3, topic)
    addr = c3.brokers[leader].address
    assert produce(addr, topic, values("s", 10), acks=ALL).error_code == ErrorCode.NONE
    wait_for(lambda: identical_upto(c3, topic, 10, [1, 2, 3]), timeout=20, what="replicated")
    c3.stop_broker(leader)
    assert "controlled shutdown confirmed" in c3.brokers[leader].log_path.read_text()
    others = [b for b in c3.brokers if b != leader]
    new = leader_of(c3, topic, via=others[0])
    assert new in others
    # the new leader's HW catches up once the remaining ISR member fetched from it
    wait_for(
        lambda: fetched_values(c3.brokers[new].address, topic)[0] == values("s", 10),
        timeout=20,
        what="committed records readable from the new leader",
    )
    c3.restart_broker(leader)


def _epoch_ends(batches: list[StoredBatch], leo: int) -> dict[int, int]:
    """Per leader epoch written in ``batches``: where it ends (the first batch of a later
    epoch, or the log end), what OffsetForLeaderEpoch must answer for it."""
    ends: dict[int, int] = {}
    for i, b in enumerate(batches):
        if b.leader_epoch not in ends:
            later = [x.base_offset for x in batches[i:] if x.leader_epoch > b.leader_epoch]
            ends[b.leader_epoch] = later[0] if later else leo
    return ends


def _epoch_file_fits_log(c: LocalCluster, bid: int, topic: str) -> bool:
    """The broker's leader-epoch file, once written behind, names the first offset of every
    epoch its log's batches carry and claims no offset past its log end."""
    (d,) = (c.data_dir / f"broker-{bid}").glob(f"log-*/{topic}-0")
    entries = read_entries(d)
    batches = log_batches(c, bid, topic)
    if entries is None or not batches:
        return False
    firsts: dict[int, int] = {}
    for b in batches:
        firsts.setdefault(b.leader_epoch, b.base_offset)
    found = {(e.epoch, e.start_offset) for e in entries}
    return set(firsts.items()) <= found and all(
        e.start_offset <= batches[-1].next_offset for e in entries
    )


def test_brokers_killed_right_after_a_leadership_change_keep_their_epoch_history(
    c3: LocalCluster,
) -> None:
    """A new leadership's epoch entry, and a follower's for its first batch of the new epoch,
    are only in memory until the flush pass writes the file behind (within a second). Each
    broker in turn is killed (SIGKILL) right after a leadership change and restarted: the
    restarted brokers rebuild the epochs from their batches, truncate correctly, answer
    OffsetForLeaderEpoch as leaders exactly where each epoch ends in the log, their epoch
    files come to match their logs, and no acknowledged record is lost."""
    topic = "r-epoch-crash"
    create_topic(c3, topic, min_insync_replicas="2")
    acked: list[bytes] = []

    def produce_acked(bid: int, tag: str, batches: int) -> None:
        for i in range(batches):
            batch = values(f"{tag}{i}", 10)
            r = produce(c3.brokers[bid].address, topic, batch, acks=ALL, timeout_ms=15000)
            assert r.error_code == ErrorCode.NONE, r.error_message
            acked.extend(batch)

    a = leader_of(c3, topic)
    produce_acked(a, "a", 5)  # offsets 0..49
    c3.kill_broker(a)
    b = leader_of(c3, topic, via=next(x for x in c3.brokers if x != a))
    produce_acked(b, "b", 3)  # 50..79: b's and the third broker's first batches of the epoch
    c3.kill_broker(b)  # right after its election: its entry may be in memory only
    c = next(x for x in c3.brokers if x not in (a, b))
    assert leader_of(c3, topic, via=c) == c
    c3.restart_broker(b)
    c3.restart_broker(a)
    wait_for(lambda: isr_on(c3, c, topic) == [1, 2, 3], timeout=40, what="a and b in the ISR")
    produce_acked(c, "c", 2)  # 80..99
    wait_for(lambda: identical_upto(c3, topic, 100, [1, 2, 3]), timeout=30, what="replicated")
    c3.kill_broker(c)  # the leader now is a or b, both restarted after a kill
    leader = leader_of(c3, topic, via=a)
    assert leader in (a, b)
    batches = log_batches(c3, leader, topic)
    ends = _epoch_ends(batches, 100)
    assert len(ends) == 3  # the epochs of a, b and c
    ch, s = stub(c3.brokers[leader].address)
    with ch:
        resp = s.OffsetForLeaderEpoch(
            broker_pb2.OffsetForLeaderEpochRequest(
                replica_id=-1,
                partitions=[
                    broker_pb2.OffsetForLeaderEpochPartition(
                        topic=topic, partition=0, current_leader_epoch=-1, leader_epoch=e
                    )
                    for e in ends
                ],
            ),
            timeout=10,
        )
    got = {r.leader_epoch: r.end_offset for r in resp.partitions}
    assert [r.error_code for r in resp.partitions] == [ErrorCode.NONE] * 3
    assert got == ends  # (epoch, where it ends) for each epoch, from the restarted leader
    produce_acked(leader, "d", 1)  # 100..109 (min.insync.replicas 2: a and b)
    c3.restart_broker(c)
    wait_for(lambda: isr_on(c3, leader, topic) == [1, 2, 3], timeout=40, what="c in the ISR")
    wait_for(lambda: identical_upto(c3, topic, 110, [1, 2, 3]), timeout=30, what="replicated")
    got_values, hw = fetched_values(c3.brokers[leader].address, topic)
    assert hw == 110 and got_values == acked  # nothing acknowledged lost or added
    wait_for(
        lambda: all(_epoch_file_fits_log(c3, bid, topic) for bid in c3.brokers),
        timeout=20,
        what="every broker's leader-epoch file written behind",
    )
