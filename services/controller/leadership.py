"""Partition leadership decisions: pure functions (no I/O) used by the controller's event
loop and tested directly.

Vocabulary: ``replicas`` is the partition's replica list (``replicas[0]`` is the preferred
leader); ``live`` the brokers registered in etcd; ``shutting`` the live brokers in controlled
shutdown (alive, but never elected and dropped from ISRs); ``offline`` the live brokers whose
replica of this one partition is offline (the broker refused to host it, answering
LeaderAndIsr with ``KAFKA_STORAGE_ERROR``: Kafka's offline replica, KIP-112): never elected,
dropped from the ISR, not let back into it by a leader's AlterPartition, and no longer
leading it. Every function returns the
partition's *next* state, or None when nothing changes; a returned state keeps
``current.mod_revision`` (the value the fenced write compares).

Epoch rules (Kafka's): ``leader_epoch`` + 1 on every leader change (including to -1);
``partition_epoch`` + 1 on every change of anything; ``controller_epoch`` = the writer's.

Invariants: a leader is elected only from the ISR (ISR ∩ eligible, in replica order so the
preferred replica wins when it qualifies) unless unclean election is enabled for the topic
and no ISR member is eligible; then any eligible replica, with ISR = [it]. With no eligible
candidate the leader becomes -1 and the ISR is kept, so that its last members are the ones
elected when they return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from headwater.v1.errors_pb2 import ErrorCode
from services.controller import state as st

NO_SHUTDOWN: frozenset[int] = frozenset()


def _changed(
    current: st.PartitionState,
    controller_epoch: int,
    *,
    leader: int | None = None,
    isr: tuple[int, ...] | None = None,
) -> st.PartitionState:
    new_leader = current.leader if leader is None else leader
    return dataclasses.replace(
        current,
        leader=new_leader,
        leader_epoch=current.leader_epoch + (new_leader != current.leader),
        isr=current.isr if isr is None else isr,
        partition_epoch=current.partition_epoch + 1,
        controller_epoch=controller_epoch,
    )


def elect(
    replicas: list[int],
    current: st.PartitionState | None,
    live: Collection[int],
    controller_epoch: int,
    *,
    unclean: bool = False,
    shutting: Collection[int] = NO_SHUTDOWN,
    offline: Collection[int] = NO_SHUTDOWN,
) -> st.PartitionState | None:
    """The partition's next state given the live brokers (the broker-change election).

    ``current`` None: a new partition (leader = first eligible replica, ISR = eligible
    replicas, or every replica when none is alive). A healthy leader keeps leading and only
    dead, shutting-down or offline members leave its ISR. A leader in controlled shutdown with
    no eligible successor keeps leading (ControlledShutdown reports it as remaining); an
    offline leader with none gives way to leader -1 (its replica does not exist).
    """
    eligible = [r for r in replicas if r in live and r not in shutting and r not in offline]
    if current is None:
        return st.PartitionState(
            leader=eligible[0] if eligible else -1,
            leader_epoch=0,
            isr=tuple(eligible or replicas),
            partition_epoch=0,
            controller_epoch=controller_epoch,
        )
    in_isr = tuple(b for b in current.isr if b in eligible)
    if current.leader in eligible:
        if in_isr == current.isr:
            return None
        return _changed(current, controller_epoch, isr=in_isr)
    candidates = [r for r in eligible if r in current.isr]
    if candidates:
        return _changed(current, controller_epoch, leader=candidates[0], isr=in_isr)
    if current.leader in live and current.leader not in offline:
        return None  # shutting down, nobody to take over: stays for now
    if unclean and eligible:
        return _changed(current, controller_epoch, leader=eligible[0], isr=(eligible[0],))
    if current.leader == -1:
        return None
    return _changed(current, controller_epoch, leader=-1)


def shutdown_move(
    replicas: list[int],
    current: st.PartitionState,
    live: Collection[int],
    shutting: Collection[int],
    controller_epoch: int,
    *,
    offline: Collection[int] = NO_SHUTDOWN,
) -> st.PartitionState | None:
    """ControlledShutdown of the brokers in ``shutting``: leadership moves to another live ISR
    member not ``offline``; a shutting-down follower leaves the ISR when others remain in it.
    A shutting-down leader with no other eligible ISR member keeps leading (None)."""
    eligible = [r for r in replicas if r in live and r not in shutting and r not in offline]
    if current.leader in shutting:
        candidates = [r for r in eligible if r in current.isr]
        if not candidates:
            return None
        isr = tuple(b for b in current.isr if b not in shutting)
        return _changed(current, controller_epoch, leader=candidates[0], isr=isr)
    isr = tuple(b for b in current.isr if b not in shutting)
    if isr == current.isr or not isr:
        return None
    return _changed(current, controller_epoch, isr=isr)


def elect_preferred(
    replicas: list[int],
    current: st.PartitionState,
    live: Collection[int],
    controller_epoch: int,
    *,
    shutting: Collection[int] = NO_SHUTDOWN,
    offline: Collection[int] = NO_SHUTDOWN,
) -> tuple[st.PartitionState | None, int, str]:
    """Preferred-replica election: ``(new state or None, ErrorCode, message)``.

    ELECTION_NOT_NEEDED when ``replicas[0]`` already leads; PREFERRED_LEADER_NOT_AVAILABLE
    when it is not alive, shutting down, its replica is ``offline``, or it is not in the ISR
    (leadership is never moved outside the ISR)."""
    preferred = replicas[0]
    if current.leader == preferred:
        return None, ErrorCode.ELECTION_NOT_NEEDED, f"broker {preferred} already leads"
    if preferred not in live or preferred in shutting:
        return (
            None,
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"preferred leader {preferred} is not alive",
        )
    if preferred in offline:
        return (
            None,
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"preferred leader {preferred}'s replica is offline (it refused to host it)",
        )
    if preferred not in current.isr:
        return (
            None,
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"preferred leader {preferred} is not in the ISR {list(current.isr)}",
        )
    return _changed(current, controller_epoch, leader=preferred), ErrorCode.NONE, ""


def elect_unclean(
    replicas: list[int],
    current: st.PartitionState,
    live: Collection[int],
    controller_epoch: int,
    *,
    shutting: Collection[int] = NO_SHUTDOWN,
    offline: Collection[int] = NO_SHUTDOWN,
) -> tuple[st.PartitionState | None, int, str]:
    """Operator-requested unclean election of an offline partition: a live ISR member if one
    exists (clean), else any live replica with ISR = [it] — possibly losing committed records;
    never a replica ``offline``. ELECTION_NOT_NEEDED when the partition has a live leader
    whose replica is not offline."""
    if current.leader in live and current.leader not in offline:
        return None, ErrorCode.ELECTION_NOT_NEEDED, f"broker {current.leader} leads"
    new = elect(
        replicas,
        current,
        live,
        controller_epoch,
        unclean=True,
        shutting=shutting,
        offline=offline,
    )
    if new is None or new.leader == -1:
        return (
            None,
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no live replica among {replicas}",
        )
    return new, ErrorCode.NONE, ""


def imbalanced_brokers(
    leaders: Iterable[tuple[list[int], int]], threshold_percent: float = 10.0
) -> set[int]:
    """Brokers whose leader imbalance ratio exceeds ``threshold_percent`` (Kafka's
    ``leader.imbalance.per.broker.percentage``): of the partitions whose preferred replica is
    the broker, the share it does not lead. ``leaders``: (replicas, leader) per partition."""
    preferred: dict[int, int] = {}
    not_led: dict[int, int] = {}
    for replicas, leader in leaders:
        if not replicas:
            continue
        b = replicas[0]
        preferred[b] = preferred.get(b, 0) + 1
        if leader != b:
            not_led[b] = not_led.get(b, 0) + 1
    return {b for b, n in preferred.items() if 100.0 * not_led.get(b, 0) / n > threshold_percent}


def check_isr_change(
    replicas: list[int],
    current: st.PartitionState,
    new_isr: list[int],
    live: Mapping[int, object] | Collection[int],
    shutting: Collection[int] = NO_SHUTDOWN,
    offline: Collection[int] = NO_SHUTDOWN,
) -> tuple[int, str] | None:
    """Why an AlterPartition ISR is refused, as ``(ErrorCode, message)``, or None when it is
    valid. INVALID_REQUEST: empty, duplicates, not a subset of the replicas, or without the
    leader. INELIGIBLE_REPLICA (Kafka's rule, KIP-841): a member being *added* is not alive,
    is shutting down, or is an offline replica of this partition (``offline``). Members
    kept from the current ISR are not checked (dropping them is the controller's job)."""
    if not new_isr:
        return ErrorCode.INVALID_REQUEST, "the new ISR is empty"
    if len(set(new_isr)) != len(new_isr):
        return ErrorCode.INVALID_REQUEST, f"the new ISR {new_isr} has duplicates"
    outside = [b for b in new_isr if b not in replicas]
    if outside:
        return (
            ErrorCode.INVALID_REQUEST,
            f"brokers {outside} in the new ISR are not replicas {replicas}",
        )
    if current.leader not in new_isr:
        return (
            ErrorCode.INVALID_REQUEST,
            f"the new ISR {new_isr} does not contain the leader {current.leader}",
        )
    added = [b for b in new_isr if b not in current.isr]
    ineligible = [b for b in added if b not in live or b in shutting or b in offline]
    if ineligible:
        return (
            ErrorCode.INELIGIBLE_REPLICA,
            f"brokers {ineligible} cannot join the ISR (not alive, shutting down, or their "
            "replica is offline)",
        )
    return None
