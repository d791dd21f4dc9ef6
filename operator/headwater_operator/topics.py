"""Topic handlers.

- create / update / resume: one idempotent :func:`reconcile` (observe -> plan -> apply ->
  status). Partitions are only ever added; a decrease or a replication-factor change is
  refused with the reason in the Ready condition; configs follow the spec exactly.
- drift timer: the same reconcile every ``drift_interval_s``; config changes made outside
  Kubernetes are reverted (event DriftReverted), extra partitions are reported as a conflict.
- delete (the ``headwater.dev/finalizer`` finalizer): deletionPolicy Delete deletes the topic,
  Keep leaves it. Escape hatch: with the annotation ``headwater.dev/force-delete: "true"``, or
  after ``delete_attempts`` failed attempts (e.g. the Headwater cluster is gone), the finalizer
  is released without deleting the topic and a Warning event records it — a namespace never
  hangs in Terminating.
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


def _status(
    status: Mapping[str, Any],
    generation: int | None,
    ready: tuple[bool, str, str],
    observed: model.ObservedTopic | None,
    topic_id: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "conditions": model.set_condition(status.get("conditions"), "Ready", *ready),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    if observed is not None:
        out["topicId"] = observed.topic_id
        out["partitions"] = observed.partitions
        out["underReplicated"] = observed.under_replicated
    if topic_id:
        out["topicId"] = topic_id
    return out


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
    drift: bool,
) -> None:
    config: OperatorConfig = memo.config
    generation = meta.get("generation")
    try:
        desired = model.TopicSpec.from_resource(spec, name)
    except model.SpecError as exc:
        patch.status.update(_status(status, generation, (False, exc.reason, exc.message), None))
        raise kopf.PermanentError(exc.message) from exc
    admin = memo.admin
    # the drift timer runs beside the change handlers: one object's reconciles in turn
    lock = memo.get("lock")
    if lock is None:
        lock = memo["lock"] = asyncio.Lock()  # memo is per object (a copy of the global one)
    async with lock:
        await _reconcile_locked(
            body=body,
            status=status,
            generation=generation,
            desired=desired,
            patch=patch,
            admin=admin,
            config=config,
            retry=retry,
            logger=logger,
            drift=drift,
        )


async def _reconcile_locked(
    *,
    body: kopf.Body,
    status: kopf.Status,
    generation: int | None,
    desired: model.TopicSpec,
    patch: kopf.Patch,
    admin: Any,
    config: OperatorConfig,
    retry: int,
    logger: kopf.Logger,
    drift: bool,
) -> None:
    try:
        observed = await cluster.observe_topic(admin, desired.name)
        plan = model.plan_topic(desired, observed)
        try:
            topic_id = await cluster.apply_topic_plan(admin, desired, plan)
        except errors.TopicAlreadyExistsError:
            # stale metadata said "absent": plan again from a fresh view
            observed = await cluster.observe_topic(admin, desired.name)
            plan = model.plan_topic(desired, observed)
            topic_id = await cluster.apply_topic_plan(admin, desired, plan)
    except errors.HeadwaterError as exc:
        failure = failures.to_kopf(exc, config, retry)
        reason = "ClusterUnavailable" if failures.is_temporary(exc) else failures.reason_of(exc)
        patch.status.update(_status(status, None, (False, reason, str(exc)), None))
        raise failure from exc
    after: model.ObservedTopic | None
    if plan.create:
        after = model.ObservedTopic(
            topic_id or "", desired.partitions, desired.replication_factor, 0, desired.config
        )
    elif observed is not None and (plan.partitions_to or plan.set_config or plan.delete_config):
        after = model.ObservedTopic(
            observed.topic_id,
            plan.partitions_to or observed.partitions,
            observed.replication_factor,
            observed.under_replicated,
            desired.config,
        )
    else:
        after = observed
    ready = model.topic_ready(plan, drift=drift)
    patch.status.update(_status(status, generation, ready, after, topic_id))
    if plan.changes:
        reason = "DriftReverted" if drift and not plan.create else ready[1]
        logger.info("%s: %s", desired.name, plan.describe())
        kopf.event(body, type="Normal", reason=reason, message=f"{desired.name}: {plan.describe()}")
    previous = next(
        (c.get("reason") for c in status.get("conditions") or () if c.get("type") == "Ready"),
        None,
    )
    for refusal in plan.refusals:
        if not drift or previous != refusal.reason:  # the timer warns once, not every tick
            kopf.warn(body, reason=refusal.reason, message=refusal.message)


async def delete(
    *,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    name: str,
    memo: kopf.Memo,
    retry: int,
    logger: kopf.Logger,
) -> None:
    config: OperatorConfig = memo.config
    try:
        desired = model.TopicSpec.from_resource(spec, name)
    except model.SpecError as exc:
        logger.warning("invalid spec, nothing to delete: %s", exc.message)
        return
    if desired.deletion_policy == "Keep":
        kopf.event(
            body,
            type="Normal",
            reason="Kept",
            message=f"deletionPolicy Keep: topic {desired.name} kept",
        )
        return
    if meta.get("annotations", {}).get(model.FORCE_DELETE_ANNOTATION) == "true":
        kopf.warn(
            body,
            reason="FinalizerForced",
            message=f"{model.FORCE_DELETE_ANNOTATION}=true: finalizer released, topic "
            f"{desired.name} not deleted",
        )
        return
    try:
        deleted = await cluster.delete_topic(memo.admin, desired.name)
    except errors.HeadwaterError as exc:
        if retry + 1 >= config.delete_attempts:
            kopf.warn(
                body,
                reason="DeleteAbandoned",
                message=f"topic {desired.name} not deleted after {retry + 1} attempts "
                f"({failures.reason_of(exc)}: {exc}); finalizer released, the topic may remain",
            )
            return
        if failures.is_temporary(exc):
            raise kopf.TemporaryError(
                f"{failures.reason_of(exc)}: {exc}", delay=config.backoff(retry)
            ) from exc
        kopf.warn(body, reason=failures.reason_of(exc), message=str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    message = f"topic {desired.name} deleted" if deleted else f"topic {desired.name} was absent"
    logger.info(message)
    kopf.event(body, type="Normal", reason="Deleted", message=message)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    res = (model.GROUP, model.VERSION, model.TOPICS)

    async def on_change(**kw: Any) -> None:
        await reconcile(**_pick(kw), drift=False)

    async def on_timer(**kw: Any) -> None:
        if kw["meta"].get("deletionTimestamp"):
            return
        # already in status; a permanent error would stop this timer for good
        with contextlib.suppress(kopf.PermanentError):
            await reconcile(**_pick(kw), drift=True)

    async def on_delete(**kw: Any) -> None:
        await delete(
            body=kw["body"],
            spec=kw["spec"],
            meta=kw["meta"],
            name=kw["name"],
            memo=kw["memo"],
            retry=kw["retry"],
            logger=kw["logger"],
        )

    # retries=None: temporary errors retry forever; delete gives up by itself after
    # config.delete_attempts (the escape hatch)
    kopf.on.create(*res, id="reconcile", registry=registry)(on_change)
    kopf.on.update(*res, id="reconcile", registry=registry)(on_change)
    kopf.on.resume(*res, id="reconcile", registry=registry)(on_change)
    kopf.timer(
        *res,
        id="drift",
        interval=config.drift_interval_s,
        initial_delay=config.drift_interval_s,
        registry=registry,
    )(on_timer)
    kopf.on.delete(*res, id="delete", registry=registry)(on_delete)


def _pick(kw: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("body", "spec", "status", "meta", "name", "patch", "memo", "logger")
    out = {k: kw[k] for k in keys}
    out["retry"] = kw.get("retry", 0)
    return out
