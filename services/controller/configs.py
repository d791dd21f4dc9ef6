"""DescribeConfigs and AlterConfigs: topics, brokers, clients, users, (user, client-id).

Storage: :mod:`headwater.config_entities` (etcd layout); keys, types and checks:
:mod:`headwater.config`. Topic overrides are altered by the same code as AlterTopicConfigs
(:func:`services.controller.topics.alter_topic_configs`), so both RPCs behave alike.

AlterConfigs runs on the controller's event-loop task. Every resource is validated before
anything is written: an invalid resource (unknown key, bad type, out of range, read-only key,
unknown topic, bad entity name, a resource given twice, a key both set and deleted) gets its
error in its result and changes nothing; valid resources of the same request are applied
(Kafka's per-resource semantics). An entity write is one etcd transaction fenced by the
controller epoch and by the entity key's mod revision as read; an entity left with no keys is
deleted. Brokers watch ``/headwater/configs/`` and apply changes without restart.

DescribeConfigs reads etcd directly, so any controller answers it. Sources: a topic override
(TOPIC), brokers/<id> (DYNAMIC_BROKER), brokers/<default> or a less specific quota entity
(DYNAMIC_DEFAULT), a broker start-up flag as registered (STATIC_BROKER), the built-in
default (DEFAULT), the client/user entity itself (ENTITY). Without ``include_defaults`` only
the entries set on the resource itself are returned.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any, cast

from headwater import config as hconfig
from headwater import config_entities as ce
from headwater import errors
from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.v1 import controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import state as st
from services.controller import topics
from services.controller.events import ControllerLoop

R = controller_pb2.ConfigResourceType
S = controller_pb2.ConfigSource
_KIND: dict[int, ce.EntityKind] = {
    R.CONFIG_BROKER: "broker",
    R.CONFIG_CLIENT: "client",
    R.CONFIG_USER: "user",
}


def entity_of(res: controller_pb2.ConfigResource) -> ce.Entity:
    """The entity a (non-topic) resource names; InvalidRequestError for a bad name."""
    kind = _KIND.get(res.type)
    if kind is None:
        raise errors.InvalidRequestError(f"unknown config resource type {res.type}")
    if kind != "user" and res.client_id:
        raise errors.InvalidRequestError("client_id is only allowed with a user resource")
    return ce.entity(kind, res.name, res.client_id or None)


def _table(kind: ce.EntityKind) -> dict[str, hconfig.ConfigKey]:
    return hconfig.BROKER_KEYS if kind == "broker" else hconfig.QUOTA_KEYS


def _validate(kind: ce.EntityKind, values: Mapping[str, str]) -> dict[str, str]:
    if kind == "broker":
        return hconfig.validate_broker_configs(values)
    return hconfig.validate_quota_configs(values)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _key(res: controller_pb2.ConfigResource) -> tuple[int, str, str]:
    return (res.type, res.name, res.client_id)


# --------------------------------------------------------------------------- alter


async def alter_configs(
    loop: ControllerLoop, request: controller_pb2.AlterConfigsRequest
) -> controller_pb2.AlterConfigsResponse:
    """The AlterConfigs command (see module doc); runs on the event-loop task."""
    counts = Counter(_key(r.resource) for r in request.resources)
    results = []
    for item in request.resources:
        res = item.resource
        try:
            if counts[_key(res)] > 1:
                raise errors.InvalidRequestError("resource is given more than once")
            if res.type == R.CONFIG_TOPIC:
                results.append(await _alter_topic(loop, item, request.validate_only))
                continue
            await _alter_entity(loop, entity_of(res), item, request.validate_only)
            results.append(controller_pb2.AlterConfigsResult(resource=res))
        except errors.HeadwaterError as exc:
            results.append(
                controller_pb2.AlterConfigsResult(
                    resource=res, error_code=cast(Any, exc.code), error_message=exc.message
                )
            )
    return controller_pb2.AlterConfigsResponse(results=results)


async def _alter_topic(
    loop: ControllerLoop, item: controller_pb2.AlterConfigsResource, validate_only: bool
) -> controller_pb2.AlterConfigsResult:
    if item.resource.client_id:
        raise errors.InvalidRequestError("client_id is only allowed with a user resource")
    resp = await topics.alter_topic_configs(
        loop,
        controller_pb2.AlterTopicConfigsRequest(
            topic=item.resource.name,
            set=dict(item.set),
            delete=list(item.delete),
            validate_only=validate_only,
        ),
    )
    return controller_pb2.AlterConfigsResult(
        resource=item.resource,
        error_code=resp.result.error_code,
        error_message=resp.result.error_message,
    )


async def _alter_entity(
    loop: ControllerLoop,
    ent: ce.Entity,
    item: controller_pb2.AlterConfigsResource,
    validate_only: bool,
) -> None:
    assert loop.epoch is not None
    to_set = _validate(ent.kind, dict(item.set))
    table = _table(ent.kind)
    for name in item.delete:
        if name not in table:
            raise errors.InvalidConfigError(
                f"unknown {ent.kind} config {name!r}; known: {', '.join(sorted(table))}"
            )
        if table[name].read_only:
            raise errors.InvalidConfigError(f"{ent.kind} config {name!r} is read-only")
    both = sorted(set(to_set) & set(item.delete))
    if both:
        raise errors.InvalidRequestError(f"configs both set and deleted: {', '.join(both)}")
    current, revision = await _read_entity(loop.etcd, ent)
    configs = {k: v for k, v in current.items() if k not in set(item.delete)}
    configs.update(to_set)
    if validate_only or configs == current:
        return
    guard = hetcd.cmp_absent(ent.key) if revision == 0 else hetcd.cmp_mod(ent.key, "==", revision)
    op = hetcd.op_put(ent.key, ce.encode_configs(configs)) if configs else hetcd.op_delete(ent.key)
    try:
        await st.fenced_write(loop.etcd, loop.epoch, [guard], [op])
    except st.FencedError as exc:
        raise errors.NotControllerError(
            f"{ent} changed concurrently or this controller was deposed: {exc}"
        ) from exc


async def _read_entity(etcd: hetcd.Etcd, ent: ce.Entity) -> tuple[dict[str, str], int]:
    """The entity's stored configs and mod revision (0: absent)."""
    try:
        got = await etcd.get(ent.key)
    except hetcd.EtcdError as exc:
        raise errors.RequestTimedOutError(f"etcd: {exc}") from exc
    if got is None:
        return {}, 0
    try:
        return ce.decode_configs(got[0]), got[1].mod_revision
    except ValueError as exc:
        raise errors.UnknownServerError(f"{ent}: stored configs are malformed: {exc}") from exc


# --------------------------------------------------------------------------- describe


def _entry(
    name: str, value: str, source: int, table: Mapping[str, hconfig.ConfigKey]
) -> controller_pb2.ConfigEntry:
    key = table[name]
    return controller_pb2.ConfigEntry(
        name=name,
        value=value,
        source=cast(Any, source),
        read_only=key.read_only,
        documentation=key.doc,
    )


async def describe_configs(
    etcd: hetcd.Etcd, request: controller_pb2.DescribeConfigsRequest
) -> controller_pb2.DescribeConfigsResponse:
    """The DescribeConfigs RPC (see module doc); reads etcd, changes nothing."""
    results = []
    for res in request.resources:
        try:
            if res.type == R.CONFIG_TOPIC:
                entries = await _describe_topic(etcd, res, request.include_defaults)
            else:
                ent = entity_of(res)
                if ent.kind == "broker":
                    entries = await _describe_broker(etcd, ent, request.include_defaults)
                else:
                    entries = await _describe_quota(etcd, ent, request.include_defaults)
            results.append(
                controller_pb2.DescribeConfigsResult(
                    resource=res, error_code=ErrorCode.NONE, entries=entries
                )
            )
        except errors.HeadwaterError as exc:
            results.append(
                controller_pb2.DescribeConfigsResult(
                    resource=res, error_code=cast(Any, exc.code), error_message=exc.message
                )
            )
    return controller_pb2.DescribeConfigsResponse(results=results)


async def _describe_topic(
    etcd: hetcd.Etcd, res: controller_pb2.ConfigResource, include_defaults: bool
) -> list[controller_pb2.ConfigEntry]:
    if res.client_id:
        raise errors.InvalidRequestError("client_id is only allowed with a user resource")
    topics.validate_topic_name(res.name)
    try:
        got = await etcd.get(cluster_layout.topic_key(res.name))
    except hetcd.EtcdError as exc:
        raise errors.RequestTimedOutError(f"etcd: {exc}") from exc
    if got is None:
        raise errors.UnknownTopicOrPartitionError(f"topic {res.name!r} does not exist")
    topic = cluster_layout.Topic.decode(res.name, got[0], got[1].mod_revision)
    table = hconfig.TOPIC_KEYS
    entries = [_entry(k, v, S.CONFIG_SOURCE_TOPIC, table) for k, v in sorted(topic.configs.items())]
    if include_defaults:
        dflt, _ = await _read_entity(etcd, ce.Entity("broker", ce.DEFAULT))
        for name in sorted(table.keys() - topic.configs.keys()):
            if name in dflt:
                entries.append(_entry(name, dflt[name], S.CONFIG_SOURCE_DYNAMIC_DEFAULT, table))
            else:
                entries.append(
                    _entry(name, _text(table[name].default), S.CONFIG_SOURCE_DEFAULT, table)
                )
        entries.sort(key=lambda e: e.name)
    return entries


async def _static_configs(etcd: hetcd.Etcd, broker: str) -> dict[str, str]:
    """The start-up flags a live broker registered (``static_configs``), {} if not live."""
    try:
        got = await etcd.get(cluster_layout.broker_key(int(broker)))
    except hetcd.EtcdError as exc:
        raise errors.RequestTimedOutError(f"etcd: {exc}") from exc
    if got is None:
        return {}
    try:
        raw = json.loads(got[0]).get("static_configs") or {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in raw.items() if str(k) in hconfig.BROKER_KEYS}


async def _describe_broker(
    etcd: hetcd.Etcd, ent: ce.Entity, include_defaults: bool
) -> list[controller_pb2.ConfigEntry]:
    table = hconfig.BROKER_KEYS
    own, _ = await _read_entity(etcd, ent)
    own_source = (
        S.CONFIG_SOURCE_DYNAMIC_DEFAULT
        if ent.name == ce.DEFAULT
        else S.CONFIG_SOURCE_DYNAMIC_BROKER
    )
    entries = [_entry(k, v, own_source, table) for k, v in sorted(own.items()) if k in table]
    if not include_defaults:
        return entries
    levels: list[tuple[dict[str, str], int]] = []
    if ent.name != ce.DEFAULT:
        dflt, _ = await _read_entity(etcd, ce.Entity("broker", ce.DEFAULT))
        levels.append((dflt, S.CONFIG_SOURCE_DYNAMIC_DEFAULT))
        levels.append((await _static_configs(etcd, ent.name), S.CONFIG_SOURCE_STATIC_BROKER))
    for name in sorted(table.keys() - own.keys()):
        for values, source in levels:
            if name in values:
                entries.append(_entry(name, values[name], source, table))
                break
        else:
            if table[name].default is not None:
                entries.append(
                    _entry(name, _text(table[name].default), S.CONFIG_SOURCE_DEFAULT, table)
                )
    entries.sort(key=lambda e: e.name)
    return entries


async def _describe_quota(
    etcd: hetcd.Etcd, ent: ce.Entity, include_defaults: bool
) -> list[controller_pb2.ConfigEntry]:
    table = hconfig.QUOTA_KEYS
    own, _ = await _read_entity(etcd, ent)
    entries = [
        _entry(k, v, S.CONFIG_SOURCE_ENTITY, table) for k, v in sorted(own.items()) if k in table
    ]
    if not include_defaults:
        return entries
    if ent.kind == "user" and ent.client_id is not None:
        chain = ce.quota_chain(ent.name, ent.client_id)
    elif ent.kind == "user":
        chain = [ent, ce.Entity("user", ce.DEFAULT)]
    else:
        chain = [ent, ce.Entity("client", ce.DEFAULT)]
    inherited: dict[str, str] = {}
    for other in chain[1:]:
        values, _ = await _read_entity(etcd, other)
        for k, v in values.items():
            inherited.setdefault(k, v)
    for name, value in sorted(inherited.items()):
        if name in table and name not in own:
            entries.append(_entry(name, value, S.CONFIG_SOURCE_DYNAMIC_DEFAULT, table))
    entries.sort(key=lambda e: e.name)
    return entries
