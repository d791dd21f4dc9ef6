"""Rebalance consumer groups whose subscribed topics changed partition count.

Split (pure / I/O):

* :func:`groups_to_rebalance` — pure: given each owned group's subscribed topics and state,
  the current partition counts and the counts remembered per group, which groups must
  rebalance and what to remember next;
* :func:`watch_partition_counts` — the task ``coordinator-topic-watch``: every
  ``interval_s`` reads broker Metadata (topic -> partition count), takes a snapshot of every
  loaded owned partition, and submits ``TriggerRebalance`` (``membership.trigger_rebalance``) to
  the partition runtime owning each group that needs it. It owns ``seen`` (group -> topic ->
  count); nothing else touches it.

Rule (per owned group, ``seen[group] = Seen(generation, counts, target, attempts)``):

* only Stable groups are judged (``trigger_rebalance`` moves them to PreparingRebalance:
  members get REBALANCE_IN_PROGRESS on heartbeat and rejoin); others keep what was
  remembered, so a change seen meanwhile is acted on once the group is Stable again;
* when a Stable group is first seen, or its generation changed (a rebalance completed), its
  remembered counts are re-based on what that rebalance actually assigned: per subscribed
  topic, 1 + the highest assigned partition (``offsets.assigned_counts``), or the current
  count for a topic with nothing assigned. So a change that happened before the watch first
  saw the group, or a leader that assigned from stale metadata, is still noticed;
* a topic whose current count differs from the remembered one triggers a rebalance and the
  current counts are remembered (no second trigger in the same generation). At most
  ``MAX_ATTEMPTS`` rebalances are triggered for the same target counts (an assignor that
  leaves partitions unassigned must not make the group rebalance forever);
* topics absent from the metadata are ignored (deleted / not yet propagated is not a count
  change); groups no longer owned are forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater import errors
from headwater.client import AsyncAdminClient
from services.coordinator.group_handlers import GroupSnapshot, SnapshotGroups, TriggerRebalance
from services.coordinator.log_runtime import LogRuntime, PartitionLostError
from services.coordinator.ownership import Ownership

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
MAX_ATTEMPTS = 3

Counts = dict[str, int]


@dataclass(frozen=True)
class GroupTopics:
    """What the decision needs of one owned group."""

    group_id: str
    state: str  # GroupState value
    topics: frozenset[str]
    generation: int = 0
    assigned: Mapping[str, int] = field(default_factory=dict)  # offsets.assigned_counts


@dataclass(frozen=True)
class Seen:
    """What the watch remembers of one group (see the module doc)."""

    generation: int
    counts: Counts
    target: Counts | None = None  # the counts the last triggered rebalance was for
    attempts: int = 0  # rebalances triggered for ``target``


def groups_to_rebalance(
    groups: Iterable[GroupTopics], counts: Mapping[str, int], seen: Mapping[str, Seen]
) -> tuple[list[str], dict[str, Seen]]:
    """Pure. Returns (group ids to rebalance, sorted; the new ``seen``). See module doc."""
    trigger: list[str] = []
    new_seen: dict[str, Seen] = {}
    for g in groups:
        prev = seen.get(g.group_id)
        if g.state != "Stable":
            if prev is not None:
                new_seen[g.group_id] = prev
            continue
        now = {t: counts[t] for t in g.topics if t in counts}
        rebased = prev is None or prev.generation != g.generation
        # A subscribed topic with nothing assigned in a Stable group counts as 0 partitions:
        # the leader assigned from metadata that did not have the topic yet (a race seen
        # right after topic creation), so the group must rebalance to pick it up.
        basis = {
            t: (g.assigned.get(t, 0) if rebased or prev is None else prev.counts.get(t, n))
            for t, n in now.items()
        }
        target, attempts = (prev.target, prev.attempts) if prev is not None else (None, 0)
        if basis == now:
            new_seen[g.group_id] = Seen(g.generation, basis, target, attempts)
            continue
        attempts = attempts + 1 if target == now else 1
        if attempts <= MAX_ATTEMPTS:
            trigger.append(g.group_id)
            new_seen[g.group_id] = Seen(g.generation, now, now, attempts)
        else:  # give up on this target until the counts change again
            new_seen[g.group_id] = Seen(g.generation, now, now, attempts - 1)
    return sorted(trigger), new_seen


def _topics_of(s: GroupSnapshot) -> GroupTopics:
    return GroupTopics(s.group_id, s.state, s.topics, s.generation, s.assigned or {})


async def watch_partition_counts(
    ownership: Ownership, admin: AsyncAdminClient, interval_s: float = WATCH_INTERVAL_S
) -> None:
    """The ``coordinator-topic-watch`` task (runs until cancelled); see the module doc."""
    seen: dict[str, Seen] = {}
    while True:
        await asyncio.sleep(interval_s)
        try:
            view = await admin.metadata()
        except errors.HeadwaterError as exc:
            log.debug("topic watch: metadata unavailable: %s", exc)
            continue
        counts = {name: len(t.partitions) for name, t in view.topics.items()}
        owner: dict[str, LogRuntime[Any]] = {}
        snaps: list[GroupTopics] = []
        for rt in list(ownership.runtimes.values()):
            if not rt.loaded.is_set():
                continue
            try:
                for s in await rt.submit(SnapshotGroups()):
                    snaps.append(_topics_of(s))
                    owner[s.group_id] = rt
            except PartitionLostError:
                continue
        trigger, new_seen = groups_to_rebalance(snaps, counts, seen)
        for group_id in trigger:
            rt = owner[group_id]
            try:
                await rt.submit(TriggerRebalance(group_id))
            except PartitionLostError:
                new_seen.pop(group_id, None)  # the new owner decides
                continue
            log.info(
                "group %s: subscribed topic partition count changed (%s -> %s); rebalancing",
                group_id,
                prev.counts if (prev := seen.get(group_id)) else None,
                new_seen[group_id].counts,
            )
        seen = new_seen
