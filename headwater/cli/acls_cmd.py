"""``headwater acls add|remove|list``: ACL bindings, in the shape of Kafka's ``kafka-acls``.

* ``add (--allow-principal P | --deny-principal P)... --operation OP [--operation OP]...
  RESOURCE [--resource-pattern-type literal|prefixed] [--host H]``: one binding per principal
  x operation x resource (``--host`` defaults to ``*``; hosts apply to allow and deny alike).
* ``remove`` takes the same options as filters: what is not given matches anything
  (``--resource-pattern-type`` also takes ``any`` and ``match``: the literal, ``*`` and
  prefixed bindings that apply to the named resource). With no option at all it refuses
  (``--force`` removes every binding).
* ``list [filters]``: the matching bindings, one per line:
  ``ALLOW User:alice READ topic literal:orders host=*`` (``--output json``: objects).

RESOURCE is ``--topic T``, ``--group G``, ``--cluster`` or ``--transactional-id X`` (each
repeatable, mixed freely). Principals are ``User:<name>`` (``User:*``: everyone). Operations
(case-insensitive): all, read, write, create, delete, alter, describe, cluster_action,
describe_configs, alter_configs, idempotent_write. The calls need ALTER (add, remove) or
DESCRIBE (list) on the cluster when the authorizer is on.
"""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.client.admin_security import CLUSTER_NAME, Acl, AclFilter
from headwater.errors import InvalidRequestError

_OPERATIONS = (
    "all",
    "read",
    "write",
    "create",
    "delete",
    "alter",
    "describe",
    "cluster_action",
    "describe_configs",
    "alter_configs",
    "idempotent_write",
)


_BY_KEY = {op.replace("_", ""): op for op in _OPERATIONS}


def _operation(text: str) -> str:
    """``Read``, ``READ``, ``read``, ``IdempotentWrite``, ``idempotent-write`` ... -> the
    snake-case name."""
    key = text.strip().lower().replace("-", "").replace("_", "")
    if key not in _BY_KEY:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}; one of {_OPERATIONS}")
    return _BY_KEY[key]


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or kind != "User" or not name:
        raise argparse.ArgumentTypeError(f"principal must be User:<name>, got {text!r}")
    return text


def _add_filters(p: argparse.ArgumentParser, *, adding: bool) -> None:
    p.add_argument("--allow-principal", action="append", default=[], type=_principal)
    p.add_argument("--deny-principal", action="append", default=[], type=_principal)
    p.add_argument("--operation", action="append", default=[], type=_operation)
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    patterns = ["literal", "prefixed"] if adding else ["literal", "prefixed", "any", "match"]
    p.add_argument(
        "--resource-pattern-type", choices=patterns, default="literal" if adding else None
    )
    p.add_argument("--host", default="*" if adding else None)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("acls", help="ACLs: add, remove, list")
    asub = p.add_subparsers(dest="acls_command", required=True, metavar="ACTION")
    add = asub.add_parser("add", help="add ACL bindings")
    _add_filters(add, adding=True)
    add.set_defaults(run=run_add)
    rm = asub.add_parser("remove", help="remove the ACL bindings matching the filters")
    _add_filters(rm, adding=False)
    rm.add_argument("--force", action="store_true", help="allow removing every binding")
    rm.set_defaults(run=run_remove)
    ls = asub.add_parser("list", help="list the ACL bindings matching the filters")
    _add_filters(ls, adding=False)
    ls.set_defaults(run=run_list)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    out = [("topic", t) for t in args.topic]
    out += [("group", g) for g in args.group]
    out += [("transactional_id", x) for x in args.transactional_id]
    if args.cluster:
        out.append(("cluster", CLUSTER_NAME))
    return out


def _principals(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [("allow", p) for p in args.allow_principal] + [("deny", p) for p in args.deny_principal]


def acls_to_add(args: argparse.Namespace) -> list[Acl]:
    """Every principal x operation x resource binding of an ``add`` command line."""
    resources, principals = _resources(args), _principals(args)
    if not resources:
        raise common.UsageError(
            "name a resource: --topic, --group, --cluster or --transactional-id"
        )
    if not principals:
        raise common.UsageError("name a principal: --allow-principal or --deny-principal")
    if not args.operation:
        raise common.UsageError("name an operation: --operation OP")
    if args.cluster and args.resource_pattern_type != "literal":
        raise InvalidRequestError("the cluster resource takes only literal patterns")
    return [
        Acl(rt, name, principal, op, perm, args.resource_pattern_type, args.host)
        for rt, name in resources
        for perm, principal in principals
        for op in dict.fromkeys(args.operation)
    ]


def filters_of(args: argparse.Namespace) -> list[AclFilter]:
    """The filters of a ``remove``/``list`` command line (cross product of what is given;
    one match-anything filter when nothing is)."""
    resources: list[tuple[str | None, str | None]] = list(_resources(args)) or [(None, None)]
    principals: list[tuple[str | None, str | None]] = list(_principals(args)) or [(None, None)]
    ops: list[str | None] = list(dict.fromkeys(args.operation)) or [None]
    return [
        AclFilter(
            resource_type=rt,
            resource_name=name,
            pattern_type=args.resource_pattern_type,
            principal=principal,
            host=args.host,
            operation=op,
            permission=perm,
        )
        for rt, name in resources
        for perm, principal in principals
        for op in ops
    ]


def _line(a: Acl) -> str:
    return (
        f"{a.permission.upper()}\t{a.principal}\t{a.operation.upper()}\t{a.resource_type}\t"
        f"{a.pattern_type}:{a.resource_name}\thost={a.host}"
    )


def _json(a: Acl) -> dict[str, str]:
    return {
        "resource_type": a.resource_type,
        "resource_name": a.resource_name,
        "pattern_type": a.pattern_type,
        "principal": a.principal,
        "host": a.host,
        "operation": a.operation,
        "permission": a.permission,
    }


def _print(args: argparse.Namespace, acls: list[Acl]) -> None:
    if args.output == "json":
        common.print_json([_json(a) for a in acls])
    else:
        for a in acls:
            print(_line(a))


async def run_add(args: argparse.Namespace) -> int:
    acls = acls_to_add(args)
    async with _admin(args) as admin:
        await admin.create_acls(acls)
    common.progress(f"added {len(acls)} ACL binding(s)")
    if args.output == "json":
        _print(args, acls)
    return 0


async def run_remove(args: argparse.Namespace) -> int:
    if not (_resources(args) or _principals(args) or args.operation or args.force):
        raise common.UsageError("no filter given: name what to remove, or pass --force")
    async with _admin(args) as admin:
        removed = await admin.delete_acls(filters_of(args))
    common.progress(f"removed {len(removed)} ACL binding(s)")
    _print(args, removed)
    return 0


async def run_list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        found: dict[Acl, None] = {}
        for f in filters_of(args):
            found |= dict.fromkeys(await admin.describe_acls(f))
    _print(args, list(found))
    return 0
