"""Where dynamic configs live in etcd, and the quota precedence chain (seed 000 §4.9).

Layout (values: JSON objects of string -> string; written only by the active controller's
AlterConfigs)::

    /headwater/configs/brokers/<broker id>                              one broker
    /headwater/configs/brokers/<default>                                every broker
    /headwater/configs/clients/<client-id | <default>>                  quota keys
    /headwater/configs/users/<user | <default>>                         quota keys
    /headwater/configs/users/<user | <default>>/clients/<client-id | <default>>   quota keys

Topic overrides stay in the topic's own key (``/headwater/topics/<name>``, "configs").
This module is pure (no I/O): brokers, the controller and the quota enforcement share it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from headwater.errors import InvalidRequestError

CONFIGS_PREFIX = "/headwater/configs/"
BROKERS_PREFIX = CONFIGS_PREFIX + "brokers/"
CLIENTS_PREFIX = CONFIGS_PREFIX + "clients/"
USERS_PREFIX = CONFIGS_PREFIX + "users/"
DEFAULT = "<default>"
MAX_NAME_LENGTH = 255

EntityKind = Literal["broker", "client", "user"]
_BROKER_ID = re.compile(r"^(0|[1-9][0-9]{0,9})$")


@dataclass(frozen=True)
class Entity:
    """A config entity. ``client_id`` is set only for the (user, client-id) entity."""

    kind: EntityKind
    name: str
    client_id: str | None = None

    @property
    def key(self) -> str:
        """The entity's etcd key."""
        if self.kind == "broker":
            return BROKERS_PREFIX + self.name
        if self.kind == "client":
            return CLIENTS_PREFIX + self.name
        if self.client_id is None:
            return USERS_PREFIX + self.name
        return f"{USERS_PREFIX}{self.name}/clients/{self.client_id}"

    def __str__(self) -> str:
        if self.kind == "user" and self.client_id is not None:
            return f"user {self.name!r} client {self.client_id!r}"
        return f"{self.kind} {self.name!r}"


def _check_name(what: str, name: str) -> None:
    if not name:
        raise InvalidRequestError(f"{what} name is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidRequestError(f"{what} name is longer than {MAX_NAME_LENGTH} characters")
    if "/" in name or not name.isprintable():
        raise InvalidRequestError(
            f"{what} name {name!r} is illegal: '/' and non-printable characters are not allowed"
        )


def entity(kind: EntityKind, name: str, client_id: str | None = None) -> Entity:
    """A validated entity; InvalidRequestError for a bad name.

    Broker names are a decimal broker id or ``<default>``; client and user names are 1..255
    printable characters without ``/`` (or ``<default>``). ``client_id`` only for users.
    """
    if kind == "broker":
        if name != DEFAULT and not _BROKER_ID.match(name):
            raise InvalidRequestError(
                f"broker name {name!r} is illegal: a broker id (an integer >= 0) or {DEFAULT}"
            )
        if client_id is not None:
            raise InvalidRequestError("client_id is only allowed with a user entity")
        return Entity("broker", name)
    if kind == "client":
        if client_id is not None:
            raise InvalidRequestError("client_id is only allowed with a user entity")
        _check_name("client", name)
        return Entity("client", name)
    _check_name("user", name)
    if client_id is not None:
        _check_name("client", client_id)
    return Entity("user", name, client_id)


def entity_of_key(key: str) -> Entity | None:
    """The entity stored at ``key``, or None when ``key`` is not an entity key."""
    if key.startswith(BROKERS_PREFIX):
        rest = key[len(BROKERS_PREFIX) :]
        return Entity("broker", rest) if rest and "/" not in rest else None
    if key.startswith(CLIENTS_PREFIX):
        rest = key[len(CLIENTS_PREFIX) :]
        return Entity("client", rest) if rest and "/" not in rest else None
    if key.startswith(USERS_PREFIX):
        parts = key[len(USERS_PREFIX) :].split("/")
        if len(parts) == 1 and parts[0]:
            return Entity("user", parts[0])
        if len(parts) == 3 and parts[0] and parts[1] == "clients" and parts[2]:
            return Entity("user", parts[0], parts[2])
    return None


def decode_configs(raw: bytes) -> dict[str, str]:
    """An entity key's value -> its configs (ValueError when it is not a JSON object)."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("configs value is not a JSON object")
    return {str(k): str(v) for k, v in data.items()}


def encode_configs(configs: Mapping[str, str]) -> bytes:
    return json.dumps(dict(sorted(configs.items()))).encode()


def quota_chain(user: str, client_id: str) -> list[Entity]:
    """The entities whose quota keys apply to (user, client-id), most specific first (§4.9):
    users/<u>/clients/<c>, users/<u>/clients/<default>, users/<u>,
    users/<default>/clients/<c>, users/<default>/clients/<default>, users/<default>,
    clients/<c>, clients/<default>."""
    return [
        Entity("user", user, client_id),
        Entity("user", user, DEFAULT),
        Entity("user", user),
        Entity("user", DEFAULT, client_id),
        Entity("user", DEFAULT, DEFAULT),
        Entity("user", DEFAULT),
        Entity("client", client_id),
        Entity("client", DEFAULT),
    ]


def resolve_quotas(
    configs: Mapping[Entity, Mapping[str, str]], user: str, client_id: str
) -> dict[str, tuple[str, Entity]]:
    """Each quota key resolved separately: key -> (value, the entity it came from)."""
    out: dict[str, tuple[str, Entity]] = {}
    for ent in quota_chain(user, client_id):
        for k, v in configs.get(ent, {}).items():
            out.setdefault(k, (v, ent))
    return out
