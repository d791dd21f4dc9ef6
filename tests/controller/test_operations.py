"""AlterPartition, ControlledShutdown, ElectLeaders and the broker-loss election against a real
controller process and real etcd; stand-in brokers play the partition leaders."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from headwater.dev.cluster import ServiceProcess
from headwater.v1 import broker_pb2, controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.controller.ops_env import OpsEnv, sync
from tests.helpers.wait import async_wait_for

EC = ErrorCode


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.fixture
def env3(start_controller: Callable[[int], ServiceProcess], etcd: str) -> OpsEnv:
    return OpsEnv([start_controller(1)], etcd, brokers=3)


def test_alter_partition_cas_rejections_write_nothing(env3: OpsEnv) -> None:
    async def body() -> None:
        async with env3 as env:
            await env.create("isr", 1, 3)
            s0 = await env.state("isr", 0)
            leader = s0["leader"]
            others = [b for b in (1, 2, 3) if b != leader]
            assert sorted(s0["isr"]) == [1, 2, 3] and s0["partition_epoch"] == 0

            # a valid shrink: written with partition_epoch + 1, answered with the new state
            r = await env.alter_isr("isr", 0, [leader, others[0]])
            assert r.error_code == EC.NONE
            (res,) = r.partitions
            assert res.error_code == EC.NONE, res.error_message
            assert list(res.state.isr) == [leader, others[0]] and res.state.partition_epoch == 1
            s1 = await env.state("isr", 0)
            assert s1["isr"] == [leader, others[0]] and s1["partition_epoch"] == 1
            assert s1["leader_epoch"] == s0["leader_epoch"]

            def metadata_has_isr() -> bool:
                ums = env.brokers[others[1]].of(broker_pb2.UpdateMetadataRequest)
                return bool(ums) and any(
                    list(p.isr) == [leader, others[0]] for t in ums[-1].topics for p in t.partitions
                )

            await async_wait_for(sync(metadata_has_isr), timeout=10, what="UpdateMetadata")

            before = await env.snapshot()
            full = [leader, *others]
            cases = [
                # stale partition epoch (another change won)
                (dict(partition_epoch=0), EC.FENCED_LEADER_EPOCH),
                (dict(leader_epoch=s0["leader_epoch"] - 1), EC.FENCED_LEADER_EPOCH),
                (dict(leader_epoch=s0["leader_epoch"] + 1), EC.UNKNOWN_LEADER_EPOCH),
                (dict(broker=others[0]), EC.NOT_LEADER_OR_FOLLOWER),
            ]
            for kwargs, code in cases:
                r = await env.alter_isr("isr", 0, full, **kwargs)  # type: ignore[arg-type]
                assert r.error_code == EC.NONE
                assert EC.Name(r.partitions[0].error_code) == EC.Name(code), kwargs
                assert r.partitions[0].error_message
                assert r.partitions[0].state.partition_epoch == 1  # the current state
            # stale / unknown broker epochs fail the whole request
            stale = await env.alter_isr("isr", 0, full, broker_epoch=env.brokers[leader].epoch - 1)
            assert stale.error_code == EC.STALE_BROKER_EPOCH and not stale.partitions
            newer = await env.alter_isr("isr", 0, full, broker_epoch=env.brokers[leader].epoch + 99)
            assert newer.error_code == EC.BROKER_NOT_AVAILABLE
            # malformed ISRs
            for bad in ([], [others[0]], [leader, leader], [leader, 7]):
                r = await env.alter_isr("isr", 0, bad)
                assert r.partitions[0].error_code == EC.INVALID_REQUEST, bad
            unknown = await env.alter_isr("isr", 0, [leader])
            assert unknown.partitions[0].error_code == EC.NONE  # sanity: this one is valid...
            # ...so restore the snapshot comparison point after it
            before = await env.snapshot()
            s2 = await env.state("isr", 0)
            # a retry of the change already in effect (stale epoch, same ISR) succeeds, no write
            retry = await env.alter_isr("isr", 0, [leader], partition_epoch=1)
            assert retry.partitions[0].error_code == EC.NONE
            assert retry.partitions[0].state.partition_epoch == s2["partition_epoch"]
            # a dead broker cannot be added to the ISR
            await env.brokers[others[1]].deregister()

            async def dropped() -> bool:
                r = await env.alter_isr("isr", 0, [leader, others[1]])
                return bool(r.partitions[0].error_code == EC.INELIGIBLE_REPLICA)

            await async_wait_for(dropped, timeout=15, what="dead broker refused in the ISR")
            assert await env.snapshot() == before

    run(body())


def test_broker_loss_elects_from_isr_preferring_preferred_and_unclean_only_when_enabled(
    env3: OpsEnv,
) -> None:
    async def body() -> None:
        async with env3 as env:
            await env.create("many", 6, 3)
            await env.create("clean", 3, 2)
            await env.create("dirty", 3, 2, {"unclean.leader.election.enable": "true"})
            # shrink clean/dirty ISRs to their leader alone
            for t in ("clean", "dirty"):
                for p in range(3):
                    s = await env.state(t, p)
                    r = await env.alter_isr(t, p, [s["leader"]])
                    assert r.partitions[0].error_code == EC.NONE
            before = {(t, p): await env.state(t, p) for t in ("many", "clean", "dirty")
                      for p in range(3 if t != "many" else 6)}  # fmt: skip
            victim = 1
            await env.brokers[victim].deregister()

            async def settled() -> bool:
                for (t, p), old in before.items():
                    if old["leader"] == victim and (await env.state(t, p))["leader"] == victim:
                        return False
                return True

            await async_wait_for(settled, timeout=15, what="leaders moved off broker 1")
            for (t, p), old in before.items():
                new = await env.state(t, p)
                replicas = await env.replicas(t, p)
                if old["leader"] != victim:
                    assert new["leader"] == old["leader"]
                    assert victim not in new["isr"] or new["isr"] == [victim]
                    continue
                assert new["leader_epoch"] == old["leader_epoch"] + 1
                assert new["partition_epoch"] > old["partition_epoch"]
                if t == "many":
                    alive_isr = [r for r in replicas if r in old["isr"] and r != victim]
                    assert new["leader"] == alive_isr[0]  # replica order: preferred first
                    assert victim not in new["isr"]
                elif t == "clean":
                    assert (new["leader"], new["isr"]) == (-1, [victim])
                else:
                    survivor = next(r for r in replicas if r != victim)
                    assert (new["leader"], new["isr"]) == (survivor, [survivor])
            assert any(old["leader"] == victim for (t, _), old in before.items() if t == "clean")

            # an operator's unclean election brings the clean topic's offline partitions back
            r = await env.stub.ElectLeaders(
                controller_pb2.ElectLeadersRequest(election_type=controller_pb2.UNCLEAN)
            )
            by_key = {(x.topic, x.partition): x for x in r.partitions}
            for (t, p), old in before.items():
                if t == "clean" and old["leader"] == victim:
                    assert by_key[(t, p)].error_code == EC.NONE
                    assert (await env.state(t, p))["leader"] not in (-1, victim)
                elif t == "clean":
                    assert by_key[(t, p)].error_code == EC.ELECTION_NOT_NEEDED

    run(body())


def test_controlled_shutdown_then_preferred_election(env3: OpsEnv) -> None:
    async def body() -> None:
        async with env3 as env:
            await env.create("cs", 6, 2)
            await env.create("solo", 3, 1)
            keys = [("cs", p) for p in range(6)] + [("solo", p) for p in range(3)]
            before = {k: await env.state(*k) for k in keys}
            b1 = env.brokers[1]
            stale = await env.stub.ControlledShutdown(
                controller_pb2.ControlledShutdownRequest(broker_id=1, broker_epoch=b1.epoch - 1)
            )
            assert stale.error_code == EC.STALE_BROKER_EPOCH
            r = await env.stub.ControlledShutdown(
                controller_pb2.ControlledShutdownRequest(broker_id=1, broker_epoch=b1.epoch)
            )
            assert r.error_code == EC.NONE
            remaining = {(x.topic, x.partition) for x in r.remaining}
            solo_on_1 = {k for k in keys if k[0] == "solo" and before[k]["leader"] == 1}
            assert remaining == solo_on_1 and len(solo_on_1) == 1
            for k in keys:
                s = await env.state(*k)
                if k in solo_on_1:
                    assert s == before[k]
                    continue
                assert s["leader"] != 1 and 1 not in s["isr"]
                if before[k]["leader"] == 1:
                    assert s["leader_epoch"] == before[k]["leader_epoch"] + 1

            def told_new_leaders() -> bool:
                return any(
                    a.state.leader != 1 and a.topic == "cs"
                    for b in (2, 3)
                    for req in env.brokers[b].of(broker_pb2.LeaderAndIsrRequest)
                    for a in req.partitions
                    if req.controller_epoch > 0 and a.state.leader_epoch > 0
                )

            await async_wait_for(sync(told_new_leaders), timeout=10, what="LeaderAndIsr")
            # preferred election while 1 is shutting down: not available
            pe = await env.stub.ElectLeaders(controller_pb2.ElectLeadersRequest())
            pref1 = {
                (x.topic, x.partition)
                for x in pe.partitions
                if x.error_code == EC.PREFERRED_LEADER_NOT_AVAILABLE
            }
            assert pref1
            for k in pref1:  # only broker 1's preferred partitions are unavailable
                assert (await env.replicas(*k))[0] == 1
            # broker 1 comes back (new epoch), its leaders re-add it to their ISRs
            await b1.deregister()
            await b1.register(env.etcd)
            await async_wait_for(
                lambda: env.sees_brokers(env.stub, 3), timeout=15, what="broker 1 back"
            )
            for k in keys:
                s = await env.state(*k)
                if 1 in await env.replicas(*k) and 1 not in s["isr"]:

                    async def readd(k: tuple[str, int] = k) -> bool:
                        s = await env.state(*k)
                        r = await env.alter_isr(*k, [*s["isr"], 1])
                        return bool(r.partitions[0].error_code == EC.NONE)

                    await async_wait_for(readd, timeout=15, what=f"{k} ISR expanded")
            pe = await env.stub.ElectLeaders(
                controller_pb2.ElectLeadersRequest(
                    partitions=[
                        controller_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in keys
                    ]
                    + [controller_pb2.TopicPartitionRef(topic="nope", partition=0)]
                )
            )
            codes = {(x.topic, x.partition): x.error_code for x in pe.partitions}
            assert codes[("nope", 0)] == EC.UNKNOWN_TOPIC_OR_PARTITION
            for k in keys:
                replicas = await env.replicas(*k)
                s = await env.state(*k)
                assert s["leader"] == replicas[0], (k, s)
                assert codes[k] in (EC.NONE, EC.ELECTION_NOT_NEEDED)
            assert any(codes[k] == EC.NONE for k in keys)

    run(body())


def test_standby_finishes_topic_creation_and_broker_failover_after_kill9(
    start_controller: Callable[[int], ServiceProcess], etcd: str
) -> None:
    first = start_controller(1)
    second = start_controller(2)

    async def body() -> None:
        async with OpsEnv([first, second], etcd, brokers=3) as env:
            await env.create("held", 3, 2)
            held = {p: await env.state("held", p) for p in range(3)}
            # a burst of creations with the active controller killed in the middle of it
            calls = [
                asyncio.ensure_future(
                    env.stub.CreateTopics(
                        controller_pb2.CreateTopicsRequest(
                            topics=[
                                controller_pb2.NewTopic(
                                    name=f"burst{i}", partitions=8, replication_factor=3
                                )
                            ]
                        ),
                        timeout=10,
                    )
                )
                for i in range(20)
            ]
            await asyncio.sleep(0)  # let the requests go out
            first.kill9()
            # and a broker dies at the same time
            await env.brokers[1].deregister()
            await asyncio.gather(*calls, return_exceptions=True)
            await env.wait_active(env.stubs[1])

            async def complete() -> bool:
                topics = await env.etcd.get_prefix("/headwater/topics/")
                for kv in topics.items:
                    name = kv.key.rsplit("/", 1)[1]
                    for p in range(8 if name.startswith("burst") else 3):
                        raw = await env.etcd.get(f"/headwater/partitions/{name}/{p}")
                        if raw is None:
                            return False
                        s = await env.state(name, p)
                        if s["leader"] in (-1, 1):
                            return False
                return True

            await async_wait_for(complete, timeout=30, what="every partition led by a live broker")
            for p, old in held.items():
                s = await env.state("held", p)
                if old["leader"] == 1:
                    assert s["leader_epoch"] > old["leader_epoch"]
                    assert s["leader"] in old["isr"]
                assert 1 not in s["isr"]

    run(body())


def test_automatic_leader_rebalance(etcd: str, tmp_path: Any) -> None:
    from headwater.dev.cluster import controller_process, wait_serving

    proc = controller_process(1, etcd, tmp_path, tmp_path, lease_ttl=2)
    proc.argv += ["--leader-imbalance-check-interval-s", "0.5"]
    proc.start()
    try:
        wait_serving(proc, 30)

        async def body() -> None:
            async with OpsEnv([proc], etcd, brokers=2) as env:
                await env.create("rb", 4, 2)
                pref = {p: (await env.replicas("rb", p))[0] for p in range(4)}
                assert sorted(pref.values()) == [1, 1, 2, 2]
                b1 = env.brokers[1]
                r = await env.stub.ControlledShutdown(
                    controller_pb2.ControlledShutdownRequest(broker_id=1, broker_epoch=b1.epoch)
                )
                assert r.error_code == EC.NONE and not r.remaining
                # broker 1 restarts and its leaders take it back into their ISRs
                await b1.deregister()
                await b1.register(env.etcd)
                await async_wait_for(
                    lambda: env.sees_brokers(env.stub, 2), timeout=15, what="broker 1 back"
                )
                for p in range(4):

                    async def readd(p: int = p) -> bool:
                        s = await env.state("rb", p)
                        if 1 in s["isr"]:
                            return True
                        r = await env.alter_isr("rb", p, [*s["isr"], 1])
                        return bool(r.partitions[0].error_code == EC.NONE)

                    await async_wait_for(readd, timeout=15, what=f"rb-{p} ISR expanded")

                # no ElectLeaders call: the periodic check restores the preferred leaders
                async def balanced() -> bool:
                    leaders = [(await env.state("rb", p))["leader"] for p in range(4)]
                    return leaders == [pref[p] for p in range(4)]

                await async_wait_for(balanced, timeout=15, what="automatic preferred election")

        run(body())
    finally:
        proc.stop(timeout=5)
