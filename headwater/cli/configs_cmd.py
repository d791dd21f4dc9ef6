"""``headwater configs describe|alter``: dynamic configuration (Kafka's kafka-configs shape).

    headwater configs describe --entity-type topics|brokers|clients|users
        (--entity-name N | --entity-default) [--client-id C] [--all]
    headwater configs alter --entity-type ... (--entity-name N | --entity-default)
        [--client-id C] [--add-config k=v[,k=v]] [--delete-config k[,k]] [--validate-only]

``--entity-default`` is ``--entity-name '<default>'`` (every broker / client / user);
``--client-id`` with ``users`` names the (user, client-id) entity (``<default>`` allowed).
A value holding commas is written in brackets: ``cleanup.policy=[compact,delete]``.
``describe`` lists the entries set on the entity (``--all``: every effective entry) with
their source: topic, dynamic_broker, dynamic_default, static_broker, default, entity.
``--output json`` prints ``{"resource": {...}, "configs": [{"name", "value", "source",
"read_only"}]}``. An invalid alteration prints the error (exit 1) and changes nothing.
"""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.client.admin_configs import ConfigResource
from headwater.config_entities import DEFAULT
from headwater.errors import InvalidConfigError, InvalidRequestError

ENTITY_TYPES = {"topics": "topic", "brokers": "broker", "clients": "client", "users": "user"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "configs", help="describe and alter configs of topics, brokers, clients and users"
    )
    csub = p.add_subparsers(dest="configs_command", required=True, metavar="ACTION")
    d = csub.add_parser("describe", help="show an entity's configs and their sources")
    _entity_args(d)
    d.add_argument("--all", action="store_true", help="every effective entry, not only the set")
    d.set_defaults(run=run_describe)
    a = csub.add_parser("alter", help="set and delete configs of an entity (all or nothing)")
    _entity_args(a)
    a.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    a.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    a.add_argument("--validate-only", action="store_true", help="check only, write nothing")
    a.set_defaults(run=run_alter)


def _entity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES))
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--entity-name")
    who.add_argument("--entity-default", action="store_true", help=f"the {DEFAULT} entity")
    p.add_argument("--client-id", help="with --entity-type users: the (user, client-id) entity")


def resource_of(args: argparse.Namespace) -> ConfigResource:
    kind = ENTITY_TYPES[args.entity_type]
    if args.client_id is not None and kind != "user":
        raise InvalidRequestError("--client-id is only allowed with --entity-type users")
    if args.entity_default and kind == "topic":
        raise InvalidRequestError("topics have no default entity; use --entity-type brokers")
    name = DEFAULT if args.entity_default else args.entity_name
    return ConfigResource(kind, name, args.client_id)  # type: ignore[arg-type]


def split_top_level(text: str) -> list[str]:
    """Split on commas outside ``[...]``; brackets around a value are removed."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InvalidConfigError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth != 0:
        raise InvalidConfigError(f"unbalanced '[' in {text!r}")
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_add(items: list[str]) -> dict[str, str]:
    pairs = [p for item in items for p in split_top_level(item)]
    out = common.parse_kv(pairs)
    return {k: v[1:-1] if v.startswith("[") and v.endswith("]") else v for k, v in out.items()}


def _describe_name(res: ConfigResource) -> str:
    if res.type == "user" and res.client_id is not None:
        return f"user '{res.name}' client-id '{res.client_id}'"
    return f"{res.type} '{res.name}'"


async def run_describe(args: argparse.Namespace) -> int:
    res = resource_of(args)
    async with AsyncAdminClient(common.bootstrap(args), controller=common.controller(args)) as a:
        got = await a.describe_configs([res], include_defaults=args.all)
    entries = got[res]
    if args.output == "json":
        common.print_json(
            {
                "resource": {"type": res.type, "name": res.name, "client_id": res.client_id},
                "configs": [e.to_json() for e in entries],
            }
        )
        return 0
    print(f"Configs for {_describe_name(res)}:")
    for e in entries:
        ro = ", read-only" if e.read_only else ""
        print(f"  {e.name}={e.value} (source: {e.source}{ro})")
    return 0


async def run_alter(args: argparse.Namespace) -> int:
    res = resource_of(args)
    to_set = parse_add(args.add_config)
    to_delete = [k for item in args.delete_config for k in split_top_level(item)]
    if not to_set and not to_delete:
        raise InvalidRequestError("nothing to alter: give --add-config and/or --delete-config")
    async with AsyncAdminClient(common.bootstrap(args), controller=common.controller(args)) as a:
        await a.alter_configs(res, to_set, to_delete, validate_only=args.validate_only)
    verb = "Validated" if args.validate_only else "Completed updating"
    print(f"{verb} config for {_describe_name(res)}.")
    return 0
