"""The controller's fenced etcd writes, against a real etcd."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from services.controller import cluster_state as cs
from services.controller import state as st


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def _fresh(leader: int, rev: int = 0) -> st.PartitionState:
    return st.PartitionState(leader, 0, (leader,), 0, 3, mod_revision=rev)


def test_writes_are_fenced_by_controller_epoch_and_mod_revision(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            await c.put(cluster_layout.EPOCH_KEY, "3")
            # 250 partitions: several chunked transactions (etcd allows 128 ops per txn)
            states = {p: _fresh(1) for p in range(250)}
            written = await st.write_partition_states(c, 3, "t", states)
            assert len(written) == 250 and all(s.mod_revision > 0 for s in written.values())
            assert len((await c.get_prefix(cluster_layout.partitions_prefix("t"))).items) == 250
            snap = await c.get_prefix("/headwater/")
            # a deposed controller (epoch 2) cannot write, even with the right mod revision
            update = {0: st.PartitionState(2, 1, (2,), 1, 2, written[0].mod_revision)}
            with pytest.raises(st.FencedError):
                await st.write_partition_states(c, 2, "t", update)
            # the current epoch with a stale mod revision cannot either
            stale = {0: st.PartitionState(2, 1, (2,), 1, 3, written[0].mod_revision - 1)}
            with pytest.raises(st.FencedError):
                await st.write_partition_states(c, 3, "t", stale)
            # creating over an existing key is refused
            with pytest.raises(st.FencedError):
                await st.write_partition_states(c, 3, "t", {5: _fresh(1)})
            assert await c.get_prefix("/headwater/") == snap
            ok = {0: st.PartitionState(2, 1, (2,), 1, 3, written[0].mod_revision)}
            after = await st.write_partition_states(c, 3, "t", ok)
            got = await c.get(cluster_layout.partition_key("t", 0))
            assert got is not None
            assert st.PartitionState.decode(got[0], got[1].mod_revision) == after[0]

    run(body())


def test_load_reads_layout_and_ignores_orphan_partitions(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            topic = cluster_layout.Topic("a", "f" * 32, {0: [1], 1: [1]}, {"retention.ms": "5"})
            await c.put(cluster_layout.topic_key("a"), topic.encode())
            await c.put(cluster_layout.partition_key("a", 0), _fresh(1).encode())
            await c.put(cluster_layout.partition_key("gone", 0), _fresh(1).encode())
            broker = st.Broker(1, "127.0.0.1", 9, "r1", "", 0)
            rev = await c.put(cluster_layout.broker_key(1), broker.encode())
            state, revision = await cs.load(c)
            assert revision >= rev
            assert state.brokers == {1: st.Broker(1, "127.0.0.1", 9, "r1", "", rev)}
            assert state.topics["a"].assignment == {0: [1], 1: [1]}
            assert state.topics["a"].configs == {"retention.ms": "5"}
            assert set(state.partitions) == {("a", 0)}

    run(body())


def test_expire_broker_is_fenced_by_controller_and_broker_epoch(etcd: str) -> None:
    """A dead broker's registration ends as on lease expiry; a deposed controller or a report
    about an older incarnation revokes nothing."""

    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            await c.put(cluster_layout.EPOCH_KEY, "3")
            lost = asyncio.Event()
            lease = await c.grant_lease(30, on_lost=lost.set, name="test-broker-lease")
            key = cluster_layout.broker_key(7)
            raw = '{"broker_id": 7, "host": "127.0.0.1", "port": 1}'
            res = await c.txn([hetcd.cmp_absent(key)], [hetcd.op_put(key, raw, lease)])
            broker = st.Broker.decode(raw.encode(), res.revision)
            # deposed (epoch 2), or an older incarnation (epoch - 1): nothing happens
            assert not await st.expire_broker(c, 2, broker)
            older = st.Broker.decode(raw.encode(), res.revision - 1)
            assert not await st.expire_broker(c, 3, older)
            assert await c.get(key) is not None and await c.lease_granted_ttl(lease.id) == 30
            # the controller of the current epoch, about the current incarnation: revoked
            assert await st.expire_broker(c, 3, broker)
            assert await c.get(key) is None
            assert await c.lease_granted_ttl(lease.id) == -1
            # the holder's keepalive notices (bounded: one refresh interval of a 30 s lease)
            await asyncio.wait_for(lost.wait(), 20)
            assert not await st.expire_broker(c, 3, broker)  # already gone: a no-op

    asyncio.run(asyncio.wait_for(body(), 60))
