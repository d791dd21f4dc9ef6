"""ACL bindings, their etcd layout, matching (Kafka's rules) and a watched in-memory cache.

etcd layout: ``/headwater/security/acls/<RESOURCE_TYPE>/<PATTERN_TYPE>/<resource name>`` holds
a JSON list of entries ``{"principal", "host", "operation", "permission"}`` (enum *names* of
security.proto without their prefix, e.g. ``"TOPIC"``, ``"PREFIXED"``, ``"READ"``, ``"ALLOW"``).

Decision (:meth:`Authorizer.authorize`), as Kafka's StandardAuthorizer:

1. a super user is allowed everything;
2. the entries matching the resource are those of its literal name, of the literal ``"*"`` and
   of every prefixed pattern the name starts with; of those, the ones for ``User:<name>`` or
   ``User:*`` and for the client host or ``"*"`` apply;
3. an applicable DENY for the operation (or ALL) denies — deny wins;
4. an applicable ALLOW for the operation, for ALL, or for an operation implying it (READ,
   WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. otherwise denied, unless no entry at all matches the resource and
   ``allow_everyone_if_no_acl_found`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from headwater import errors
from headwater.client.admin_security import CLUSTER_NAME
from headwater.platform import etcd as hetcd
from headwater.v1 import security_pb2 as spb

log = logging.getLogger(__name__)

ACL_PREFIX = "/headwater/security/acls/"

RT = spb.AclResourceType
PT = spb.AclPatternType
OP = spb.AclOperation
PERM = spb.AclPermission

_IMPLIED_BY: dict[int, tuple[int, ...]] = {
    OP.ACL_OPERATION_DESCRIBE: (
        OP.ACL_OPERATION_READ,
        OP.ACL_OPERATION_WRITE,
        OP.ACL_OPERATION_DELETE,
        OP.ACL_OPERATION_ALTER,
    ),
    OP.ACL_OPERATION_DESCRIBE_CONFIGS: (OP.ACL_OPERATION_ALTER_CONFIGS,),
}


def rt_name(value: int) -> str:
    return RT.Name(value).removeprefix("ACL_RESOURCE_")


def pt_name(value: int) -> str:
    return PT.Name(value).removeprefix("ACL_PATTERN_")


def op_name(value: int) -> str:
    return OP.Name(value).removeprefix("ACL_OPERATION_")


def perm_name(value: int) -> str:
    return PERM.Name(value).removeprefix("ACL_PERMISSION_")


@dataclass(frozen=True)
class Entry:
    """One access control entry of a resource pattern."""

    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "host": self.host,
            "operation": op_name(self.operation),
            "permission": perm_name(self.permission),
        }

    @staticmethod
    def from_json(raw: dict[str, str]) -> Entry:
        return Entry(
            principal=raw["principal"],
            host=raw["host"],
            operation=OP.Value("ACL_OPERATION_" + raw["operation"]),
            permission=PERM.Value("ACL_PERMISSION_" + raw["permission"]),
        )


#: (resource type, pattern type, name) -> its entries.
Pattern = tuple[int, int, str]


def key_of(pattern: Pattern) -> str:
    rt, pt, name = pattern
    return f"{ACL_PREFIX}{rt_name(rt)}/{pt_name(pt)}/{name}"


def pattern_of_key(key: str) -> Pattern | None:
    rest = key.removeprefix(ACL_PREFIX)
    parts = rest.split("/", 2)
    if len(parts) != 3:
        return None
    try:
        return (
            RT.Value("ACL_RESOURCE_" + parts[0]),
            PT.Value("ACL_PATTERN_" + parts[1]),
            parts[2],
        )
    except ValueError:
        return None


def decode_entries(value: bytes) -> list[Entry]:
    return [Entry.from_json(item) for item in json.loads(value)]


def encode_entries(entries: Iterable[Entry]) -> bytes:
    return json.dumps([e.to_json() for e in entries], sort_keys=True).encode()


def validate_binding(b: spb.AclBinding) -> None:
    """Raises InvalidRequestError for a binding that cannot be stored."""
    if b.resource_type not in (
        RT.ACL_RESOURCE_TOPIC,
        RT.ACL_RESOURCE_GROUP,
        RT.ACL_RESOURCE_CLUSTER,
        RT.ACL_RESOURCE_TRANSACTIONAL_ID,
    ):
        raise errors.InvalidRequestError(
            "resource_type must be TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID"
        )
    if b.pattern_type not in (PT.ACL_PATTERN_LITERAL, PT.ACL_PATTERN_PREFIXED):
        raise errors.InvalidRequestError("pattern_type must be LITERAL or PREFIXED")
    if not b.resource_name or len(b.resource_name) > 1024:
        raise errors.InvalidRequestError("resource_name must be 1..1024 characters")
    if b.resource_type == RT.ACL_RESOURCE_CLUSTER and b.resource_name != CLUSTER_NAME:
        raise errors.InvalidRequestError(f"the CLUSTER resource is named {CLUSTER_NAME!r}")
    if not b.principal.startswith("User:") or len(b.principal) <= 5:
        raise errors.InvalidRequestError("principal must be User:<name> or User:*")
    if not b.host:
        raise errors.InvalidRequestError("host must be '*' or an address")
    if (
        b.operation in (OP.ACL_OPERATION_UNKNOWN, OP.ACL_OPERATION_ANY)
        or b.operation not in OP.values()
    ):
        raise errors.InvalidRequestError("operation must be a concrete operation (or ALL)")
    if b.permission not in (PERM.ACL_PERMISSION_ALLOW, PERM.ACL_PERMISSION_DENY):
        raise errors.InvalidRequestError("permission must be ALLOW or DENY")


def binding_of(pattern: Pattern, e: Entry) -> spb.AclBinding:
    fields: dict[str, Any] = {
        "resource_type": pattern[0],
        "pattern_type": pattern[1],
        "resource_name": pattern[2],
        "principal": e.principal,
        "host": e.host,
        "operation": e.operation,
        "permission": e.permission,
    }
    return spb.AclBinding(**fields)


def filter_matches(f: spb.AclBindingFilter, b: spb.AclBinding) -> bool:
    """Kafka's AclBindingFilter.matches: empty / ANY / UNKNOWN fields match anything;
    pattern MATCH selects the literal, ``*`` and prefixed entries that apply to the name."""
    if f.resource_type not in (RT.ACL_RESOURCE_UNKNOWN,) and f.resource_type != b.resource_type:
        return False
    pt = f.pattern_type
    if pt == PT.ACL_PATTERN_MATCH:
        if not f.resource_name:
            pass
        elif b.pattern_type == PT.ACL_PATTERN_LITERAL:
            if b.resource_name not in (f.resource_name, "*"):
                return False
        elif not f.resource_name.startswith(b.resource_name):
            return False
    else:
        if pt in (PT.ACL_PATTERN_LITERAL, PT.ACL_PATTERN_PREFIXED) and pt != b.pattern_type:
            return False
        if f.resource_name and f.resource_name != b.resource_name:
            return False
    if f.principal and f.principal != b.principal:
        return False
    if f.host and f.host != b.host:
        return False
    if (
        f.operation not in (OP.ACL_OPERATION_UNKNOWN, OP.ACL_OPERATION_ANY)
        and f.operation != b.operation
    ):
        return False
    return (
        f.permission in (PERM.ACL_PERMISSION_UNKNOWN, PERM.ACL_PERMISSION_ANY)
        or f.permission == b.permission
    )


class Authorizer:
    """Decisions over an in-memory copy of the ACLs (kept current by :meth:`run`).

    Owned by one event loop; :meth:`authorize` is synchronous and cheap."""

    def __init__(
        self,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        etcd: hetcd.Etcd | None = None,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.etcd = etcd
        self._acls: dict[Pattern, list[Entry]] = {}
        self.loaded = asyncio.Event()

    def replace(self, acls: dict[Pattern, list[Entry]]) -> None:
        self._acls = dict(acls)

    def set_pattern(self, pattern: Pattern, entries: list[Entry]) -> None:
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)

    def _matching(self, resource_type: int, name: str) -> Iterable[Entry]:
        yield from self._acls.get((resource_type, PT.ACL_PATTERN_LITERAL, name), ())
        if name != "*":
            yield from self._acls.get((resource_type, PT.ACL_PATTERN_LITERAL, "*"), ())
        for (rt, pt, prefix), entries in self._acls.items():
            if rt == resource_type and pt == PT.ACL_PATTERN_PREFIXED and name.startswith(prefix):
                yield from entries

    def authorize(
        self, user: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """Whether ``User:<user>`` from ``host`` may do ``operation`` on the resource."""
        principal = f"User:{user}"
        if principal in self.super_users:
            return True
        entries = list(self._matching(resource_type, name))
        if not entries:
            return self.allow_everyone_if_no_acl_found
        applicable = [
            e for e in entries if e.principal in (principal, "User:*") and e.host in ("*", host)
        ]
        if any(
            e.permission == PERM.ACL_PERMISSION_DENY
            and e.operation in (operation, OP.ACL_OPERATION_ALL)
            for e in applicable
        ):
            return False
        allowing = (operation, OP.ACL_OPERATION_ALL, *_IMPLIED_BY.get(operation, ()))
        return any(
            e.permission == PERM.ACL_PERMISSION_ALLOW and e.operation in allowing
            for e in applicable
        )

    async def run(self) -> None:
        """Load every ACL and follow changes until cancelled (re-reading after a watch ends)."""
        assert self.etcd is not None
        while True:
            try:
                snap = await self.etcd.get_prefix(ACL_PREFIX)
                loaded: dict[Pattern, list[Entry]] = {}
                for kv in snap.items:
                    pattern = pattern_of_key(kv.key)
                    if pattern is not None:
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            loaded[pattern] = decode_entries(kv.value)
                self.replace(loaded)
                self.loaded.set()
                watch = await self.etcd.watch_prefix(ACL_PREFIX, start_revision=snap.revision + 1)
                async with watch:
                    async for event in watch:
                        pattern = pattern_of_key(event.key)
                        if pattern is None:
                            continue
                        entries: list[Entry] = []
                        if event.kind == "put":
                            with contextlib.suppress(ValueError, KeyError, TypeError):
                                entries = decode_entries(event.value)
                        self.set_pattern(pattern, entries)
            except hetcd.EtcdError as exc:
                log.warning("ACL watch ended (%s); re-reading", exc)
                await asyncio.sleep(0.5)
