"""Rebalance consumer groups whose subscribed topics changed partition count.

Split (pure / I/O):

* :func:`groups_to_rebalance` — pure: given each owned group's subscribed topics and state,
  the current partition counts and the counts remembered per group, which groups must
  rebalance and what to remember next;
* :func:`watch_partition_counts` — the task ``coordinator-topic-watch``: every
  ``interval_s`` reads broker Metadata (topic -> partition count), takes a snapshot of every
  loaded owned partition, and submits ``"rebalance"`` (``membership.trigger_rebalance``) to
  the partition runtime owning each group that needs it. It owns ``seen`` (group -> topic ->
  count); nothing else touches it.

Rule: a group's counts are remembered at first sight (per topic: the first count observed
while the group subscribes to it) and replaced by the current counts when a rebalance is
triggered. Only Stable / CompletingRebalance groups are triggered (``trigger_rebalance``
moves them to PreparingRebalance: members get REBALANCE_IN_PROGRESS on heartbeat and
rejoin); a group in another state keeps its remembered counts, so a change seen meanwhile
is acted on once it is Stable again. Topics absent from the metadata are ignored (a deleted
or not yet propagated topic is not a partition count change). Groups no longer owned are
forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headwater import errors
from headwater.client import AsyncAdminClient
from services.coordinator.ownership import Ownership
from services.coordinator.runtime import GroupSnapshot, PartitionLostError, PartitionRuntime

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
TRIGGERABLE_STATES = frozenset({"Stable", "CompletingRebalance"})

Counts = dict[str, int]


@dataclass(frozen=True)
class GroupTopics:
    """What the decision needs of one owned group."""

    group_id: str
    state: str  # GroupState value
    topics: frozenset[str]


def groups_to_rebalance(
    groups: Iterable[GroupTopics],
    counts: Mapping[str, int],
    seen: Mapping[str, Mapping[str, int]],
) -> tuple[list[str], dict[str, Counts]]:
    """Pure. Returns (group ids to rebalance, sorted; the new ``seen``). See module doc."""
    trigger: list[str] = []
    new_seen: dict[str, Counts] = {}
    for g in groups:
        now = {t: counts[t] for t in g.topics if t in counts}
        before = dict(seen.get(g.group_id, {}))
        changed = any(t in before and before[t] != n for t, n in now.items())
        if changed and g.state in TRIGGERABLE_STATES:
            trigger.append(g.group_id)
            new_seen[g.group_id] = now
        else:
            # keep what was remembered (a pending change), learn topics seen for the 1st time
            new_seen[g.group_id] = {t: before.get(t, n) for t, n in now.items()}
    return sorted(trigger), new_seen


def _topics_of(s: GroupSnapshot) -> GroupTopics:
    return GroupTopics(s.group_id, s.state, s.topics)


async def watch_partition_counts(
    ownership: Ownership, admin: AsyncAdminClient, interval_s: float = WATCH_INTERVAL_S
) -> None:
    """The ``coordinator-topic-watch`` task (runs until cancelled); see the module doc."""
    seen: dict[str, Counts] = {}
    while True:
        await asyncio.sleep(interval_s)
        try:
            view = await admin.metadata()
        except errors.HeadwaterError as exc:
            log.debug("topic watch: metadata unavailable: %s", exc)
            continue
        counts = {name: len(t.partitions) for name, t in view.topics.items()}
        owner: dict[str, PartitionRuntime] = {}
        snaps: list[GroupTopics] = []
        for rt in list(ownership.runtimes.values()):
            if not rt.loaded.is_set():
                continue
            try:
                for s in await rt.submit("snapshot", None):
                    snaps.append(_topics_of(s))
                    owner[s.group_id] = rt
            except PartitionLostError:
                continue
        trigger, new_seen = groups_to_rebalance(snaps, counts, seen)
        for group_id in trigger:
            rt = owner[group_id]
            try:
                await rt.submit("rebalance", group_id)
            except PartitionLostError:
                new_seen.pop(group_id, None)  # the new owner decides
                continue
            log.info(
                "group %s: subscribed topic partition count changed (%s -> %s); rebalancing",
                group_id,
                seen.get(group_id),
                new_seen[group_id],
            )
        seen = new_seen
