"""ConsumerGroup handlers.

The resource does not create the group (consumers do, by joining); it shows the group and
resets its offsets declaratively:

- status (create / update / resume, then every ``group_interval_s``): state, members,
  per-partition committed/end/lag and totalLag, from the coordinator's DescribeGroups.
- spec.reset (to earliest | latest | timestamp | offsets) is applied once per distinct
  ``reset.id`` (or, without an id, per distinct reset): status.lastResetId records the last
  applied one. While the group has members the reset is refused — condition OffsetReset=False
  with reason GroupActive — and applied as soon as the group is empty (the next status
  refresh), so the consumers must be stopped first, as with ``headwater groups reset``.
- deleting the resource leaves the group alone (no finalizer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import kopf

from headwater import errors
from headwater_operator import cluster, failures, model
from headwater_operator.config import OperatorConfig


async def reconcile(
    *,
    body: kopf.Body,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    name: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    retry: int,
    logger: kopf.Logger,
) -> None:
    config: OperatorConfig = memo.config
    conditions = list(status.get("conditions") or ())
    group_id = spec.get("groupId") or name
    try:
        reset = model.ResetSpec.from_resource(spec.get("reset"))
    except model.SpecError as exc:
        conditions = model.set_condition(conditions, "OffsetReset", False, exc.reason, exc.message)
        patch.status["conditions"] = conditions
        raise kopf.PermanentError(exc.message) from exc
    admin = memo.admin
    try:
        description = await cluster.describe_group(admin, group_id)
        if model.reset_pending(reset, status):
            assert reset is not None
            if description is not None and description.members:
                message = (
                    f"reset {reset.key} refused: group {group_id} has "
                    f"{len(description.members)} active member(s); it is applied once the "
                    "group is empty"
                )
                if _reason(conditions, "OffsetReset") != "GroupActive":
                    kopf.warn(body, reason="GroupActive", message=message)
                conditions = model.set_condition(
                    conditions, "OffsetReset", False, "GroupActive", message
                )
            else:
                try:
                    applied = await cluster.reset_offsets(admin, group_id, reset, description)
                except (errors.NonEmptyGroupError, errors.UnknownMemberIdError) as exc:
                    # a member joined meanwhile (the coordinator refuses outside commits)
                    conditions = model.set_condition(
                        conditions, "OffsetReset", False, "GroupActive", str(exc)
                    )
                except (errors.InvalidRequestError, errors.UnknownTopicOrPartitionError) as exc:
                    # not retriable as written: wait for a new reset
                    conditions = model.set_condition(
                        conditions, "OffsetReset", False, failures.reason_of(exc), str(exc)
                    )
                    patch.status["lastResetId"] = reset.key
                else:
                    message = f"reset {reset.key} to {reset.to}: " + ", ".join(
                        f"{tp.topic}[{tp.partition}]={off}" for tp, off in sorted(applied.items())
                    )
                    logger.info(message)
                    kopf.event(body, type="Normal", reason="OffsetsReset", message=message)
                    conditions = model.set_condition(
                        conditions, "OffsetReset", True, "Applied", message
                    )
                    patch.status["lastResetId"] = reset.key
                    description = await cluster.describe_group(admin, group_id)
    except errors.HeadwaterError as exc:
        conditions = model.set_condition(
            conditions,
            "Ready",
            False,
            "ClusterUnavailable" if failures.is_temporary(exc) else failures.reason_of(exc),
            str(exc),
        )
        patch.status["conditions"] = conditions
        raise failures.to_kopf(exc, config, retry) from exc
    patch.status.update(model.group_status(description))
    found = description is not None
    conditions = model.set_condition(
        conditions,
        "Ready",
        True,
        "Observed" if found else "GroupNotFound",
        f"group {group_id} is {description.state}"
        if found and description
        else f"the coordinator does not know group {group_id} (no consumer has joined yet)",
    )
    patch.status["conditions"] = conditions
    patch.status["observedGeneration"] = meta.get("generation")


def _reason(conditions: list[Any], type_: str) -> str | None:
    return next((c.get("reason") for c in conditions if c.get("type") == type_), None)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    res = (model.GROUP, model.VERSION, model.CONSUMER_GROUPS)

    async def on_change(**kw: Any) -> None:
        async with _lock(kw["memo"]):
            await reconcile(**_pick(kw))

    async def on_timer(**kw: Any) -> None:
        # already in status; a permanent error would stop this timer for good
        with contextlib.suppress(kopf.PermanentError):
            async with _lock(kw["memo"]):
                await reconcile(**_pick(kw))

    kopf.on.create(*res, id="reconcile", registry=registry)(on_change)
    kopf.on.update(*res, id="reconcile", registry=registry)(on_change)
    kopf.on.resume(*res, id="reconcile", registry=registry)(on_change)
    kopf.timer(
        *res,
        id="status",
        interval=config.group_interval_s,
        initial_delay=config.group_interval_s,
        registry=registry,
    )(on_timer)


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    """One object's reconciles in turn (the status timer runs beside the change handlers; a
    reset must not be applied twice). kopf's memo is per object."""
    lock = memo.get("lock")
    if lock is None:
        lock = memo["lock"] = asyncio.Lock()
    return lock


def _pick(kw: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("body", "spec", "status", "meta", "name", "patch", "memo", "logger")
    out = {k: kw[k] for k in keys}
    out["retry"] = kw.get("retry", 0)
    return out
