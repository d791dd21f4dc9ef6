"""Topic commands, run on the controller's event-loop task (``ControllerLoop.submit``).

Each command validates everything before writing anything: a topic that fails validation
gets its error code and message in its result and changes nothing in etcd. Valid topics of
the same request are still applied (Kafka's per-topic semantics). ``validate_only`` runs the
validation and writes nothing.

Rules (Kafka's): names of 1..249 characters from ``[a-zA-Z0-9._-]``, not ``.`` or ``..``, and
not colliding with an existing topic when ``.`` and ``_`` are considered equal;
1 <= partitions <= :data:`MAX_PARTITIONS`; 1 <= replication factor <= live brokers; at most
:data:`MAX_TOPICS_PER_REQUEST` topics and :data:`MAX_PARTITIONS_PER_REQUEST` partitions in one
request; configs
checked by :func:`headwater.config.validate_topic_configs`; a name given twice in one request
is INVALID_REQUEST for both. Then the caller's controller mutation rate
(:mod:`services.controller.mutation_quota`, a ``gate``): a valid topic it refuses gets
THROTTLING_QUOTA_EXCEEDED and is not created (deleted, grown); the response's
``throttle_time_ms`` says when the next mutation would be admitted.

Writes: the topic key first (the commit point), fenced by the controller epoch and by the key's
absence (create) or mod revision (update); then the partition states (``state``). Each write,
once it has succeeded, is applied to the loop's state as its change record
(:mod:`services.controller.cluster_state`: TopicCreated, TopicChanged, TopicDeleted,
PartitionChanged). Brokers are told afterwards through the loop's batched LeaderAndIsr /
UpdateMetadata / StopReplica.
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any, cast

from headwater import errors
from headwater.config import TOPIC_KEYS, validate_topic_configs
from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.v1 import controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import cluster_state as cs
from services.controller import placement
from services.controller import state as st
from services.controller.events import ControllerLoop
from services.controller.leadership import elect
from services.controller.mutation_quota import Gate

MAX_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000
#: Hostile-input limits of one CreateTopics request, checked before anything is written:
#: more topics fail the whole request with INVALID_REQUEST, more partitions in total (over
#: the topics whose own count is legal) with INVALID_PARTITIONS; nothing is created.
MAX_TOPICS_PER_REQUEST = 1_000
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal topic name."""
    if not name:
        raise errors.InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise errors.InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise errors.InvalidTopicError(
            f"topic name is {len(name)} characters long; at most {MAX_NAME_LENGTH} allowed"
        )
    if not _LEGAL.match(name):
        raise errors.InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'"
        )


def _result(
    name: str, topic_id: str = "", exc: errors.HeadwaterError | None = None
) -> controller_pb2.TopicResult:
    if exc is None:
        return controller_pb2.TopicResult(name=name, topic_id=topic_id, error_code=ErrorCode.NONE)
    return controller_pb2.TopicResult(
        name=name, topic_id=topic_id, error_code=cast(Any, exc.code), error_message=exc.message
    )


def _throttle(gate: Gate | None) -> int:
    return 0 if gate is None else gate.throttle_ms()


def _racks(loop: ControllerLoop) -> dict[int, str | None]:
    assert loop.state is not None
    return {b.broker_id: b.rack or None for b in loop.state.brokers.values()}


def _check_partitions(count: int) -> None:
    if count < 1:
        raise errors.InvalidPartitionsError(f"number of partitions must be >= 1, got {count}")
    if count > MAX_PARTITIONS:
        raise errors.InvalidPartitionsError(
            f"number of partitions must be <= {MAX_PARTITIONS}, got {count}"
        )


#: What CreateTopics uses for a NewTopic that leaves ``partitions`` / ``replication_factor`` 0
#: (unset in proto3): one partition, and three replicas or as many as there are live brokers.
DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 3


def _shape(new: controller_pb2.NewTopic, live: int) -> tuple[int, int]:
    """``(partitions, replication_factor)`` of ``new`` with 0 replaced by the defaults."""
    partitions = new.partitions or DEFAULT_PARTITIONS
    rf = new.replication_factor or min(DEFAULT_REPLICATION_FACTOR, max(live, 1))
    return partitions, rf


def _check_rf(rf: int, live: int) -> None:
    if rf < 1:
        raise errors.InvalidReplicationFactorError(f"replication factor must be >= 1, got {rf}")
    if rf > live:
        raise errors.InvalidReplicationFactorError(
            f"replication factor {rf} is larger than the number of live brokers ({live})"
        )


def _collision(name: str, existing: Mapping[str, cluster_layout.Topic]) -> str | None:
    norm = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == norm:
            return other
    return None


async def create_topics(
    loop: ControllerLoop, request: controller_pb2.CreateTopicsRequest, gate: Gate | None = None
) -> controller_pb2.CreateTopicsResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    if len(request.topics) > MAX_TOPICS_PER_REQUEST:
        raise errors.InvalidRequestError(
            f"{len(request.topics)} topics in one request; at most {MAX_TOPICS_PER_REQUEST}"
        )
    shapes = [_shape(t, len(state.brokers)) for t in request.topics]
    total = sum(n for n, _ in shapes if 1 <= n <= MAX_PARTITIONS)
    if total > MAX_PARTITIONS_PER_REQUEST:
        raise errors.InvalidPartitionsError(
            f"{total} partitions in one request; at most {MAX_PARTITIONS_PER_REQUEST}"
        )
    counts = Counter(t.name for t in request.topics)
    results: list[controller_pb2.TopicResult] = []
    created: list[tuple[str, int]] = []
    for new, (partitions, rf) in zip(request.topics, shapes, strict=True):
        try:
            if counts[new.name] > 1:
                raise errors.InvalidRequestError(f"topic {new.name!r} is given more than once")
            validate_topic_name(new.name)
            if new.name in state.topics:
                raise errors.TopicAlreadyExistsError(f"topic {new.name!r} already exists")
            other = _collision(new.name, state.topics)
            if other is not None:
                raise errors.InvalidTopicError(
                    f"topic {new.name!r} collides with existing topic {other!r}"
                    " ('.' and '_' are equivalent in metric names)"
                )
            _check_partitions(partitions)
            _check_rf(rf, len(state.brokers))
            configs = validate_topic_configs(dict(new.configs))
            assignment = placement.assign_replicas(
                _racks(loop),
                partitions,
                rf,
                start_index=random.randrange(len(state.brokers)),
            )
            if gate is not None and not request.validate_only:
                gate.admit(partitions)
        except errors.HeadwaterError as exc:
            results.append(_result(new.name, exc=exc))
            continue
        if request.validate_only:
            results.append(_result(new.name))
            continue
        topic = cluster_layout.Topic(new.name, uuid.uuid4().hex, assignment, configs)
        rev = await st.fenced_write(
            loop.etcd,
            loop.epoch,
            [hetcd.cmp_absent(cluster_layout.topic_key(new.name))],
            [
                hetcd.op_put(cluster_layout.topic_key(new.name), topic.encode()),
                hetcd.op_delete_prefix(cluster_layout.partitions_prefix(new.name)),
            ],
        )
        topic = dataclasses.replace(topic, mod_revision=rev)
        state.apply(cs.TopicCreated(topic))
        await _init_partitions(loop, topic, sorted(assignment))
        created += [(new.name, p) for p in sorted(assignment)]
        results.append(_result(new.name, topic.topic_id))
    if created:
        loop.send_leader_and_isr(created)
        loop.send_update_metadata()
    return controller_pb2.CreateTopicsResponse(topics=results, throttle_time_ms=_throttle(gate))


async def _init_partitions(
    loop: ControllerLoop, topic: cluster_layout.Topic, parts: list[int]
) -> None:
    assert loop.state is not None and loop.epoch is not None
    live = set(loop.state.brokers)
    states = {
        p: elect(topic.assignment[p], None, live, loop.epoch, shutting=loop.shutting_down)
        for p in parts
    }
    written = await st.write_partition_states(
        loop.etcd,
        loop.epoch,
        topic.name,
        {p: s for p, s in states.items() if s is not None},
    )
    for p, s in written.items():
        loop.state.apply(cs.PartitionChanged(topic.name, p, s))


async def delete_topics(
    loop: ControllerLoop, request: controller_pb2.DeleteTopicsRequest, gate: Gate | None = None
) -> controller_pb2.DeleteTopicsResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    counts = Counter(request.names)
    results: list[controller_pb2.TopicResult] = []
    stopped: list[tuple[tuple[str, int], list[int]]] = []
    for name in request.names:
        topic = state.topics.get(name)
        try:
            if counts[name] > 1:
                raise errors.InvalidRequestError(f"topic {name!r} is given more than once")
            if topic is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if gate is not None:
                gate.admit(len(topic.assignment))
        except errors.HeadwaterError as exc:
            results.append(_result(name, exc=exc))
            continue
        await st.fenced_write(
            loop.etcd,
            loop.epoch,
            [hetcd.cmp_mod(cluster_layout.topic_key(name), "==", topic.mod_revision)],
            [
                hetcd.op_delete(cluster_layout.topic_key(name)),
                hetcd.op_delete_prefix(cluster_layout.partitions_prefix(name)),
            ],
        )
        state.apply(cs.TopicDeleted(name))
        stopped += [((name, p), replicas) for p, replicas in topic.assignment.items()]
        results.append(_result(name, topic.topic_id))
    if stopped:
        loop.send_update_metadata()
        loop.send_stop_replica(stopped, delete=True)
    return controller_pb2.DeleteTopicsResponse(topics=results, throttle_time_ms=_throttle(gate))


async def create_partitions(
    loop: ControllerLoop,
    request: controller_pb2.CreatePartitionsRequest,
    gate: Gate | None = None,
) -> controller_pb2.CreatePartitionsResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    topic = state.topics.get(request.topic)
    try:
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
        current = len(topic.assignment)
        if request.total_count <= current:
            raise errors.InvalidPartitionsError(
                f"topic {request.topic!r} has {current} partitions; the new total"
                f" ({request.total_count}) must be larger (partitions can only be added)"
            )
        _check_partitions(request.total_count)
        rf = len(topic.assignment[0])
        _check_rf(rf, len(state.brokers))
        added = placement.assign_replicas(
            _racks(loop),
            request.total_count - current,
            rf,
            start_index=placement.start_index_for(list(state.brokers), topic.assignment[0][0]),
            start_partition=current,
        )
        if gate is not None and not request.validate_only:
            gate.admit(len(added))
    except errors.HeadwaterError as exc:
        tid = topic.topic_id if topic is not None else ""
        return controller_pb2.CreatePartitionsResponse(
            result=_result(request.topic, tid, exc), throttle_time_ms=_throttle(gate)
        )
    if not request.validate_only:
        updated = await _replace_topic(
            loop,
            topic,
            cluster_layout.Topic(
                topic.name, topic.topic_id, {**topic.assignment, **added}, dict(topic.configs)
            ),
        )
        await _init_partitions(loop, updated, sorted(added))
        loop.send_leader_and_isr([(topic.name, p) for p in sorted(added)])
        loop.send_update_metadata()
    return controller_pb2.CreatePartitionsResponse(
        result=_result(topic.name, topic.topic_id), throttle_time_ms=_throttle(gate)
    )


async def _replace_topic(
    loop: ControllerLoop, before: cluster_layout.Topic, after: cluster_layout.Topic
) -> cluster_layout.Topic:
    """Write ``after`` over the topic key (fenced by ``before``'s mod revision) and apply it as
    TopicChanged; returns it with its new mod revision."""
    assert loop.state is not None and loop.epoch is not None
    rev = await st.fenced_write(
        loop.etcd,
        loop.epoch,
        [hetcd.cmp_mod(cluster_layout.topic_key(before.name), "==", before.mod_revision)],
        [hetcd.op_put(cluster_layout.topic_key(after.name), after.encode())],
    )
    after = dataclasses.replace(after, mod_revision=rev)
    loop.state.apply(cs.TopicChanged(after))
    return after


async def alter_topic_configs(
    loop: ControllerLoop, request: controller_pb2.AlterTopicConfigsRequest
) -> controller_pb2.AlterTopicConfigsResponse:
    assert loop.state is not None and loop.epoch is not None
    state = loop.state
    topic = state.topics.get(request.topic)
    try:
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
        to_set = validate_topic_configs(dict(request.set))
        for key in request.delete:
            if key not in TOPIC_KEYS:
                raise errors.InvalidConfigError(f"unknown topic config {key!r}")
        both = sorted(set(to_set) & set(request.delete))
        if both:
            raise errors.InvalidRequestError(f"configs both set and deleted: {', '.join(both)}")
        configs = {k: v for k, v in topic.configs.items() if k not in set(request.delete)}
        configs.update(to_set)
    except errors.HeadwaterError as exc:
        tid = topic.topic_id if topic is not None else ""
        return controller_pb2.AlterTopicConfigsResponse(result=_result(request.topic, tid, exc))
    if not request.validate_only and configs != topic.configs:
        updated = await _replace_topic(
            loop,
            topic,
            cluster_layout.Topic(topic.name, topic.topic_id, dict(topic.assignment), configs),
        )
        loop.send_update_metadata()
        # e.g. unclean.leader.election.enable turned on: an offline partition gets a leader
        await loop.reelect([(topic.name, p) for p in sorted(updated.assignment)])
    return controller_pb2.AlterTopicConfigsResponse(result=_result(topic.name, topic.topic_id))
