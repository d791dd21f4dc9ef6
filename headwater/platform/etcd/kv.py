"""Keys, values and transactions: the value types the client returns, the builders of
:meth:`headwater.platform.etcd.Etcd.txn`'s comparisons (``cmp_*``) and operations (``op_*``),
and their translation to and from etcd's v3 API messages
(:mod:`headwater.platform.etcd.etcdserverpb`).

Keys are ``str``; values are returned as ``bytes`` (``put`` and ``op_put`` accept ``str`` or
``bytes``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from headwater.platform.etcd.etcdserverpb import rpc_pb2 as pb
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


# ------------------------------------------------------------- to and from etcd's messages


def prefix_end(prefix: str) -> bytes:
    """etcd's ``range_end`` for every key starting with ``prefix`` (the prefix with its last
    byte below 0xff incremented; ``b"\\0"``, every key, when there is none)."""
    s = bytearray(prefix.encode())
    for i in reversed(range(len(s))):
        if s[i] < 0xFF:
            s[i] += 1
            return bytes(s[: i + 1])
    return b"\0"


_RESULTS = {
    "==": pb.Compare.EQUAL,
    "!=": pb.Compare.NOT_EQUAL,
    "<": pb.Compare.LESS,
    ">": pb.Compare.GREATER,
}


def to_pb_compare(c: Compare) -> pb.Compare:
    """``c`` as etcd's ``Compare`` message."""
    key = c.key.encode()
    result = _RESULTS[c.op]
    if c.target == "value":
        operand = c.operand
        value = operand.encode() if isinstance(operand, str) else bytes(operand)
        return pb.Compare(key=key, result=result, target=pb.Compare.VALUE, value=value)
    number = int(c.operand)
    if c.target == "version":
        return pb.Compare(key=key, result=result, target=pb.Compare.VERSION, version=number)
    if c.target == "mod":
        return pb.Compare(key=key, result=result, target=pb.Compare.MOD, mod_revision=number)
    return pb.Compare(key=key, result=result, target=pb.Compare.CREATE, create_revision=number)


def range_request(key: str, *, prefix: bool) -> pb.RangeRequest:
    """A read of ``key``, or of every key under it (sorted by key) with ``prefix``."""
    if not prefix:
        return pb.RangeRequest(key=key.encode())
    return pb.RangeRequest(
        key=key.encode(),
        range_end=prefix_end(key),
        sort_order=pb.RangeRequest.ASCEND,
        sort_target=pb.RangeRequest.KEY,
    )


def delete_request(key: str, *, prefix: bool) -> pb.DeleteRangeRequest:
    """A delete of ``key``, or of every key under it with ``prefix``."""
    end = prefix_end(key) if prefix else b""
    return pb.DeleteRangeRequest(key=key.encode(), range_end=end)


def to_pb_op(o: Op) -> pb.RequestOp:
    """``o`` as etcd's ``RequestOp`` message."""
    if o.kind == "put":
        put = pb.PutRequest(key=o.key.encode(), value=o.value, lease=o.lease_id or 0)
        return pb.RequestOp(request_put=put)
    if o.kind in ("delete", "delete_prefix"):
        delete = delete_request(o.key, prefix=o.kind == "delete_prefix")
        return pb.RequestOp(request_delete_range=delete)
    return pb.RequestOp(request_range=range_request(o.key, prefix=o.kind == "get_prefix"))


def key_meta(kv: pb.KeyValue) -> KeyMeta:
    """The :class:`KeyMeta` of etcd's ``KeyValue``."""
    return KeyMeta(
        create_revision=int(kv.create_revision),
        mod_revision=int(kv.mod_revision),
        version=int(kv.version),
        lease_id=int(kv.lease),
    )


def key_values(kvs: Iterable[pb.KeyValue]) -> list[KeyValue]:
    """etcd's ``KeyValue`` messages as :class:`KeyValue` (in their order)."""
    return [KeyValue(kv.key.decode(), bytes(kv.value), key_meta(kv)) for kv in kvs]


def txn_result(resp: pb.TxnResponse) -> TxnResult:
    """etcd's ``TxnResponse`` as a :class:`TxnResult`."""
    out: list[list[KeyValue] | int | None] = []
    wrote = False
    for r in resp.responses:
        kind = r.WhichOneof("response")
        if kind == "response_range":
            out.append(key_values(r.response_range.kvs))
        elif kind == "response_delete_range":
            wrote = True
            out.append(int(r.response_delete_range.deleted))
        else:
            wrote = wrote or kind == "response_put"
            out.append(None)
    # every write of one transaction lands at one revision: the store's after it
    return TxnResult(bool(resp.succeeded), int(resp.header.revision) if wrote else 0, out)
