"""The controller's security RPCs: SCRAM credentials and ACLs (docs/security.md).

Both run as commands on the controller's event loop and write etcd with a transaction fenced
by the controller epoch and by the mod revision of the key as read (a concurrent writer or a
deposed controller writes nothing). Layouts: :mod:`headwater.platform.auth.credentials` (only salt,
iterations, StoredKey and ServerKey are stored: the client sends SaltedPassword, never the
password) and :mod:`headwater.platform.auth.acls`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from headwater import errors, scram
from headwater.platform import etcd as hetcd
from headwater.platform.auth import acls, credentials
from headwater.v1 import security_pb2 as spb
from services.controller import state as st
from services.controller.events import ControllerLoop

MECHANISM_NAMES = {spb.SCRAM_SHA_256: "SCRAM-SHA-256", spb.SCRAM_SHA_512: "SCRAM-SHA-512"}
_NAME_CODES = {v: k for k, v in MECHANISM_NAMES.items()}
MAX_ACL_CHANGES = 1000


def _code(exc: errors.HeadwaterError) -> Any:
    return exc.code


def _check_user(user: str) -> None:
    if not user or len(user) > credentials.MAX_USER_CHARS or "/" in user or user == "*":
        raise errors.InvalidRequestError(f"bad user name {user!r}")


async def _write(loop: ControllerLoop, key: str, revision: int, op: hetcd.Op) -> None:
    assert loop.epoch is not None
    guard = hetcd.cmp_absent(key) if revision == 0 else hetcd.cmp_mod(key, "==", revision)
    try:
        await st.fenced_write(loop.etcd, loop.epoch, [guard], [op])
    except st.FencedError as exc:
        raise errors.NotControllerError(
            f"{key} changed concurrently or this controller was deposed: {exc}"
        ) from exc


async def alter_user_scram_credentials(
    loop: ControllerLoop, request: spb.AlterUserScramCredentialsRequest
) -> spb.AlterUserScramCredentialsResponse:
    """Apply deletions then upsertions, user by user; one result per user."""
    users: dict[str, list[tuple[str, spb.ScramCredentialUpsertion | None]]] = {}
    for d in request.deletions:
        users.setdefault(d.user, []).append((MECHANISM_NAMES.get(d.mechanism, ""), None))
    for u in request.upsertions:
        users.setdefault(u.user, []).append((MECHANISM_NAMES.get(u.mechanism, ""), u))
    results = []
    for user, changes in users.items():
        try:
            await _alter_user(loop, user, changes)
            results.append(spb.AlterUserScramCredentialsResult(user=user))
        except errors.HeadwaterError as exc:
            results.append(
                spb.AlterUserScramCredentialsResult(
                    user=user, error_code=_code(exc), error_message=exc.message
                )
            )
    return spb.AlterUserScramCredentialsResponse(results=results)


async def _alter_user(
    loop: ControllerLoop,
    user: str,
    changes: Sequence[tuple[str, spb.ScramCredentialUpsertion | None]],
) -> None:
    _check_user(user)
    got = await loop.etcd.get(credentials.key_of(user))
    current = credentials.decode(got[0]) if got else {}
    revision = got[1].mod_revision if got else 0
    updated = dict(current)
    for mechanism, upsert in changes:
        if not mechanism:
            raise errors.UnsupportedSaslMechanismError("mechanism must be SCRAM-SHA-256/512")
        if upsert is None:
            if mechanism not in updated:
                raise errors.InvalidRequestError(f"{user} has no {mechanism} credential")
            del updated[mechanism]
            continue
        if not scram.MIN_ITERATIONS <= upsert.iterations <= scram.MAX_ITERATIONS:
            raise errors.InvalidRequestError(
                f"iterations must be in [{scram.MIN_ITERATIONS}, {scram.MAX_ITERATIONS}]"
            )
        hash_name = scram.hash_name_of(mechanism)
        size = len(scram.salted_password("", b"s", 1, hash_name))
        if len(upsert.salted_password) != size:
            raise errors.InvalidRequestError(f"salted_password must be {size} bytes")
        if upsert.salt and not scram.MIN_SALT_BYTES <= len(upsert.salt) <= 1024:
            raise errors.InvalidRequestError(
                f"salt must be {scram.MIN_SALT_BYTES} to 1024 bytes (or empty)"
            )
        salt = upsert.salt or secrets.token_bytes(32)
        updated[mechanism] = scram.credential_from_salted(
            upsert.salted_password, salt, upsert.iterations, hash_name
        )
    if updated == current:
        return
    key = credentials.key_of(user)
    op = hetcd.op_put(key, credentials.encode(updated)) if updated else hetcd.op_delete(key)
    await _write(loop, key, revision, op)


async def describe_user_scram_credentials(
    etcd: hetcd.Etcd, request: spb.DescribeUserScramCredentialsRequest
) -> spb.DescribeUserScramCredentialsResponse:
    """Mechanisms and iterations per user (never keys or salts); named users without any
    credential are left out."""
    snap = await etcd.get_prefix(credentials.SCRAM_PREFIX)
    stored = {
        kv.key.removeprefix(credentials.SCRAM_PREFIX): credentials.decode(kv.value)
        for kv in snap.items
    }
    wanted = list(request.users) or sorted(stored)
    out = []
    for user in wanted:
        creds = stored.get(user)
        if creds is None:
            continue
        mechs = sorted(creds)
        out.append(
            spb.UserScramCredential(
                user=user,
                mechanisms=[_NAME_CODES[m] for m in mechs],
                iterations=[creds[m].iterations for m in mechs],
            )
        )
    return spb.DescribeUserScramCredentialsResponse(users=out)


async def create_acls(
    loop: ControllerLoop, request: spb.CreateAclsRequest
) -> spb.CreateAclsResponse:
    if len(request.creations) > MAX_ACL_CHANGES:
        raise errors.InvalidRequestError(f"at most {MAX_ACL_CHANGES} ACLs per request")
    results = []
    for b in request.creations:
        try:
            acls.validate_binding(b)
            pattern = (b.resource_type, b.pattern_type, b.resource_name)
            key = acls.key_of(pattern)
            got = await loop.etcd.get(key)
            entries = acls.decode_entries(got[0]) if got else []
            entry = acls.Entry(b.principal, b.host, b.operation, b.permission)
            if entry not in entries:
                await _write(
                    loop,
                    key,
                    got[1].mod_revision if got else 0,
                    hetcd.op_put(key, acls.encode_entries([*entries, entry])),
                )
            results.append(spb.AclResult())
        except errors.HeadwaterError as exc:
            results.append(spb.AclResult(error_code=_code(exc), error_message=exc.message))
    return spb.CreateAclsResponse(results=results)


async def _all_bindings(etcd: hetcd.Etcd) -> list[tuple[str, int, list[acls.Entry]]]:
    snap = await etcd.get_prefix(acls.ACL_PREFIX)
    out = []
    for kv in snap.items:
        if acls.pattern_of_key(kv.key) is not None:
            out.append((kv.key, kv.meta.mod_revision, acls.decode_entries(kv.value)))
    return out


async def describe_acls(
    etcd: hetcd.Etcd, request: spb.DescribeAclsRequest
) -> spb.DescribeAclsResponse:
    found = []
    for key, _, entries in await _all_bindings(etcd):
        pattern = acls.pattern_of_key(key)
        assert pattern is not None
        for e in entries:
            b = acls.binding_of(pattern, e)
            if acls.filter_matches(request.filter, b):
                found.append(b)
    return spb.DescribeAclsResponse(acls=found)


async def delete_acls(
    loop: ControllerLoop, request: spb.DeleteAclsRequest
) -> spb.DeleteAclsResponse:
    if len(request.filters) > MAX_ACL_CHANGES:
        raise errors.InvalidRequestError(f"at most {MAX_ACL_CHANGES} filters per request")
    results = []
    for f in request.filters:
        deleted = []
        try:
            for key, revision, entries in await _all_bindings(loop.etcd):
                pattern = acls.pattern_of_key(key)
                assert pattern is not None
                keep = [
                    e for e in entries if not acls.filter_matches(f, acls.binding_of(pattern, e))
                ]
                if len(keep) == len(entries):
                    continue
                op = hetcd.op_put(key, acls.encode_entries(keep)) if keep else hetcd.op_delete(key)
                await _write(loop, key, revision, op)
                deleted += [acls.binding_of(pattern, e) for e in entries if e not in keep]
            results.append(spb.DeleteAclsFilterResult(deleted=deleted))
        except errors.HeadwaterError as exc:
            results.append(
                spb.DeleteAclsFilterResult(
                    error_code=_code(exc), error_message=exc.message, deleted=deleted
                )
            )
    return spb.DeleteAclsResponse(results=results)
