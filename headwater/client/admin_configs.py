"""Dynamic configuration, mixed into :class:`headwater.client.admin.AsyncAdminClient`.

Resources (:class:`ConfigResource`): ``topic`` (a topic's overrides), ``broker`` (a broker id,
or ``<default>``: every broker), ``client`` (quota keys of a client id or ``<default>``),
``user`` (quota keys of a user, or with ``client_id`` of a (user, client-id) pair;
``<default>`` allowed in either part). Both calls go to the controller (Controller
.DescribeConfigs / .AlterConfigs). Errors are raised as typed exceptions of
:mod:`headwater.errors` (INVALID_CONFIG for an unknown key, a bad value or a read-only key,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for a bad entity name); a rejected alteration
changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from headwater import errors
from headwater.v1 import controller_pb2

ResourceType = Literal["topic", "broker", "client", "user"]
_TYPES: dict[str, int] = {
    "topic": controller_pb2.CONFIG_TOPIC,
    "broker": controller_pb2.CONFIG_BROKER,
    "client": controller_pb2.CONFIG_CLIENT,
    "user": controller_pb2.CONFIG_USER,
}
#: ConfigSource -> the name used by this API and the CLI
SOURCES: dict[int, str] = {
    controller_pb2.CONFIG_SOURCE_DEFAULT: "default",
    controller_pb2.CONFIG_SOURCE_TOPIC: "topic",
    controller_pb2.CONFIG_SOURCE_DYNAMIC_BROKER: "dynamic_broker",
    controller_pb2.CONFIG_SOURCE_DYNAMIC_DEFAULT: "dynamic_default",
    controller_pb2.CONFIG_SOURCE_STATIC_BROKER: "static_broker",
    controller_pb2.CONFIG_SOURCE_ENTITY: "entity",
}


@dataclass(frozen=True)
class ConfigResource:
    type: ResourceType
    name: str
    client_id: str | None = None  # user resources only

    def to_pb(self) -> controller_pb2.ConfigResource:
        if self.type not in _TYPES:
            raise errors.InvalidRequestError(
                f"config resource type must be one of {', '.join(_TYPES)}, not {self.type!r}"
            )
        return controller_pb2.ConfigResource(
            type=_TYPES[self.type],  # type: ignore[arg-type]
            name=self.name,
            client_id=self.client_id or "",
        )


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    source: str  # one of SOURCES' values
    read_only: bool
    documentation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "read_only": self.read_only,
        }


class ConfigAdminMixin:
    """Config operations; the host class provides ``_call(method, request)``."""

    _call: Callable[[str, Any], Awaitable[Any]]

    async def describe_configs(
        self, resources: Iterable[ConfigResource], *, include_defaults: bool = False
    ) -> dict[ConfigResource, list[ConfigEntry]]:
        """Each resource's entries (only those set on it unless ``include_defaults``).
        Raises the first failing resource's error."""
        wanted = list(resources)
        resp = await self._call(
            "DescribeConfigs",
            controller_pb2.DescribeConfigsRequest(
                resources=[r.to_pb() for r in wanted], include_defaults=include_defaults
            ),
        )
        out: dict[ConfigResource, list[ConfigEntry]] = {}
        for res, result in zip(wanted, resp.results, strict=True):
            errors.raise_for_code(result.error_code, result.error_message)
            out[res] = [
                ConfigEntry(
                    e.name, e.value, SOURCES.get(e.source, "default"), e.read_only, e.documentation
                )
                for e in result.entries
            ]
        return out

    async def alter_configs(
        self,
        resource: ConfigResource,
        set_configs: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set and delete keys of one resource atomically (deleted keys fall back to the next
        level). Raises on an invalid change, which then changes nothing."""
        resp = await self._call(
            "AlterConfigs",
            controller_pb2.AlterConfigsRequest(
                resources=[
                    controller_pb2.AlterConfigsResource(
                        resource=resource.to_pb(),
                        set=dict(set_configs or {}),
                        delete=list(delete),
                    )
                ],
                validate_only=validate_only,
            ),
        )
        for result in resp.results:
            errors.raise_for_code(result.error_code, result.error_message)
