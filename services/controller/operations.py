"""Replication commands run on the controller's event-loop task (``ControllerLoop.submit``):
AlterPartition (a leader's ISR change), ControlledShutdown, ElectLeaders, and the periodic
automatic preferred-leader rebalance.

Each validates every partition before writing; the writes are fenced CAS transactions
(controller epoch + each partition key's mod revision, ``state.write_states``) and only after
they succeed is the answer given and the brokers told (LeaderAndIsr for leader changes,
UpdateMetadata to everyone). A validation failure changes nothing.

AlterPartition error contract (per partition, ``AlterPartitionResult.error_code``; the
current state from etcd is returned with every error so the leader can catch up):

* UNKNOWN_TOPIC_OR_PARTITION — no such partition;
* NOT_LEADER_OR_FOLLOWER — the sender does not lead the partition;
* FENCED_LEADER_EPOCH — the sender's leader epoch is older than the current one, or its
  partition epoch is not the current one (Kafka's INVALID_UPDATE_VERSION: another change won;
  wait for the LeaderAndIsr carrying it, then retry). A retry of a change that already
  happened (stale partition epoch, same ISR as now) succeeds without writing;
* UNKNOWN_LEADER_EPOCH — the sender's leader epoch is newer than the controller's;
* INVALID_REQUEST — a malformed ISR (empty, duplicates, non-replicas, leader missing), or a
  partition given twice;
* INELIGIBLE_REPLICA — the new ISR adds a broker that is not alive, is in controlled
  shutdown, or whose replica of the partition is offline (it refused to host it,
  ``offline_replicas.py``): Kafka's rule (KIP-841). The leader proposes again later.

Whole-request errors (``AlterPartitionResponse.error_code``): STALE_BROKER_EPOCH (the sender's
registration is older than the one in etcd, or gone), BROKER_NOT_AVAILABLE (newer: the
controller has not seen it yet; retriable), NOT_CONTROLLER.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter

from headwater import errors
from headwater.v1 import controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import leadership, reassignment
from services.controller import state as st
from services.controller.context import ControllerContext

log = logging.getLogger(__name__)
PartitionKey = tuple[str, int]


def check_broker_epoch(loop: ControllerContext, broker_id: int, broker_epoch: int) -> int:
    """ErrorCode for a broker-originated request's (id, epoch) against the registrations."""
    assert loop.state is not None
    known = loop.state.brokers.get(broker_id)
    if known is None or broker_epoch < known.epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    if broker_epoch > known.epoch:
        return ErrorCode.BROKER_NOT_AVAILABLE
    return ErrorCode.NONE


def _all_keys(loop: ControllerContext) -> list[PartitionKey]:
    assert loop.state is not None
    return sorted((t, p) for t, topic in loop.state.topics.items() for p in topic.assignment)


def _replicas(loop: ControllerContext, key: PartitionKey) -> list[int] | None:
    assert loop.state is not None
    topic = loop.state.topics.get(key[0])
    if topic is None or key[1] not in topic.assignment or key not in loop.state.partitions:
        return None
    return topic.assignment[key[1]]


# ---------------------------------------------------------------- AlterPartition


async def alter_partition(
    loop: ControllerContext, request: controller_pb2.AlterPartitionRequest
) -> controller_pb2.AlterPartitionResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    code = check_broker_epoch(loop, request.broker_id, request.broker_epoch)
    if code != ErrorCode.NONE:
        return controller_pb2.AlterPartitionResponse(error_code=code)  # type: ignore[arg-type]
    counts = Counter((i.topic, i.partition) for i in request.partitions)
    errs: dict[PartitionKey, tuple[int, str]] = {}
    changes: dict[PartitionKey, st.PartitionState] = {}
    order: list[PartitionKey] = []
    for item in request.partitions:
        key = (item.topic, item.partition)
        order.append(key)
        replicas = _replicas(loop, key)
        if counts[key] > 1:
            errs[key] = (ErrorCode.INVALID_REQUEST, "partition given twice")
            continue
        if replicas is None:
            errs[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
            continue
        cur = state.partitions[key]
        new_isr = list(item.new_isr)
        if cur.leader != request.broker_id:
            errs[key] = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {request.broker_id} does not lead (leader {cur.leader})",
            )
        elif item.leader_epoch < cur.leader_epoch:
            errs[key] = (
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch {item.leader_epoch} is older than {cur.leader_epoch}",
            )
        elif item.leader_epoch > cur.leader_epoch:
            errs[key] = (
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {item.leader_epoch} is newer than {cur.leader_epoch}",
            )
        elif item.partition_epoch != cur.partition_epoch:
            if tuple(new_isr) != cur.isr:  # else: a retry of what is already in effect
                errs[key] = (
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"partition epoch {item.partition_epoch} is stale"
                    f" (current {cur.partition_epoch})",
                )
        else:
            why = leadership.check_isr_change(
                replicas,
                cur,
                new_isr,
                state.brokers,
                loop.shutting_down,
                loop.offline_replicas(key),
            )
            if why is not None:
                errs[key] = why
            elif tuple(new_isr) != cur.isr:
                changes[key] = dataclasses.replace(
                    cur,
                    isr=tuple(new_isr),
                    partition_epoch=cur.partition_epoch + 1,
                    controller_epoch=loop.epoch,
                )
    written = await loop.write(changes)
    if written:
        log.info(
            "AlterPartition from broker %d: %s",
            request.broker_id,
            ", ".join(f"{t}-{p} isr={list(state.partitions[(t, p)].isr)}" for t, p in written),
        )
        loop.send_update_metadata()
        await reassignment.complete_ready(loop, written)
    results = []
    for key in order:
        code, message = errs.get(key, (ErrorCode.NONE, ""))
        results.append(
            controller_pb2.AlterPartitionResult(
                topic=key[0],
                partition=key[1],
                error_code=code,  # type: ignore[arg-type]
                error_message=message,
                state=loop.partition_pb(key) if key in state.partitions else None,
            )
        )
    return controller_pb2.AlterPartitionResponse(partitions=results)


# ---------------------------------------------------------------- ControlledShutdown


async def controlled_shutdown(
    loop: ControllerContext, request: controller_pb2.ControlledShutdownRequest
) -> controller_pb2.ControlledShutdownResponse:
    """Mark the broker shutting down, move its leaderships to other live ISR members and
    drop it from ISRs it follows in; answer with the partitions it still leads."""
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    bid = request.broker_id
    code = check_broker_epoch(loop, bid, request.broker_epoch)
    if code != ErrorCode.NONE:
        return controller_pb2.ControlledShutdownResponse(
            error_code=code,  # type: ignore[arg-type]
            error_message=f"broker {bid} epoch {request.broker_epoch} is not the registered one",
        )
    loop.shutting_down.add(bid)
    keys = [k for k in loop.keys_on(bid) if k in state.partitions]
    changes = {}
    for key in keys:
        new = leadership.shutdown_move(
            state.topics[key[0]].assignment[key[1]],
            state.partitions[key],
            state.brokers,
            loop.shutting_down,
            loop.epoch,
            offline=loop.offline_replicas(key),
        )
        if new is not None:
            changes[key] = new
    written = await loop.write(changes)
    loop.send_leader_and_isr(written)
    loop.send_update_metadata()
    remaining = [k for k in keys if state.partitions[k].leader == bid]
    log.info(
        "controlled shutdown of broker %d: %d partitions changed, %d still led",
        bid,
        len(written),
        len(remaining),
    )
    return controller_pb2.ControlledShutdownResponse(
        remaining=[controller_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in remaining]
    )


# ---------------------------------------------------------------- elections


async def elect_leaders(
    loop: ControllerContext, request: controller_pb2.ElectLeadersRequest
) -> controller_pb2.ElectLeadersResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    if request.election_type not in (
        controller_pb2.ElectionType.PREFERRED,
        controller_pb2.ElectionType.UNCLEAN,
    ):
        raise errors.InvalidRequestError(f"unknown election type {request.election_type}")
    unclean = request.election_type == controller_pb2.ElectionType.UNCLEAN
    keys = [(r.topic, r.partition) for r in request.partitions] or _all_keys(loop)
    counts = Counter(keys)
    outcome: dict[PartitionKey, tuple[int, str]] = {}
    changes: dict[PartitionKey, st.PartitionState] = {}
    for key in keys:
        replicas = _replicas(loop, key)
        if counts[key] > 1:
            outcome[key] = (ErrorCode.INVALID_REQUEST, "partition given twice")
            continue
        if replicas is None:
            outcome[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
            continue
        elect = leadership.elect_unclean if unclean else leadership.elect_preferred
        new, code, message = elect(
            replicas,
            state.partitions[key],
            state.brokers,
            loop.epoch,
            shutting=loop.shutting_down,
            offline=loop.offline_replicas(key),
        )
        outcome[key] = (code, message)
        if new is not None:
            changes[key] = new
    written = await loop.write(changes)
    if written:
        loop.send_leader_and_isr(written)
        loop.send_update_metadata()
    results = []
    for key in keys:
        code, message = outcome[key]
        s = state.partitions.get(key)
        results.append(
            controller_pb2.ElectLeadersResult(
                topic=key[0],
                partition=key[1],
                error_code=code,  # type: ignore[arg-type]
                error_message=message,
                leader=s.leader if s is not None else -1,
            )
        )
    return controller_pb2.ElectLeadersResponse(partitions=results)


async def rebalance_leaders(loop: ControllerContext) -> list[PartitionKey]:
    """Automatic leader rebalancing: a preferred election for the partitions of every broker
    whose imbalance ratio exceeds ``loop.imbalance_percent`` (partitions being reassigned
    are skipped). Returns the partitions whose leader moved."""
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    keys = [k for k in _all_keys(loop) if k in state.partitions]
    pairs = [(state.topics[t].assignment[p], state.partitions[(t, p)].leader) for t, p in keys]
    brokers = leadership.imbalanced_brokers(pairs, loop.imbalance_percent)
    changes: dict[PartitionKey, st.PartitionState] = {}
    for key in keys:
        replicas = state.topics[key[0]].assignment[key[1]]
        cur = state.partitions[key]
        if replicas[0] not in brokers or cur.reassigning:
            continue
        new, _, _ = leadership.elect_preferred(
            replicas,
            cur,
            state.brokers,
            loop.epoch,
            shutting=loop.shutting_down,
            offline=loop.offline_replicas(key),
        )
        if new is not None:
            changes[key] = new
    written = await loop.write(changes)
    if written:
        log.info("leader rebalance moved %d partitions to their preferred leader", len(written))
        loop.send_leader_and_isr(written)
        loop.send_update_metadata()
    return written
