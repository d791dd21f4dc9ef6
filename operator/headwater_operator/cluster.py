"""The operator's only contact with Headwater: observe and change topics and groups through
:class:`headwater.client.AsyncAdminClient` (controller and coordinator RPCs)."""

from __future__ import annotations

from headwater import errors
from headwater.client.admin import AsyncAdminClient
from headwater.client.admin_configs import ConfigResource
from headwater.client.admin_groups import GroupDescription
from headwater.client.types import OffsetAndTimestamp, TopicPartition
from headwater_operator import model


async def observe_topic(admin: AsyncAdminClient, name: str) -> model.ObservedTopic | None:
    """The topic as the cluster has it now (None: it does not exist)."""
    try:
        (desc,) = await admin.describe_topics([name])
    except errors.UnknownTopicOrPartitionError:
        return None
    try:
        entries = (await admin.describe_configs([ConfigResource("topic", name)]))[
            ConfigResource("topic", name)
        ]
    except errors.UnknownTopicOrPartitionError:
        return None
    parts = desc.partitions
    rf = len(parts[0].replicas) if parts else 0
    return model.ObservedTopic(
        topic_id=desc.topic_id,
        partitions=len(parts),
        replication_factor=rf,
        under_replicated=sum(1 for p in parts if len(p.isr) < len(p.replicas)),
        config={e.name: e.value for e in entries if e.source == "topic"},
    )


async def apply_topic_plan(
    admin: AsyncAdminClient, desired: model.TopicSpec, plan: model.TopicPlan
) -> str | None:
    """Carry out ``plan``; returns the new topic id when the topic was created."""
    if plan.create:
        return await admin.create_topic(
            desired.name, desired.partitions, desired.replication_factor, desired.config
        )
    if plan.partitions_to:
        await admin.create_partitions(desired.name, plan.partitions_to)
    if plan.set_config or plan.delete_config:
        await admin.alter_topic_configs(desired.name, plan.set_config, plan.delete_config)
    return None


async def delete_topic(admin: AsyncAdminClient, name: str) -> bool:
    """Delete the topic; False when it was already gone."""
    try:
        await admin.delete_topics([name])
    except errors.UnknownTopicOrPartitionError:
        return False
    return True


async def describe_group(admin: AsyncAdminClient, group_id: str) -> GroupDescription | None:
    try:
        (desc,) = await admin.describe_groups([group_id])
    except errors.GroupIdNotFoundError:
        return None
    return desc


async def reset_offsets(
    admin: AsyncAdminClient,
    group_id: str,
    reset: model.ResetSpec,
    description: GroupDescription | None,
) -> dict[TopicPartition, int]:
    """Compute and commit the offsets of ``reset``; returns what was committed.

    earliest / latest / timestamp apply to every partition the group has committed offsets
    for (or that the coordinator lists for it); a timestamp later than every record moves to
    the end. The coordinator refuses (NON_EMPTY_GROUP) while the group has members.
    """
    if reset.to == "offsets":
        target = {TopicPartition(t, p): o for t, p, o in reset.offsets}
    else:
        partitions = set(await admin.list_consumer_group_offsets(group_id))
        if description is not None:
            partitions |= {TopicPartition(p.topic, p.partition) for p in description.partitions}
        if not partitions:
            raise errors.InvalidRequestError(
                f"group {group_id!r} has no committed offsets to reset; use to: offsets"
            )
        spec: int | str = reset.to if reset.to != "timestamp" else int(reset.timestamp_ms or 0)
        found = await admin.list_offsets(dict.fromkeys(partitions, spec))
        target = {}
        ends: dict[TopicPartition, OffsetAndTimestamp] = {}
        if reset.to == "timestamp" and any(o.offset < 0 for o in found.values()):
            ends = await admin.list_offsets(dict.fromkeys(partitions, "latest"))
        for tp, o in found.items():
            offset = o.offset
            if offset < 0:
                offset = ends[tp].offset
            target[tp] = offset
    await admin.alter_consumer_group_offsets(group_id, target)
    return target
