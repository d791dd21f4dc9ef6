"""Partition leader election: which broker leads, and the ISR, given the live brokers.

A pure function (no I/O) used by the controller's event loop and tested directly.
"""

from __future__ import annotations

import dataclasses

from services.controller import state as st


def elect(
    replicas: list[int],
    current: st.PartitionState | None,
    live: set[int],
    controller_epoch: int,
    *,
    unclean: bool = False,
) -> st.PartitionState | None:
    """The partition's next state given the live brokers, or None when nothing changes.

    ``current`` None: a new partition (leader = first live replica, ISR = live replicas).
    The returned state keeps ``current.mod_revision`` (the value the write compares).
    """
    if current is None:
        alive = [r for r in replicas if r in live]
        return st.PartitionState(
            leader=alive[0] if alive else -1,
            leader_epoch=0,
            isr=tuple(alive or replicas),
            partition_epoch=0,
            controller_epoch=controller_epoch,
        )
    pe = current.partition_epoch + 1
    if current.leader in live:
        isr = tuple(b for b in current.isr if b in live)
        if isr == current.isr:
            return None
        return dataclasses.replace(
            current, isr=isr, partition_epoch=pe, controller_epoch=controller_epoch
        )
    candidates = [r for r in replicas if r in current.isr and r in live]
    isr = tuple(b for b in current.isr if b in live)
    if not candidates and unclean:
        candidates = [r for r in replicas if r in live]
        isr = tuple(candidates[:1])
    if candidates:
        return dataclasses.replace(
            current,
            leader=candidates[0],
            leader_epoch=current.leader_epoch + 1,
            isr=isr,
            partition_epoch=pe,
            controller_epoch=controller_epoch,
        )
    if current.leader == -1:
        return None
    return dataclasses.replace(
        current,
        leader=-1,
        leader_epoch=current.leader_epoch + 1,
        partition_epoch=pe,
        controller_epoch=controller_epoch,
    )
