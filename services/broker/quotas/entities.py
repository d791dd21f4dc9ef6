"""Quota configuration as stored in etcd, and the §4.9 precedence (pure logic, no I/O).

Keys (``headwater.config_entities``; values: JSON objects of string -> string)::

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

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater import config_entities as ce
from services.broker.quotas.rate import WindowConfig

log = logging.getLogger(__name__)

CONFIGS_PREFIX = ce.CONFIGS_PREFIX
DEFAULT = ce.DEFAULT
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
WINDOW_NUM = "quota.window.num"
WINDOW_SIZE_S = "quota.window.size.seconds"


@dataclass(frozen=True)
class Match:
    """A resolved quota: its bound and the (user, client-id) tags of the group sharing it."""

    bound: float
    user: str
    client_id: str


def parse_value(key: str, raw: bytes) -> dict[str, str]:
    """The JSON object of an etcd value; {} (logged) when it is not one."""
    try:
        return ce.decode_configs(raw) if raw else {}
    except ValueError:  # json.JSONDecodeError is a ValueError
        log.warning("ignoring %s: not a JSON object", key)
        return {}


def quota_values(key: str, configs: Mapping[str, str]) -> dict[str, float]:
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


def _tags(entity: ce.Entity, user: str, client_id: str) -> tuple[str, str]:
    """The quota group an entry of the chain stands for (see module docstring)."""
    if entity.kind == "client":
        return "", client_id
    if entity.client_id is None:
        return user, ""
    return user, client_id


@dataclass
class QuotaConfigs:
    """Every quota entity's quota keys, and the window settings; changed one entity at a time
    by the config watcher (one owner: the broker's loop)."""

    entities: dict[ce.Entity, dict[str, float]] = field(default_factory=dict)
    #: brokers/<id> and brokers/<default> configs, raw strings
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def apply(self, key: str, value: bytes | None) -> bool:
        """One etcd key's new value (None: deleted); True when it concerned this cache."""
        entity = ce.entity_of_key(key)
        if entity is None:
            return False
        configs = {} if value is None else parse_value(key, value)
        if entity.kind == "broker":
            if configs:
                self.broker_configs[entity.name] = configs
            else:
                self.broker_configs.pop(entity.name, None)
            return True
        values = quota_values(key, configs)
        if values:
            self.entities[entity] = values
        else:
            self.entities.pop(entity, None)
        return True

    def clear(self) -> None:
        self.entities.clear()
        self.broker_configs.clear()

    def resolve(self, user: str, client_id: str, name: str) -> Match | None:
        """The quota ``name`` applying to ``(user, client_id)`` (see module docstring)."""
        for entity in ce.quota_chain(user, client_id):
            values = self.entities.get(entity)
            if values is not None and name in values:
                return Match(values[name], *_tags(entity, user, client_id))
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


def static_window(static_configs: Mapping[str, str]) -> WindowConfig:
    """The broker's static (``--config``) window settings over the built-in defaults."""
    return QuotaConfigs(broker_configs={DEFAULT: dict(static_configs)}).window(-1, WindowConfig())
