"""Topic deletion while a replica's broker is down, then the name re-created (issue 15 item 6).

Real processes: etcd, one controller, three brokers. A topic with three partitions (RF=3)
holds 100 "old" records per partition; one broker is killed (SIGKILL), the topic deleted
(the live brokers get StopReplica, the dead one cannot), the broker restarted, and the name
created again. With three brokers, RF=3 and three partitions, each broker is the first
(preferred) replica of exactly one new partition, so the restarted broker leads one of them
from creation on. Shown: its old directories are gone before it registers, the new topic
starts at offset 0 on it, no old record is fetched from it or stored on any replica, and the
new records replicate to every replica byte for byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from repl_helpers import fetch_once, fetched_values, produce, stub, values

from headwater.batch import RecordBatch
from headwater.client import AsyncAdminClient
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.storage import partition_metadata
from tests.fault.harness.cluster import partition_state
from tests.fault.harness.replicas import partition_dir, stored_batches
from tests.helpers.wait import wait_for

ALL = broker_pb2.ACKS_ALL
TOPIC = "reborn"
PARTS = 3
VICTIM = 2


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("reborn")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as c:
        yield c


def _state(c: LocalCluster, p: int) -> dict[str, object] | None:
    # the cluster's etcd client settings: TLS under `make test-secure`
    etcd_tls = c._etcd_client_kwargs()
    return asyncio.run(partition_state(c.etcd.endpoint, TOPIC, p, **etcd_tls))


def _wait_states(c: LocalCluster, ok: object, what: str) -> None:
    for p in range(PARTS):
        wait_for(lambda p=p: (s := _state(c, p)) is not None and ok(s), timeout=40, what=what)  # type: ignore[operator]


def _admin(c: LocalCluster, fn: object) -> object:
    async def run() -> object:
        async with AsyncAdminClient(c.bootstrap) as admin:
            return await fn(admin)  # type: ignore[operator]

    return asyncio.run(run())


def _stored_values(c: LocalCluster, broker: int, p: int) -> list[tuple[int, bytes]]:
    pdir = partition_dir(c.data_dir, broker, TOPIC, p)
    if pdir is None:
        return []
    out: list[tuple[int, bytes]] = []
    for _info, raw in stored_batches(pdir):
        batch = RecordBatch(raw)
        for off, v in zip(batch.offsets().tolist(), batch.values(), strict=True):
            out.append((int(off), bytes(v or b"")))
    return out


def _topic_dirs(c: LocalCluster, broker: int) -> list[str]:
    root = c.data_dir / f"broker-{broker}"
    return sorted(
        d.name for d in root.glob("log-*/*") if d.is_dir() and d.name.startswith(f"{TOPIC}-")
    )


def _offsets(address: str, p: int) -> tuple[int, int]:
    got = _try_offsets(address, p)
    assert got is not None, f"{address} does not serve {TOPIC}-{p}"
    return got


def _try_offsets(address: str, p: int) -> tuple[int, int] | None:
    """(earliest, latest) of ``p`` as ``address`` answers ListOffsets, or None while it does
    not know the topic yet (its LeaderAndIsr/UpdateMetadata not applied)."""
    ch, s = stub(address)
    with ch:
        resp = s.ListOffsets(
            broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(topic=TOPIC, partition=p, timestamp=t)
                    for t in (-2, -1)
                ]
            ),
            timeout=5,
        )
    codes = [r.error_code for r in resp.partitions]
    if codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2:
        return None
    assert codes == [0, 0], resp
    return resp.partitions[0].offset, resp.partitions[1].offset


def test_restarted_broker_drops_the_deleted_topic_and_leads_the_new_one_from_zero(
    c3: LocalCluster,
) -> None:
    old_id = _admin(c3, lambda a: a.create_topic(TOPIC, PARTS, 3))
    _wait_states(c3, lambda s: s["leader"] >= 0 and len(s["isr"]) == 3, "old topic ready")
    for p in range(PARTS):
        leader = int(_state(c3, p)["leader"])  # type: ignore[index,call-overload]
        # etcd names the leader before the broker applied its LeaderAndIsr
        wait_for(
            lambda leader=leader, p=p: _try_offsets(c3.brokers[leader].address, p) is not None,
            timeout=30,
            what=f"broker {leader} to serve {TOPIC}-{p}",
        )
        for i in range(10):
            r = produce(
                c3.brokers[leader].address,
                TOPIC,
                values(f"old-{p}-{i}", 10),
                acks=ALL,
                partition=p,
            )
            assert r.error_code == ErrorCode.NONE, r.error_message
    for b in (1, 2, 3):
        for p in range(PARTS):
            wait_for(
                lambda b=b, p=p: len(_stored_values(c3, b, p)) == 100,
                timeout=30,
                what=f"broker {b} to hold the 100 old records of partition {p}",
            )

    c3.kill_broker(VICTIM)
    _wait_states(c3, lambda s: VICTIM not in s["isr"], "the killed broker out of every ISR")
    _admin(c3, lambda a: a.delete_topics([TOPIC]))
    for b in (1, 3):
        wait_for(
            lambda b=b: _topic_dirs(c3, b) == [],
            timeout=30,
            what=f"live broker {b} to delete its copies (StopReplica)",
        )
    # the dead broker missed the StopReplica: its copies are still on disk
    assert _topic_dirs(c3, VICTIM) == [f"{TOPIC}-{p}" for p in range(PARTS)]
    for p in range(PARTS):
        pdir = partition_dir(c3.data_dir, VICTIM, TOPIC, p)
        assert pdir is not None and partition_metadata.read_topic_id(pdir) == old_id

    c3.restart_broker(VICTIM)  # waits for its ready file, written after registration
    leftovers = sorted(
        d.name for d in (c3.data_dir / f"broker-{VICTIM}").glob("log-*/*") if d.is_dir()
    )
    assert leftovers == [], f"stray directories after restart: {leftovers}"
    r = fetch_once(c3.brokers[VICTIM].address, TOPIC, 0, 0)
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not r.records

    new_id = _admin(c3, lambda a: a.create_topic(TOPIC, PARTS, 3))
    assert new_id != old_id
    _wait_states(c3, lambda s: s["leader"] >= 0 and len(s["isr"]) == 3, "new topic ready")
    led = [p for p in range(PARTS) if _state(c3, p)["leader"] == VICTIM]  # type: ignore[index]
    assert len(led) == 1, "the restarted broker should be the preferred leader of one partition"
    pv = led[0]
    victim = c3.brokers[VICTIM].address
    pdir = partition_dir(c3.data_dir, VICTIM, TOPIC, pv)
    assert pdir is not None and partition_metadata.read_topic_id(pdir) == new_id
    # etcd names the leader before the broker has applied what the controller sent it
    wait_for(
        lambda: _try_offsets(victim, pv) is not None,
        timeout=30,
        what=f"the restarted broker to serve {TOPIC}-{pv}",
    )
    assert _offsets(victim, pv) == (0, 0)
    assert fetched_values(victim, TOPIC, pv) == ([], 0)

    new: list[bytes] = []
    for i in range(5):
        batch = values(f"new-{i}", 10)
        r = produce(victim, TOPIC, batch, acks=ALL, partition=pv, timeout_ms=15000)
        assert r.error_code == ErrorCode.NONE, r.error_message
        assert r.base_offset == 10 * i
        new += batch
    assert _offsets(victim, pv) == (0, 50)
    assert fetched_values(victim, TOPIC, pv) == (new, 50)

    expected = list(enumerate(new))
    for b in (1, 2, 3):
        wait_for(
            lambda b=b: _stored_values(c3, b, pv) == expected,
            timeout=30,
            what=f"broker {b} to hold exactly the 50 new records",
        )
        for p in range(PARTS):
            stored = _stored_values(c3, b, p)
            assert not [v for _o, v in stored if v.startswith(b"old-")], (b, p)
            pd = partition_dir(c3.data_dir, b, TOPIC, p)
            assert pd is not None and partition_metadata.read_topic_id(pd) == new_id
    _wait_states(c3, lambda s: len(s["isr"]) == 3, "every replica in sync")
