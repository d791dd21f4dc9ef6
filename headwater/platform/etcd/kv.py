"""Keys, values and transactions: the value types the adapter returns, the builders of
:meth:`headwater.platform.etcd.Etcd.txn`'s comparisons (``cmp_*``) and operations (``op_*``),
and their translation into pyetcd's objects.

Keys are ``str``; values are returned as ``bytes`` (``put`` and ``op_put`` accept ``str`` or
``bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from headwater.platform.etcd.lease import LeaseKeeper, lease_id_of

# --------------------------------------------------------------------------- value types


@dataclass(frozen=True)
class KeyMeta:
    """etcd's bookkeeping for one key."""

    create_revision: int
    mod_revision: int
    version: int
    lease_id: int = 0


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    meta: KeyMeta


@dataclass(frozen=True)
class PrefixSnapshot:
    """Every key under a prefix (sorted by key) as of store ``revision``.

    Watching with ``start_revision=revision + 1`` continues without a gap.
    """

    revision: int
    items: list[KeyValue]


@dataclass(frozen=True)
class TxnResult:
    """``succeeded``: whether the comparisons held. ``revision``: the store revision after a
    transaction that wrote something (0 otherwise). ``responses``: one entry per executed
    operation — a list of :class:`KeyValue` for ``op_get``, the number of deleted keys for
    ``op_delete``/``op_delete_prefix``, None for ``op_put``."""

    succeeded: bool
    revision: int
    responses: list[list[KeyValue] | int | None]


# --------------------------------------------------------------------------- txn builders

_CmpTarget = Literal["value", "version", "mod", "create"]
_CmpOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True)
class Compare:
    key: str
    target: _CmpTarget
    op: _CmpOp
    operand: int | str | bytes


def cmp_value(key: str, op: _CmpOp, value: str | bytes) -> Compare:
    return Compare(key, "value", op, value)


def cmp_version(key: str, op: _CmpOp, version: int) -> Compare:
    """``cmp_version(k, "==", 0)``: the key does not exist."""
    return Compare(key, "version", op, version)


def cmp_mod(key: str, op: _CmpOp, revision: int) -> Compare:
    return Compare(key, "mod", op, revision)


def cmp_create(key: str, op: _CmpOp, revision: int) -> Compare:
    return Compare(key, "create", op, revision)


def cmp_absent(key: str) -> Compare:
    return cmp_version(key, "==", 0)


def cmp_exists(key: str) -> Compare:
    return cmp_version(key, ">", 0)


@dataclass(frozen=True)
class Op:
    kind: Literal["put", "delete", "delete_prefix", "get", "get_prefix"]
    key: str
    value: bytes = b""
    lease_id: int | None = None


def to_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def op_put(key: str, value: str | bytes, lease: LeaseKeeper | int | None = None) -> Op:
    return Op("put", key, to_bytes(value), lease_id_of(lease))


def op_delete(key: str) -> Op:
    return Op("delete", key)


def op_delete_prefix(prefix: str) -> Op:
    return Op("delete_prefix", prefix)


def op_get(key: str) -> Op:
    return Op("get", key)


def op_get_prefix(prefix: str) -> Op:
    return Op("get_prefix", prefix)


# --------------------------------------------------------------------------- to and from pyetcd


def _prefix_end(prefix: str) -> bytes:
    s = bytearray(prefix.encode())
    for i in reversed(range(len(s))):
        if s[i] < 0xFF:
            s[i] += 1
            return bytes(s[: i + 1])
    return b"\0"


def to_pyetcd_compare(client: Any, c: Compare) -> Any:
    t = client.transactions
    builder = {"value": t.value, "version": t.version, "mod": t.mod, "create": t.create}
    target = builder[c.target](c.key)
    operand = c.operand
    if c.op == "==":
        return target == operand
    if c.op == "!=":
        return target != operand
    if c.op == "<":
        return target < operand
    return target > operand


def to_pyetcd_op(client: Any, o: Op) -> Any:
    t = client.transactions
    if o.kind == "put":
        return t.put(o.key, o.value, lease=o.lease_id)
    if o.kind == "delete":
        return t.delete(o.key)
    if o.kind == "delete_prefix":
        return t.delete(o.key, range_end=_prefix_end(o.key))
    if o.kind == "get":
        return t.get(o.key)
    return t.get(o.key, range_end=_prefix_end(o.key))


def key_meta(kv: Any) -> KeyMeta:
    """The :class:`KeyMeta` of a pyetcd key-value."""
    return KeyMeta(
        create_revision=int(kv.create_revision),
        mod_revision=int(kv.mod_revision),
        version=int(kv.version),
        lease_id=int(getattr(kv, "lease", 0) or getattr(kv, "lease_id", 0) or 0),
    )
