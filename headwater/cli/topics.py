"""``headwater topics create|list|describe|delete|alter``."""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="create, list, describe, delete, alter topics")
    tsub = p.add_subparsers(dest="topics_cmd", required=True)

    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=1)
    c.add_argument("--replication-factor", type=int, default=1)
    c.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config")
    c.add_argument("--if-not-exists", action="store_true")
    c.set_defaults(run=create)

    ls = tsub.add_parser("list", help="list topic names")
    ls.set_defaults(run=list_)

    d = tsub.add_parser("describe", help="partitions, leaders, replicas, configs")
    d.add_argument("names", nargs="*")
    d.set_defaults(run=describe)

    rm = tsub.add_parser("delete", help="delete topics")
    rm.add_argument("names", nargs="+")
    rm.set_defaults(run=delete)

    al = tsub.add_parser("alter", help="add partitions, set or delete configs")
    al.add_argument("name")
    al.add_argument("--partitions", type=int, help="new total partition count")
    al.add_argument("--config", action="append", metavar="KEY=VALUE")
    al.add_argument("--delete-config", action="append", metavar="KEY")
    al.set_defaults(run=alter)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


async def create(args: argparse.Namespace) -> int:
    from headwater.errors import TopicAlreadyExistsError

    configs = common.parse_kv(args.config)
    async with _admin(args) as admin:
        try:
            topic_id = await admin.create_topic(
                args.name, args.partitions, args.replication_factor, configs
            )
        except TopicAlreadyExistsError:
            if args.if_not_exists:
                return 0
            raise
    if args.output == "json":
        common.print_json({"name": args.name, "topic_id": topic_id})
    else:
        print(f"created topic {args.name} ({args.partitions} partitions, id {topic_id})")
    return 0


async def list_(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        names = await admin.list_topics()
    if args.output == "json":
        common.print_json(names)
    else:
        for n in names:
            print(n)
    return 0


async def describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        topics = await admin.describe_topics(args.names or None)
    if args.output == "json":
        common.print_json([t.to_json() for t in topics])
        return 0
    for t in topics:
        cfg = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
        print(
            f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitions: {len(t.partitions)}\t"
            f"Configs: {cfg}"
        )
        for p in t.partitions:
            print(
                f"\tPartition: {p.partition}\tLeader: {p.leader}\tEpoch: {p.leader_epoch}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
    return 0


async def delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        await admin.delete_topics(args.names)
    if args.output != "json":
        for n in args.names:
            print(f"deleted topic {n}")
    else:
        common.print_json({"deleted": args.names})
    return 0


async def alter(args: argparse.Namespace) -> int:
    sets = common.parse_kv(args.config)
    if args.partitions is None and not sets and not args.delete_config:
        raise common.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    async with _admin(args) as admin:
        if args.partitions is not None:
            await admin.create_partitions(args.name, args.partitions)
        if sets or args.delete_config:
            await admin.alter_topic_configs(args.name, sets, args.delete_config or [])
    if args.output == "json":
        common.print_json({"altered": args.name})
    else:
        print(f"altered topic {args.name}")
    return 0
