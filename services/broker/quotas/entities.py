"""Quota configuration as stored in etcd, and the §4.9 precedence (pure logic, no I/O).

Keys (values: JSON objects of string -> string, see docs/quotas.md)::

    /headwater/configs/clients/<client-id | <default>>
    /headwater/configs/users/<user | <default>>
    /headwater/configs/users/<user | <default>>/clients/<client-id | <default>>
    /headwater/configs/brokers/<broker id | <default>>   (only quota.window.* are read here)

For a request of ``(user, client_id)`` each quota key (``producer_byte_rate``,
``consumer_byte_rate``, ``request_percentage``) is resolved separately, most specific first:

1. users/<u>/clients/<c>         5. users/<default>/clients/<default>
2. users/<u>/clients/<default>   6. users/<default>
3. users/<u>                     7. clients/<c>
4. users/<default>/clients/<c>   8. clients/<default>

The entry that matched also names the *quota group* sharing the quota, as Kafka's metric tags:
a user-level entry (3, 6) is shared by every client-id of the user (tags ``(user, "")``), a
client-level entry (7, 8) by every user of the client-id (tags ``("", client_id)``), the
others by the ``(user, client_id)`` pair. A ``<default>`` entry gives each user / client-id
its own quota of that size, never one quota shared by all of them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from services.broker.quotas.rate import WindowConfig

log = logging.getLogger(__name__)

CONFIGS_PREFIX = "/headwater/configs/"
DEFAULT = "<default>"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
WINDOW_NUM = "quota.window.num"
WINDOW_SIZE_S = "quota.window.size.seconds"

#: (user component, client component) of a quota entity; None: the component is absent.
Entity = tuple[str | None, str | None]


@dataclass(frozen=True)
class Match:
    """A resolved quota: its bound and the (user, client-id) tags of the group sharing it."""

    bound: float
    user: str
    client_id: str


def entity_of(key: str) -> Entity | None:
    """The quota entity an etcd key names, or None for keys that are not quota entities."""
    if not key.startswith(CONFIGS_PREFIX):
        return None
    parts = key[len(CONFIGS_PREFIX) :].split("/")
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return (None, parts[1])
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return (parts[1], None)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return (parts[1], parts[3])
    return None


def broker_of(key: str) -> str | None:
    """``"<id>"`` or ``"<default>"`` for a ``brokers/`` key, else None."""
    if not key.startswith(CONFIGS_PREFIX + "brokers/"):
        return None
    rest = key[len(CONFIGS_PREFIX + "brokers/") :]
    return rest if rest and "/" not in rest else None


def parse_value(key: str, raw: bytes) -> dict[str, str]:
    """The JSON object of an etcd value; {} (logged) when it is not one."""
    try:
        obj = json.loads(raw) if raw else {}
    except ValueError:
        log.warning("ignoring %s: not JSON", key)
        return {}
    if not isinstance(obj, dict):
        log.warning("ignoring %s: not a JSON object", key)
        return {}
    return {str(k): str(v) for k, v in obj.items()}


def quota_values(key: str, configs: dict[str, str]) -> dict[str, float]:
    """The valid quota keys of one entity (positive numbers); others are logged and skipped
    (the controller validates writes; this only guards against hand-written keys)."""
    out: dict[str, float] = {}
    for name in QUOTA_KEYS:
        if name not in configs:
            continue
        try:
            value = float(configs[name])
        except ValueError:
            value = -1.0
        if value > 0:
            out[name] = value
        else:
            log.warning("ignoring %s %s=%r: must be a number > 0", key, name, configs[name])
    return out


@dataclass
class QuotaConfigs:
    """Every quota entity's quota keys, and the window settings; replaced wholesale or changed
    one entity at a time by the config watcher (one owner: the broker's loop)."""

    entities: dict[Entity, dict[str, float]] = field(default_factory=dict)
    #: brokers/<id> and brokers/<default> window settings, raw strings
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def set_entity(self, entity: Entity, values: dict[str, float]) -> None:
        if values:
            self.entities[entity] = values
        else:
            self.entities.pop(entity, None)

    def resolve(self, user: str, client_id: str, name: str) -> Match | None:
        """The quota ``name`` applying to ``(user, client_id)`` (see module docstring)."""
        d = DEFAULT
        order: tuple[tuple[Entity, str, str], ...] = (
            ((user, client_id), user, client_id),
            ((user, d), user, client_id),
            ((user, None), user, ""),
            ((d, client_id), user, client_id),
            ((d, d), user, client_id),
            ((d, None), user, ""),
            ((None, client_id), "", client_id),
            ((None, d), "", client_id),
        )
        for entity, tag_user, tag_client in order:
            values = self.entities.get(entity)
            if values is not None and name in values:
                return Match(values[name], tag_user, tag_client)
        return None

    def window(self, broker_id: int, static: WindowConfig) -> WindowConfig:
        """Window settings: brokers/<id> > brokers/<default> > ``static``; invalid values
        are logged and skipped."""
        num, size = static.num_windows, static.window_s
        for scope in (DEFAULT, str(broker_id)):  # later scopes override earlier ones
            cfg = self.broker_configs.get(scope, {})
            try:
                if WINDOW_NUM in cfg:
                    num = int(cfg[WINDOW_NUM])
                if WINDOW_SIZE_S in cfg:
                    size = float(cfg[WINDOW_SIZE_S])
            except ValueError:
                log.warning("ignoring quota window settings of brokers/%s: %s", scope, cfg)
        try:
            return WindowConfig(num, size)
        except ValueError as exc:
            log.warning("ignoring quota window settings: %s", exc)
            return static
