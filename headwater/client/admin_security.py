"""SCRAM users and ACLs, mixed into :class:`headwater.client.admin.AsyncAdminClient`.

``alter_user_scram_credentials`` computes SaltedPassword (PBKDF2) here, on the client: the
password never leaves the process; the controller stores salt, iterations, StoredKey and
ServerKey only. ACLs are Kafka's (docs/security.md): :class:`Acl` bindings over topics, groups,
the cluster and transactional ids, literal or prefixed, ALLOW or DENY. Calls go to the
controller; errors are typed exceptions of :mod:`headwater.errors` (per item: the first
failing item's error is raised after the others were applied, as Kafka's admin client does).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from headwater import errors, scram
from headwater.v1 import security_pb2 as spb

#: The name of the one CLUSTER resource in ACLs (what cluster-level bindings name).
CLUSTER_NAME = "headwater-cluster"
MECHANISMS = {"SCRAM-SHA-256": spb.SCRAM_SHA_256, "SCRAM-SHA-512": spb.SCRAM_SHA_512}
_MECH_NAMES = {v: k for k, v in MECHANISMS.items()}


def _enum(enum: Any, prefix: str, name: str, what: str) -> Any:
    try:
        return enum.Value(prefix + name.upper().replace("-", "_"))
    except ValueError:
        choices = ", ".join(n.removeprefix(prefix).lower() for n in enum.keys())  # noqa: SIM118 (protobuf enum)
        raise errors.InvalidRequestError(f"unknown {what} {name!r}; one of {choices}") from None


def _name(enum: Any, prefix: str, value: int) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


@dataclass(frozen=True)
class Acl:
    """One ACL binding; names as the CLI spells them (``topic``, ``prefixed``, ``read``,
    ``allow``). ``resource_name`` of a cluster ACL is ``headwater-cluster``."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "allow"
    pattern_type: str = "literal"
    host: str = "*"

    def to_pb(self) -> spb.AclBinding:
        return spb.AclBinding(
            resource_type=_enum(
                spb.AclResourceType, "ACL_RESOURCE_", self.resource_type, "resource type"
            ),
            resource_name=self.resource_name,
            pattern_type=_enum(
                spb.AclPatternType, "ACL_PATTERN_", self.pattern_type, "pattern type"
            ),
            principal=self.principal,
            host=self.host,
            operation=_enum(spb.AclOperation, "ACL_OPERATION_", self.operation, "operation"),
            permission=_enum(spb.AclPermission, "ACL_PERMISSION_", self.permission, "permission"),
        )

    @staticmethod
    def from_pb(b: spb.AclBinding) -> Acl:
        return Acl(
            resource_type=_name(spb.AclResourceType, "ACL_RESOURCE_", b.resource_type),
            resource_name=b.resource_name,
            principal=b.principal,
            operation=_name(spb.AclOperation, "ACL_OPERATION_", b.operation),
            permission=_name(spb.AclPermission, "ACL_PERMISSION_", b.permission),
            pattern_type=_name(spb.AclPatternType, "ACL_PATTERN_", b.pattern_type),
            host=b.host,
        )


@dataclass(frozen=True)
class AclFilter:
    """Which bindings to list or delete: None matches anything; ``pattern_type`` ``match``
    selects the literal, ``*`` and prefixed bindings that apply to ``resource_name``."""

    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str | None = None
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    def to_pb(self) -> spb.AclBindingFilter:
        out = spb.AclBindingFilter(
            resource_name=self.resource_name or "",
            principal=self.principal or "",
            host=self.host or "",
        )
        if self.resource_type:
            out.resource_type = _enum(
                spb.AclResourceType, "ACL_RESOURCE_", self.resource_type, "resource type"
            )
        if self.pattern_type:
            out.pattern_type = _enum(
                spb.AclPatternType, "ACL_PATTERN_", self.pattern_type, "pattern type"
            )
        if self.operation:
            out.operation = _enum(spb.AclOperation, "ACL_OPERATION_", self.operation, "operation")
        if self.permission:
            out.permission = _enum(
                spb.AclPermission, "ACL_PERMISSION_", self.permission, "permission"
            )
        return out


@dataclass(frozen=True)
class UserCredentialInfo:
    user: str
    mechanisms: dict[str, int]  # mechanism -> iterations


class SecurityAdminMixin:
    """SCRAM and ACL operations; the host class provides ``_call(method, request)``."""

    _call: Callable[[str, Any], Awaitable[Any]]

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[tuple[str, str, str]] = (),
        deletions: Iterable[tuple[str, str]] = (),
        *,
        iterations: int = scram.DEFAULT_ITERATIONS,
    ) -> None:
        """Upsert ``(user, mechanism, password)`` and delete ``(user, mechanism)``. Only
        SaltedPassword (with a fresh random salt) is sent. Raises the first user's error."""
        ups = []
        for user, mechanism, password in upsertions:
            if mechanism not in MECHANISMS:
                raise errors.UnsupportedSaslMechanismError(
                    f"mechanism must be one of {sorted(MECHANISMS)}"
                )
            salt = secrets.token_bytes(32)
            try:
                salted = scram.salted_password(
                    password, salt, iterations, scram.hash_name_of(mechanism)
                )
            except scram.ScramError as exc:
                raise errors.InvalidRequestError(f"password refused by SASLprep: {exc}") from None
            ups.append(
                spb.ScramCredentialUpsertion(
                    user=user,
                    mechanism=MECHANISMS[mechanism],
                    iterations=iterations,
                    salt=salt,
                    salted_password=salted,
                )
            )
        dels = []
        for user, mechanism in deletions:
            if mechanism not in MECHANISMS:
                raise errors.UnsupportedSaslMechanismError(
                    f"mechanism must be one of {sorted(MECHANISMS)}"
                )
            dels.append(spb.ScramCredentialDeletion(user=user, mechanism=MECHANISMS[mechanism]))
        resp = await self._call(
            "AlterUserScramCredentials",
            spb.AlterUserScramCredentialsRequest(upsertions=ups, deletions=dels),
        )
        for r in resp.results:
            errors.raise_for_code(r.error_code, f"{r.user}: {r.error_message}")

    async def describe_user_scram_credentials(
        self, users: Iterable[str] = ()
    ) -> dict[str, UserCredentialInfo]:
        resp = await self._call(
            "DescribeUserScramCredentials",
            spb.DescribeUserScramCredentialsRequest(users=list(users)),
        )
        errors.raise_for_code(resp.error_code, "DescribeUserScramCredentials")
        return {
            u.user: UserCredentialInfo(
                u.user,
                {_MECH_NAMES[m]: i for m, i in zip(u.mechanisms, u.iterations, strict=False)},
            )
            for u in resp.users
        }

    async def create_acls(self, acls: Iterable[Acl]) -> None:
        resp = await self._call(
            "CreateAcls", spb.CreateAclsRequest(creations=[a.to_pb() for a in acls])
        )
        for r in resp.results:
            errors.raise_for_code(r.error_code, r.error_message)

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[Acl]:
        """Delete every binding matching any filter; returns the deleted bindings."""
        resp = await self._call(
            "DeleteAcls", spb.DeleteAclsRequest(filters=[f.to_pb() for f in filters])
        )
        out: list[Acl] = []
        for r in resp.results:
            errors.raise_for_code(r.error_code, r.error_message)
            out += [Acl.from_pb(b) for b in r.deleted]
        return out

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[Acl]:
        resp = await self._call(
            "DescribeAcls", spb.DescribeAclsRequest(filter=(acl_filter or AclFilter()).to_pb())
        )
        errors.raise_for_code(resp.error_code, resp.error_message)
        return [Acl.from_pb(b) for b in resp.acls]


__all__ = ["CLUSTER_NAME", "Acl", "AclFilter", "SecurityAdminMixin", "UserCredentialInfo"]
