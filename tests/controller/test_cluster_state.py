"""The controller's ClusterState changes only through ``apply(change)``: each record kind, the
read-only views, and replay (load) agreeing with the run-time path.

The ``fast`` tests are pure. The last test drives a real :class:`ControllerLoop` (in this
process, against the session etcd, brokers registered as keys with no process behind them)
through every run-time path that changes the state, then checks that reloading etcd and
replaying the applied records both rebuild the same state.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Generator, Iterator
from typing import Any, get_args

import pytest

from headwater.platform import cluster_layout as cl
from headwater.platform import etcd as hetcd
from headwater.v1 import controller_pb2
from services.controller import cluster_state as cs
from services.controller import leadership, operations, reassignment, topics
from services.controller import state as st
from services.controller.events import BecameActive, ControllerLoop
from tests.helpers.ports import free_ports
from tests.helpers.wait import async_wait_for

fast = pytest.mark.fast


def broker(bid: int, epoch: int = 10) -> st.Broker:
    return st.Broker(bid, "127.0.0.1", 9000 + bid, f"r{bid}", "", epoch)


def topic(name: str, parts: int, rev: int = 20, configs: dict[str, str] | None = None) -> cl.Topic:
    assignment = {p: [1 + (p + i) % 3 for i in range(2)] for p in range(parts)}
    return cl.Topic(name, name * 4, assignment, dict(configs or {}), mod_revision=rev)


def pstate(leader: int, isr: tuple[int, ...], rev: int = 30) -> st.PartitionState:
    return st.PartitionState(leader, 0, isr, 0, 1, mod_revision=rev)


def base() -> cs.ClusterState:
    return cs.ClusterState.replay(
        [
            cs.ClusterIdSet("c1"),
            cs.BrokerRegistered(broker(1)),
            cs.BrokerRegistered(broker(2)),
            cs.TopicCreated(topic("a", 2)),
            cs.TopicCreated(topic("b", 1)),
            cs.PartitionChanged("a", 0, pstate(1, (1, 2))),
            cs.PartitionChanged("a", 1, pstate(2, (2, 3))),
            cs.PartitionChanged("b", 0, pstate(1, (1, 2))),
        ]
    )


@fast
def test_each_record_kind_changes_what_it_names() -> None:
    s = base()
    assert s.cluster_id == "c1" and set(s.brokers) == {1, 2} and set(s.topics) == {"a", "b"}
    assert set(s.partitions) == {("a", 0), ("a", 1), ("b", 0)}
    s.apply(cs.ClusterIdSet("c2"))
    assert s.cluster_id == "c2"
    # a new incarnation replaces the registration; unregistering removes it
    s.apply(cs.BrokerRegistered(broker(2, epoch=11)))
    assert s.brokers[2].epoch == 11
    s.apply(cs.BrokerUnregistered(2))
    assert set(s.brokers) == {1}
    # a topic replaced (partitions added): its partition states stay
    grown = topic("a", 3, rev=40)
    s.apply(cs.TopicChanged(grown))
    assert s.topics["a"] == grown and s.partitions_of("a") == [0, 1, 2]
    assert s.partitions[("a", 0)] == pstate(1, (1, 2))
    new = dataclasses.replace(pstate(2, (2,), rev=41), leader_epoch=1, partition_epoch=1)
    s.apply(cs.PartitionChanged("a", 0, new))
    assert s.partitions[("a", 0)] == new
    # a deleted topic takes its partition states with it, and only its own
    s.apply(cs.TopicDeleted("a"))
    assert set(s.topics) == {"b"} and set(s.partitions) == {("b", 0)}
    assert s.partitions_of("a") == []


@fast
@pytest.mark.parametrize(
    "change",
    [
        cs.BrokerUnregistered(3),
        cs.TopicCreated(topic("a", 1)),
        cs.TopicChanged(topic("zz", 1)),
        cs.TopicDeleted("zz"),
        cs.PartitionChanged("zz", 0, pstate(1, (1,))),
    ],
    ids=lambda c: type(c).__name__,
)
def test_a_record_that_does_not_fit_raises_and_changes_nothing(change: cs.Change) -> None:
    s = base()
    with pytest.raises(cs.InconsistentChange):
        s.apply(change)
    assert s == base()


@fast
def test_the_views_are_read_only() -> None:
    s = base()
    with pytest.raises(TypeError):
        s.brokers[3] = broker(3)  # type: ignore[index]
    with pytest.raises(TypeError):
        del s.topics["a"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        s.partitions[("a", 0)] = pstate(2, (2,))  # type: ignore[index]
    with pytest.raises(AttributeError):
        s.cluster_id = "x"  # type: ignore[misc]
    assert s == base()


def _run_time_changes() -> Iterator[cs.Change]:
    """Records in the order the run-time paths produce them, with decisions made by the
    controller's own planners: brokers join, a topic is created and its partitions elected, a
    broker is lost, partitions are added, configs change, a reassignment starts and completes,
    another topic is deleted."""
    rev = iter(range(100, 1000))
    yield cs.ClusterIdSet("cid")
    for bid in (1, 2, 3):
        yield cs.BrokerRegistered(broker(bid, next(rev)))
    live = {1, 2, 3}
    t = dataclasses.replace(topic("t", 3), mod_revision=next(rev))
    gone = dataclasses.replace(topic("gone", 2), mod_revision=next(rev))
    states: dict[tuple[str, int], st.PartitionState] = {}
    for new in (t, gone):
        yield cs.TopicCreated(new)
        r = next(rev)
        for p, replicas in new.assignment.items():
            s = leadership.elect(replicas, None, live, 1)
            assert s is not None
            states[(new.name, p)] = dataclasses.replace(s, mod_revision=r)
            yield cs.PartitionChanged(new.name, p, states[(new.name, p)])
    yield cs.BrokerUnregistered(1)
    live = {2, 3}
    r = next(rev)
    for (name, p), cur in sorted(states.items()):
        replicas = (t if name == "t" else gone).assignment[p]
        moved = leadership.elect(replicas, cur, live, 1)
        if moved is not None:
            states[(name, p)] = dataclasses.replace(moved, mod_revision=r)
            yield cs.PartitionChanged(name, p, states[(name, p)])
    t = dataclasses.replace(
        t, assignment={**t.assignment, 3: [2, 3]}, mod_revision=next(rev)
    )  # CreatePartitions
    yield cs.TopicChanged(t)
    s3 = leadership.elect([2, 3], None, live, 1)
    assert s3 is not None
    yield cs.PartitionChanged("t", 3, dataclasses.replace(s3, mod_revision=next(rev)))
    t = dataclasses.replace(t, configs={"retention.ms": "9"}, mod_revision=next(rev))
    yield cs.TopicChanged(t)
    start = reassignment.plan_start(t.assignment[0], states[("t", 0)], [3, 2], live, 1)
    assert start is not None and start.state.reassigning
    t = yield from _reassign(t, 0, start, next(rev))
    # the adding replica caught up (AlterPartition), then the reassignment completes
    caught = dataclasses.replace(
        start.state,
        isr=(2, 3),
        partition_epoch=start.state.partition_epoch + 1,
        mod_revision=next(rev),
    )
    yield cs.PartitionChanged("t", 0, caught)
    done = reassignment.plan_complete(start.replicas, caught, live, 1)
    assert done is not None
    yield from _reassign(t, 0, done, next(rev))
    yield cs.TopicDeleted("gone")


def _reassign(
    t: cl.Topic, p: int, step: reassignment.Step, rev: int
) -> Generator[cs.Change, None, cl.Topic]:
    """A reassignment step's records: the topic key and the partition state, written in one
    transaction at ``rev``; returns the topic as written."""
    t = dataclasses.replace(t, assignment={**t.assignment, p: step.replicas}, mod_revision=rev)
    yield cs.TopicChanged(t)
    yield cs.PartitionChanged(t.name, p, dataclasses.replace(step.state, mod_revision=rev))
    return t


def snapshot(state: cs.ClusterState) -> dict[str, list[hetcd.KeyValue]]:
    """The etcd keys a state corresponds to, as :func:`cs.load` reads them."""

    def kv(key: str, value: bytes, create: int, mod: int) -> hetcd.KeyValue:
        return hetcd.KeyValue(key, value, hetcd.KeyMeta(create, mod, 1))

    return {
        "brokers": [
            kv(cl.broker_key(b), x.encode(), x.epoch, x.epoch) for b, x in state.brokers.items()
        ],
        "topics": [
            kv(cl.topic_key(n), x.encode(), 1, x.mod_revision) for n, x in state.topics.items()
        ],
        "partitions": [
            kv(cl.partition_key(n, p), x.encode(), 1, x.mod_revision)
            for (n, p), x in state.partitions.items()
        ],
    }


@fast
def test_replaying_etcd_keys_gives_the_state_the_run_time_path_built() -> None:
    live = cs.ClusterState()
    changes = list(_run_time_changes())
    for change in changes:
        live.apply(change)
    assert {type(c) for c in changes} == set(get_args(cs.Change))
    assert live.partitions[("t", 0)].leader_epoch > 0 and not live.partitions[("t", 0)].reassigning
    assert live.topics["t"].assignment[0] == [3, 2] and "gone" not in live.topics
    keys = snapshot(live)
    loaded = cs.ClusterState.replay(
        cs.snapshot_changes(live.cluster_id, keys["brokers"], keys["topics"], keys["partitions"])
    )
    assert loaded == live and cs.ClusterState.replay(changes) == live


@fast
def test_snapshot_skips_malformed_keys_and_takes_damaged_partitions_offline() -> None:
    good = topic("t", 2)
    meta = hetcd.KeyMeta(5, 6, 1)
    changes = cs.snapshot_changes(
        "cid",
        [
            hetcd.KeyValue(cl.broker_key(1), broker(1).encode(), meta),
            hetcd.KeyValue(cl.broker_key(2), broker(1).encode(), meta),  # names another id
            hetcd.KeyValue(cl.broker_key(3), b"{", meta),
        ],
        [
            hetcd.KeyValue(cl.topic_key("t"), good.encode(), meta),
            hetcd.KeyValue(cl.topic_key("bad"), b"[]", meta),
        ],
        [
            hetcd.KeyValue(cl.partition_key("t", 0), pstate(1, (1,)).encode(), meta),
            hetcd.KeyValue(cl.partition_key("t", 1), b"not json", meta),
            hetcd.KeyValue(cl.partition_key("bad", 0), pstate(1, (1,)).encode(), meta),
            hetcd.KeyValue(cl.partition_key("orphan", 0), pstate(1, (1,)).encode(), meta),
        ],
    )
    s = cs.ClusterState.replay(changes)
    assert s.brokers == {1: broker(1, epoch=5)}
    assert s.topics == {"t": dataclasses.replace(good, mod_revision=6)}
    assert s.partitions == {
        ("t", 0): pstate(1, (1,), rev=6),
        ("t", 1): st.PartitionState(-1, 0, (), 0, 0, mod_revision=6),
    }


# ------------------------------------------------- the run-time paths against a real etcd


def test_run_time_paths_and_replay_build_the_same_state(
    etcd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied: list[tuple[cs.ClusterState, cs.Change]] = []
    real_apply = cs.ClusterState.apply

    def recording(self: cs.ClusterState, change: cs.Change) -> None:
        real_apply(self, change)
        applied.append((self, change))

    monkeypatch.setattr(cs.ClusterState, "apply", recording)
    ports = free_ports(4)  # brokers registered with nothing listening: links just retry

    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            await c.put(cl.EPOCH_KEY, "1")
            for bid in (1, 2, 3):
                b = st.Broker(bid, "127.0.0.1", ports[bid], "", "", 0)
                await c.put(cl.broker_key(bid), b.encode())
            loop = ControllerLoop(
                c,
                controller_id=1,
                host="127.0.0.1",
                port=ports[0],
                auto_leader_rebalance=False,
                crash_detection=False,
            )
            runner = asyncio.create_task(loop.run())
            try:
                await _drive(c, loop)
                assert loop.state is not None
                # every record applied to the loop's state (from its load on), replayed
                mine = [ch for target, ch in applied if target is loop.state]
                assert {type(ch) for ch in mine} == set(get_args(cs.Change))
                assert cs.ClusterState.replay(mine) == loop.state
                # and what etcd holds now, loaded
                loaded, _ = await cs.load(c)
                assert loaded == loop.state
            finally:
                await loop.close()
                runner.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await runner

    asyncio.run(asyncio.wait_for(body(), 60))


async def _drive(c: hetcd.Etcd, loop: ControllerLoop) -> None:
    loop.post(BecameActive(1))
    await async_wait_for(
        _sync(lambda: loop.state is not None and len(loop.state.brokers) == 3),
        timeout=20,
        what="the controller active with 3 brokers",
    )
    req = controller_pb2
    created = await loop.submit(
        lambda lp: topics.create_topics(
            lp,
            req.CreateTopicsRequest(
                topics=[
                    req.NewTopic(name="t", partitions=3, replication_factor=2),
                    req.NewTopic(name="gone", partitions=2, replication_factor=3),
                ]
            ),
        )
    )
    assert [r.error_code for r in created.topics] == [0, 0]
    grown = await loop.submit(
        lambda lp: topics.create_partitions(
            lp, req.CreatePartitionsRequest(topic="t", total_count=4)
        )
    )
    assert grown.result.error_code == 0
    altered = await loop.submit(
        lambda lp: topics.alter_topic_configs(
            lp, req.AlterTopicConfigsRequest(topic="t", set={"retention.ms": "60000"})
        )
    )
    assert altered.result.error_code == 0
    assert loop.state is not None
    replicas = loop.state.topics["t"].assignment[0]
    target = [b for b in (1, 2, 3) if b not in replicas][:1] + replicas[:1]
    moved = await loop.submit(
        lambda lp: reassignment.alter_partition_reassignments(
            lp,
            req.AlterPartitionReassignmentsRequest(
                partitions=[req.ReassignmentTarget(topic="t", partition=0, replicas=target)]
            ),
        )
    )
    assert moved.partitions[0].error_code == 0
    assert loop.state.partitions[("t", 0)].reassigning
    # the adding replica catches up: the leader's AlterPartition completes the reassignment
    cur = loop.state.partitions[("t", 0)]
    isr = list(cur.isr) + [b for b in cur.adding_replicas if b not in cur.isr]
    broker_epoch = loop.state.brokers[cur.leader].epoch
    alter = await loop.submit(
        lambda lp: operations.alter_partition(
            lp,
            req.AlterPartitionRequest(
                broker_id=cur.leader,
                broker_epoch=broker_epoch,
                partitions=[
                    req.AlterPartitionItem(
                        topic="t",
                        partition=0,
                        leader_epoch=cur.leader_epoch,
                        partition_epoch=cur.partition_epoch,
                        new_isr=isr,
                    )
                ],
            ),
        )
    )
    assert alter.partitions[0].error_code == 0
    assert not loop.state.partitions[("t", 0)].reassigning
    assert loop.state.topics["t"].assignment[0] == target
    deleted = await loop.submit(
        lambda lp: topics.delete_topics(lp, req.DeleteTopicsRequest(names=["gone"]))
    )
    assert deleted.topics[0].error_code == 0
    # a broker's registration goes: the broker watch fails its partitions over
    await c.delete(cl.broker_key(3))
    await async_wait_for(
        _sync(lambda: loop.state is not None and 3 not in loop.state.brokers),
        timeout=20,
        what="broker 3 gone",
    )
    await loop.submit(_noop)  # the event that removed it has finished its writes
    assert all(s.leader != 3 for s in loop.state.partitions.values())


async def _noop(loop: Any) -> None:
    return None


def _sync(fn: Any) -> Any:
    async def call() -> Any:
        return fn()

    return call
