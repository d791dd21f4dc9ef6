"""Partition reassignment's state machine against real controller processes and real etcd:
stand-in brokers play the leader (AlterPartition adds the new replica to the ISR) and record
the LeaderAndIsr / StopReplica requests; the active controller is killed mid-reassignment
and the standby completes it from etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from headwater.dev.cluster import ServiceProcess
from headwater.v1 import broker_pb2, controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.controller.ops_env import OpsEnv, sync
from tests.helpers.wait import async_wait_for

EC = ErrorCode


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def target(topic: str, p: int, replicas: list[int]) -> Any:
    return controller_pb2.ReassignmentTarget(topic=topic, partition=p, replicas=replicas)


async def alter(stub: Any, *targets: Any) -> list[Any]:
    r = await stub.AlterPartitionReassignments(
        controller_pb2.AlterPartitionReassignmentsRequest(partitions=list(targets)), timeout=10
    )
    return list(r.partitions)


async def ongoing(stub: Any) -> dict[tuple[str, int], Any]:
    r = await stub.ListPartitionReassignments(
        controller_pb2.ListPartitionReassignmentsRequest(), timeout=10
    )
    return {(x.topic, x.partition): x for x in r.reassignments}


def test_reassign_validation_cancel_and_failover_completion(
    start_controller: Callable[[int], ServiceProcess], etcd: str
) -> None:
    first = start_controller(1)
    second = start_controller(2)

    async def body() -> None:
        async with OpsEnv([first, second], etcd, brokers=3) as env:
            await env.create("mv", 2, 2)
            # validation: nothing written
            before = await env.snapshot()
            bad = await alter(
                env.stub,
                target("mv", 9, [1]),
                target("nope", 0, [1]),
                target("mv", 0, [1, 1]),
                target("mv", 1, []),
            )
            bad += await alter(env.stub, target("mv", 0, [1, 4]), target("mv", 0, [2]))
            assert [EC.Name(r.error_code) for r in bad] == [
                "UNKNOWN_TOPIC_OR_PARTITION",
                "UNKNOWN_TOPIC_OR_PARTITION",
                "INVALID_REPLICA_ASSIGNMENT",
                "NO_REASSIGNMENT_IN_PROGRESS",
                "INVALID_REQUEST",  # one partition given twice
                "INVALID_REQUEST",
            ]
            assert all(r.error_message for r in bad)
            assert await env.snapshot() == before

            # partition 1: start, then cancel -> original replica set, added replica stopped
            orig1 = await env.replicas("mv", 1)
            spare1 = next(b for b in (1, 2, 3) if b not in orig1)
            (ok,) = await alter(env.stub, target("mv", 1, [spare1, orig1[0]]))
            assert ok.error_code == EC.NONE, ok.error_message
            (cancel,) = await alter(env.stub, target("mv", 1, []))
            assert cancel.error_code == EC.NONE
            assert sorted(await env.replicas("mv", 1)) == sorted(orig1)
            s1 = await env.state("mv", 1)
            assert "adding_replicas" not in s1 and spare1 not in s1["isr"]

            def stopped(bid: int, topic: str, p: int) -> bool:
                return any(
                    x.topic == topic and x.partition == p and x.delete
                    for req in env.brokers[bid].of(broker_pb2.StopReplicaRequest)
                    for x in req.partitions
                )

            await async_wait_for(
                sync(lambda: stopped(spare1, "mv", 1)), timeout=10, what="StopReplica(cancel)"
            )

            # partition 0: [a, b] -> [b, c] with the leader a removed
            a, b = await env.replicas("mv", 0)
            c = next(x for x in (1, 2, 3) if x not in (a, b))
            s0 = await env.state("mv", 0)
            assert s0["leader"] == a
            (ok,) = await alter(env.stub, target("mv", 0, [b, c]))
            assert ok.error_code == EC.NONE, ok.error_message
            progress = (await ongoing(env.stub))[("mv", 0)]
            assert list(progress.replicas) == [b, c, a]
            assert (list(progress.adding_replicas), list(progress.removing_replicas)) == ([c], [a])
            assert c not in progress.isr
            st = await env.state("mv", 0)
            assert (st["adding_replicas"], st["removing_replicas"]) == ([c], [a])
            assert await env.replicas("mv", 0) == [b, c, a]

            def c_follows() -> bool:
                return any(
                    x.topic == "mv" and x.state.partition == 0 and c in x.state.replicas
                    for req in env.brokers[c].of(broker_pb2.LeaderAndIsrRequest)
                    for x in req.partitions
                )

            await async_wait_for(sync(c_follows), timeout=10, what="LeaderAndIsr to the new one")

            # the active controller dies mid-reassignment; the standby takes over
            first.kill9()
            await env.wait_active(env.stubs[1])
            assert ("mv", 0) in await ongoing(env.stubs[1])

            # the leader reports c caught up: phase 2 runs on the new controller
            async def expanded() -> bool:
                s = await env.state("mv", 0)
                r = await env.alter_isr("mv", 0, [*s["isr"], c], stub=env.stubs[1])
                return bool(r.error_code == EC.NONE and r.partitions[0].error_code == EC.NONE)

            await async_wait_for(expanded, timeout=20, what="ISR expansion accepted")
            done = await env.state("mv", 0)
            assert await env.replicas("mv", 0) == [b, c]
            assert "adding_replicas" not in done
            assert done["leader"] == b and done["leader_epoch"] == s0["leader_epoch"] + 1
            assert sorted(done["isr"]) == sorted([b, c])
            assert not await ongoing(env.stubs[1])
            await async_wait_for(
                sync(lambda: stopped(a, "mv", 0)), timeout=10, what="StopReplica(removed)"
            )

    run(body())
