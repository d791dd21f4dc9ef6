"""Partition reassignment (Kafka's KIP-455): change a partition's replica set online.

State machine of one partition (original replicas ``O``, target ``T``):

1. **start** — ``replicas = T + (O - T)``, ``adding = T - O``, ``removing = O - T``, written
   in one fenced transaction together with the topic key (which holds the replica list).
   LeaderAndIsr goes to every replica, so the adding ones start following the leader.
2. **catch up** — the leader adds followers to the ISR as they catch up (AlterPartition).
3. **complete** — once every adding replica is in the ISR: ``replicas = T``, the ISR loses
   the removed replicas, the leader moves into ``T`` when it is not there or not eligible
   (new leader epoch), adding/removing are cleared; removed replicas get
   StopReplica(delete=true). Checked after every AlterPartition, broker registration and
   controller activation (:func:`complete_ready`), so a controller that takes over
   mid-reassignment finishes it from what etcd says.

A new target during a reassignment replaces it (computed from ``O``); an empty target
cancels it: ``replicas = O``, the ISR loses the adding replicas, which get StopReplica.

The planning functions are pure (tested directly); the async commands run on the
controller's event-loop task (``ControllerLoop.submit``) and validate everything before
writing anything.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from headwater.v1 import controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import cluster_state as cs
from services.controller import metrics
from services.controller import state as st
from services.controller.context import ControllerContext

log = logging.getLogger(__name__)
PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Step:
    """One reassignment transition: the new replica list, the new partition state, and the
    brokers that leave the replica set (they get StopReplica with delete)."""

    replicas: list[int]
    state: st.PartitionState
    stop: tuple[int, ...] = ()


def original_replicas(replicas: list[int], current: st.PartitionState) -> list[int]:
    return [r for r in replicas if r not in current.adding_replicas]


def _leader_within(
    current: st.PartitionState,
    replicas: list[int],
    isr: tuple[int, ...],
    eligible: Collection[int],
) -> int | None:
    """The leader after the replica set becomes ``replicas``: the current one when it stays
    and is eligible, else the first eligible ISR member of ``replicas`` (None: nobody)."""
    if current.leader in replicas and current.leader in eligible:
        return current.leader
    for r in replicas:
        if r in isr and r in eligible:
            return r
    return None


def _next(
    current: st.PartitionState,
    epoch: int,
    *,
    leader: int,
    isr: tuple[int, ...],
    adding: tuple[int, ...] = (),
    removing: tuple[int, ...] = (),
) -> st.PartitionState:
    return dataclasses.replace(
        current,
        leader=leader,
        leader_epoch=current.leader_epoch + (leader != current.leader),
        isr=isr,
        partition_epoch=current.partition_epoch + 1,
        controller_epoch=epoch,
        adding_replicas=adding,
        removing_replicas=removing,
    )


def plan_start(
    replicas: list[int],
    current: st.PartitionState,
    target: list[int],
    eligible: Collection[int],
    epoch: int,
) -> Step | None:
    """Phase 1 for ``target`` (non-empty, validated), or None when nothing changes."""
    original = original_replicas(replicas, current)
    if not current.reassigning and target == original:
        return None
    new_replicas = list(target) + [r for r in original if r not in target]
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    dropped = tuple(r for r in replicas if r not in new_replicas)
    isr = tuple(b for b in current.isr if b in new_replicas)
    leader = _leader_within(current, new_replicas, isr, eligible)
    if leader is None:  # the leader was a dropped adding replica and nobody else qualifies
        leader, isr = -1, isr or current.isr
    state = _next(current, epoch, leader=leader, isr=isr, adding=adding, removing=removing)
    return Step(new_replicas, state, dropped)


def plan_cancel(
    replicas: list[int], current: st.PartitionState, eligible: Collection[int], epoch: int
) -> Step:
    """Revert an ongoing reassignment to the original replicas."""
    original = original_replicas(replicas, current)
    isr = tuple(b for b in current.isr if b in original)
    leader = _leader_within(current, original, isr, eligible)
    if leader is None:
        leader, isr = -1, isr or current.isr
    state = _next(current, epoch, leader=leader, isr=isr)
    return Step(original, state, tuple(current.adding_replicas))


def plan_complete(
    replicas: list[int], current: st.PartitionState, eligible: Collection[int], epoch: int
) -> Step | None:
    """Phase 2 when every adding replica is in the ISR and a target replica can lead;
    else None (not yet)."""
    if not current.reassigning or any(a not in current.isr for a in current.adding_replicas):
        return None
    target = [r for r in replicas if r not in current.removing_replicas]
    isr = tuple(b for b in current.isr if b in target)
    leader = _leader_within(current, target, isr, eligible)
    if leader is None:
        return None
    state = _next(current, epoch, leader=leader, isr=isr)
    return Step(target, state, tuple(current.removing_replicas))


def check_target(target: list[int], registered: Collection[int]) -> str | None:
    """Why a (non-empty) target replica list is invalid, or None. The reason names at most a
    few broker ids, however long the list (a message never echoes unbounded input)."""
    seen: set[int] = set()
    duplicates = []
    for b in target:
        if b in seen:
            duplicates.append(b)
        seen.add(b)
    if duplicates:
        return f"replica list of {len(target)} brokers has duplicates: {_few(duplicates)}"
    unknown = [b for b in target if b not in registered]
    if unknown:
        return f"{len(unknown)} brokers are not registered: {_few(unknown)}"
    return None


def _few(ids: list[int], n: int = 5) -> str:
    shown = ", ".join(str(b) for b in ids[:n])
    return f"{shown}, ..." if len(ids) > n else shown


# ---------------------------------------------------------------- commands (event loop)


def _eligible(loop: ControllerContext, key: PartitionKey) -> set[int]:
    """The brokers that may lead ``key``: live, not shutting down, its replica not offline."""
    assert loop.state is not None
    return set(loop.state.brokers) - loop.shutting_down - loop.offline_replicas(key)


async def apply_step(loop: ControllerContext, key: PartitionKey, step: Step) -> None:
    """Write one step (topic key + partition state, one fenced txn) and tell the brokers."""
    assert loop.state is not None and loop.epoch is not None
    topic = loop.state.topics[key[0]]
    after = dataclasses.replace(topic, assignment={**topic.assignment, key[1]: step.replicas})
    after, written = await st.write_topic_and_state(
        loop.etcd, loop.epoch, topic, after, key[1], step.state
    )
    metrics.observe_transition(loop.state.partitions.get(key), written)
    loop.state.apply(cs.TopicChanged(after))
    loop.state.apply(cs.PartitionChanged(key[0], key[1], written))
    log.info(
        "%s-%d: replicas %s, adding %s, removing %s, leader %d (epoch %d), isr %s",
        key[0],
        key[1],
        step.replicas,
        list(written.adding_replicas),
        list(written.removing_replicas),
        written.leader,
        written.leader_epoch,
        list(written.isr),
    )
    loop.send_leader_and_isr([key])
    if step.stop:
        loop.send_stop_replica([(key, list(step.stop))], delete=True)
    loop.send_update_metadata()


async def complete_ready(
    loop: ControllerContext, keys: Iterable[PartitionKey]
) -> list[PartitionKey]:
    """Finish phase 2 for every reassigning partition of ``keys`` that is ready."""
    assert loop.state is not None and loop.epoch is not None
    done: list[PartitionKey] = []
    for key in sorted(set(keys)):
        current = loop.state.partitions.get(key)
        topic = loop.state.topics.get(key[0])
        if current is None or topic is None or not current.reassigning:
            continue
        step = plan_complete(topic.assignment[key[1]], current, _eligible(loop, key), loop.epoch)
        if step is not None:
            await apply_step(loop, key, step)
            done.append(key)
    return done


def _result(
    key: PartitionKey, code: int = ErrorCode.NONE, message: str = "", leader: int = -1
) -> controller_pb2.ElectLeadersResult:
    return controller_pb2.ElectLeadersResult(
        topic=key[0],
        partition=key[1],
        error_code=code,  # type: ignore[arg-type]
        error_message=message,
        leader=leader,
    )


async def alter_partition_reassignments(
    loop: ControllerContext, request: controller_pb2.AlterPartitionReassignmentsRequest
) -> controller_pb2.AlterPartitionReassignmentsResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    counts = Counter((t.topic, t.partition) for t in request.partitions)
    results: list[controller_pb2.ElectLeadersResult] = []
    for item in request.partitions:
        key = (item.topic, item.partition)
        target = list(item.replicas)
        topic = state.topics.get(item.topic)
        current = state.partitions.get(key)
        if counts[key] > 1:
            results.append(_result(key, ErrorCode.INVALID_REQUEST, "partition given twice"))
            continue
        if topic is None or item.partition not in topic.assignment or current is None:
            results.append(_result(key, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition"))
            continue
        replicas = topic.assignment[item.partition]
        if not target:
            if not current.reassigning:
                results.append(
                    _result(
                        key,
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        f"no reassignment of {key[0]}-{key[1]} to cancel",
                        current.leader,
                    )
                )
                continue
            step: Step | None = plan_cancel(replicas, current, _eligible(loop, key), loop.epoch)
        else:
            why = check_target(target, state.brokers)
            if why is not None:
                results.append(_result(key, ErrorCode.INVALID_REPLICA_ASSIGNMENT, why))
                continue
            step = plan_start(replicas, current, target, _eligible(loop, key), loop.epoch)
        if step is not None:
            await apply_step(loop, key, step)
            await complete_ready(loop, [key])
        results.append(_result(key, leader=state.partitions[key].leader))
    return controller_pb2.AlterPartitionReassignmentsResponse(partitions=results)


async def list_partition_reassignments(
    loop: ControllerContext, request: controller_pb2.ListPartitionReassignmentsRequest
) -> controller_pb2.ListPartitionReassignmentsResponse:
    assert loop.state is not None
    out = []
    for (t, p), s in sorted(loop.state.partitions.items()):
        topic = loop.state.topics.get(t)
        if not s.reassigning or topic is None or p not in topic.assignment:
            continue
        out.append(
            controller_pb2.OngoingReassignment(
                topic=t,
                partition=p,
                replicas=topic.assignment[p],
                adding_replicas=list(s.adding_replicas),
                removing_replicas=list(s.removing_replicas),
                isr=list(s.isr),
            )
        )
    return controller_pb2.ListPartitionReassignmentsResponse(reassignments=out)
