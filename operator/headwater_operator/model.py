"""Pure reconciliation logic: resource spec -> desired state, observed state -> plan, status.

Nothing here does I/O, so every decision the operator takes is unit-tested with plain values
(tests/k8s/test_operator_model.py). The handlers (:mod:`headwater_operator.topics`,
:mod:`headwater_operator.groups`) observe the cluster, call these functions and apply the plan.

The operator is *unidirectional* (like Strimzi's): the resource's spec is the truth. A change
made to the topic outside Kubernetes is reverted when it can be (configs: set keys come back
to the spec, keys absent from the spec are removed) and reported as a conflict when it cannot
(partitions cannot be removed; the replication factor is not changed by the operator): Ready
becomes False with the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

GROUP = "headwater.dev"
VERSION = "v1alpha1"
TOPICS = "topics"
CONSUMER_GROUPS = "consumergroups"

FINALIZER = "headwater.dev/finalizer"
FORCE_DELETE_ANNOTATION = "headwater.dev/force-delete"

#: Kubernetes object names are DNS-1123 subdomains; Headwater topic names are not.
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class SpecError(ValueError):
    """The resource's spec cannot be reconciled as written (a permanent error)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# ------------------------------------------------------------------------------ topics


@dataclass(frozen=True)
class TopicSpec:
    """What a Topic resource asks for."""

    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)
    deletion_policy: str = "Delete"

    @classmethod
    def from_resource(cls, spec: Mapping[str, Any], resource_name: str) -> TopicSpec:
        name = spec.get("topicName") or resource_name
        if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
            raise SpecError("InvalidTopicName", f"{name!r} is not a valid topic name")
        partitions = spec.get("partitions", 1)
        rf = spec.get("replicationFactor", 1)
        for key, value in (("partitions", partitions), ("replicationFactor", rf)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError("InvalidSpec", f"spec.{key} must be an integer >= 1")
        config = spec.get("config") or {}
        if not isinstance(config, Mapping):
            raise SpecError("InvalidSpec", "spec.config must be a map of strings")
        policy = spec.get("deletionPolicy") or "Delete"
        if policy not in ("Delete", "Keep"):
            raise SpecError("InvalidSpec", "spec.deletionPolicy must be Delete or Keep")
        return cls(
            name=name,
            partitions=partitions,
            replication_factor=rf,
            config={str(k): _config_value(v) for k, v in config.items()},
            deletion_policy=policy,
        )


def _config_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class ObservedTopic:
    """The topic as the cluster reports it."""

    topic_id: str
    partitions: int
    replication_factor: int
    under_replicated: int
    config: Mapping[str, str]  # the topic's own overrides (not defaults)


@dataclass(frozen=True)
class Refusal:
    """A difference the operator will not apply; shown as Ready=False with this reason."""

    reason: str
    message: str


@dataclass(frozen=True)
class TopicPlan:
    create: bool = False
    partitions_to: int | None = None  # CreatePartitions(total_count=...)
    set_config: Mapping[str, str] = field(default_factory=dict)
    delete_config: tuple[str, ...] = ()
    refusals: tuple[Refusal, ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.create or self.partitions_to or self.set_config or self.delete_config)

    def describe(self) -> str:
        """A one-line summary for events and logs."""
        parts = []
        if self.create:
            parts.append("created")
        if self.partitions_to:
            parts.append(f"partitions -> {self.partitions_to}")
        if self.set_config:
            parts.append("set " + ", ".join(f"{k}={v}" for k, v in sorted(self.set_config.items())))
        if self.delete_config:
            parts.append("removed " + ", ".join(self.delete_config))
        return "; ".join(parts) or "in sync"


def plan_topic(desired: TopicSpec, observed: ObservedTopic | None) -> TopicPlan:
    """The actions that bring ``observed`` to ``desired``, and what is refused.

    The result depends only on (desired, observed), never on what triggered the check: the
    change handlers and the drift timer of one object may race (kopf runs timers beside
    them), so whichever writes last must write the same status. A topic with more partitions
    than the spec is one refusal whether the spec was lowered or partitions were added
    outside Kubernetes.
    """
    if observed is None:
        return TopicPlan(create=True)
    refusals: list[Refusal] = []
    partitions_to = None
    if desired.partitions > observed.partitions:
        partitions_to = desired.partitions
    elif desired.partitions < observed.partitions:
        refusals.append(
            Refusal(
                "PartitionDecreaseRefused",
                f"spec.partitions is {desired.partitions} but the topic has "
                f"{observed.partitions} partitions; partitions cannot be removed (if they were "
                f"added outside Kubernetes, set spec.partitions to {observed.partitions})",
            )
        )
    if desired.replication_factor != observed.replication_factor:
        refusals.append(
            Refusal(
                "ReplicationFactorChangeRefused",
                f"spec.replicationFactor is {desired.replication_factor} but the topic has "
                f"{observed.replication_factor} replicas per partition; the operator does not "
                "change it (use a partition reassignment)",
            )
        )
    set_config = {k: v for k, v in desired.config.items() if observed.config.get(k) != v}
    delete_config = tuple(sorted(k for k in observed.config if k not in desired.config))
    return TopicPlan(
        partitions_to=partitions_to,
        set_config=set_config,
        delete_config=delete_config,
        refusals=tuple(refusals),
    )


# ------------------------------------------------------------------------------ conditions


def now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Conditions with ``type_`` replaced; lastTransitionTime moves only when status does."""
    out: list[dict[str, Any]] = []
    previous: Mapping[str, Any] | None = None
    for c in conditions or ():
        if c.get("type") == type_:
            previous = c
        else:
            out.append(dict(c))
    status_s = "True" if status else "False"
    if previous is not None and previous.get("status") == status_s:
        since = previous.get("lastTransitionTime") or now_iso(now)
    else:
        since = now_iso(now)
    out.append(
        {
            "type": type_,
            "status": status_s,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
    )
    return sorted(out, key=lambda c: c["type"])


def topic_ready(plan: TopicPlan, *, drift: bool) -> tuple[bool, str, str]:
    """(status, reason, message) of the Ready condition after ``plan`` was applied."""
    if plan.refusals:
        first = plan.refusals[0]
        message = " ".join(r.message for r in plan.refusals)
        return False, first.reason, message
    if plan.create:
        return True, "Created", "the topic was created"
    if plan.changes:
        reason = "DriftReverted" if drift else "Updated"
        return True, reason, plan.describe()
    return True, "InSync", "the topic matches the spec"


# ------------------------------------------------------------------------------ groups


@dataclass(frozen=True)
class ResetSpec:
    """spec.reset of a ConsumerGroup: applied once per distinct ``key``."""

    to: str  # earliest | latest | timestamp | offsets
    key: str  # spec.reset.id, or a digest of the reset when no id is given
    timestamp_ms: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset)

    @classmethod
    def from_resource(cls, reset: Mapping[str, Any] | None) -> ResetSpec | None:
        if not reset:
            return None
        to = reset.get("to")
        if to not in ("earliest", "latest", "timestamp", "offsets"):
            raise SpecError(
                "InvalidReset", "spec.reset.to must be earliest, latest, timestamp or offsets"
            )
        key = reset.get("id")
        if key is None or key == "":
            key = (
                "sha256:"
                + hashlib.sha256(
                    json.dumps(dict(reset), sort_keys=True, default=str).encode()
                ).hexdigest()[:16]
            )
        ts = None
        if to == "timestamp":
            ts = parse_timestamp_ms(reset.get("timestamp"))
        offsets: list[tuple[str, int, int]] = []
        if to == "offsets":
            for o in reset.get("offsets") or ():
                try:
                    topic, partition = str(o["topic"]), int(o["partition"])
                    offset = int(o["offset"])
                except (KeyError, TypeError, ValueError) as exc:
                    raise SpecError(
                        "InvalidReset", "each of spec.reset.offsets needs topic, partition, offset"
                    ) from exc
                if partition < 0 or offset < 0:
                    raise SpecError("InvalidReset", "partitions and offsets must be >= 0")
                offsets.append((topic, partition, offset))
            if not offsets:
                raise SpecError("InvalidReset", "spec.reset.to=offsets needs spec.reset.offsets")
        return cls(to=to, key=str(key), timestamp_ms=ts, offsets=tuple(offsets))


def parse_timestamp_ms(value: Any) -> int:
    """Milliseconds since the epoch, from an integer (ms) or an RFC 3339 / ISO 8601 string."""
    if isinstance(value, bool) or value is None or value == "":
        raise SpecError("InvalidReset", "spec.reset.to=timestamp needs spec.reset.timestamp")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SpecError(
            "InvalidReset", f"spec.reset.timestamp {text!r} is not RFC 3339 or milliseconds"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def reset_pending(reset: ResetSpec | None, status: Mapping[str, Any] | None) -> bool:
    return reset is not None and (status or {}).get("lastResetId") != reset.key


def group_status(description: Any | None) -> dict[str, Any]:
    """status fields from a :class:`headwater.client.admin_groups.GroupDescription` (None: the
    coordinator does not know the group)."""
    if description is None:
        return {"state": "Dead", "members": 0, "totalLag": 0, "partitions": []}
    return {
        "state": description.state,
        "members": len(description.members),
        "totalLag": int(description.total_lag),
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
            }
            for p in description.partitions
        ],
    }
