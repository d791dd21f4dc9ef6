"""``headwater groups list|describe|delete|reset-offsets``: consumer-group administration.

``describe --output json`` prints one object per group: ``group``, ``state``, ``members``
(``member_id``, ``instance_id``, ``client_id``, ``assignment``) and ``partitions`` whose items
carry ``topic``, ``partition``, ``committed``, ``end``, ``lag``. ``reset-offsets`` commits
new offsets for a group with no active members; while members are active the coordinator
refuses and its message is printed (exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import sys

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.client.types import TopicPartition
from headwater.errors import NonEmptyGroupError, UnknownTopicOrPartitionError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="consumer groups: list, describe, delete, reset-offsets")
    gsub = p.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    gsub.add_parser("list", help="list groups").set_defaults(run=run_list)
    d = gsub.add_parser("describe", help="members, assignments and lag of a group")
    d.add_argument("group")
    d.set_defaults(run=run_describe)
    x = gsub.add_parser("delete", help="delete an empty group and its offsets")
    x.add_argument("group")
    x.set_defaults(run=run_delete)
    r = gsub.add_parser("reset-offsets", help="set a group's committed offsets (group idle)")
    r.add_argument("group")
    r.add_argument("--topic", required=True)
    r.add_argument("--partition", type=int, help="only this partition (default: all)")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", help="ISO 8601 date-time or epoch milliseconds")
    to.add_argument("--to-offset", type=int)
    r.set_defaults(run=run_reset)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


async def run_list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        groups = await admin.list_groups()
    if args.output == "json":
        common.print_json(
            [
                {"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type}
                for g in groups
            ]
        )
    else:
        for g in groups:
            print(f"{g.group_id}\t{g.state}")
    return 0


async def run_describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        (desc,) = await admin.describe_groups([args.group])
    if args.output == "json":
        common.print_json(desc.to_json())
        return 0
    print(
        f"group {desc.group_id}  state {desc.state}  generation {desc.generation_id}  "
        f"protocol {desc.protocol or '-'}  members {len(desc.members)}  lag {desc.total_lag}"
    )
    print("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER")
    for p in desc.partitions:
        committed = "-" if p.committed < 0 else str(p.committed)
        print(f"{p.topic}\t{p.partition}\t{committed}\t{p.end}\t{p.lag}\t{p.member_id or '-'}")
    for m in desc.members:
        parts = ",".join(f"{tp.topic}[{tp.partition}]" for tp in m.assignment) or "-"
        inst = f" instance={m.group_instance_id}" if m.group_instance_id else ""
        print(f"member {m.member_id}{inst} client={m.client_id} assignment={parts}")
    return 0


async def run_delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        await admin.delete_groups([args.group])
    common.progress(f"deleted group {args.group}")
    return 0


def parse_datetime(text: str) -> int:
    """Epoch milliseconds from digits or an ISO 8601 date-time (naive = UTC)."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise common.UsageError(f"--to-datetime: not ISO 8601 or epoch ms: {text!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


async def run_reset(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        (desc,) = await admin.describe_topics([args.topic])
        tps = [TopicPartition(args.topic, p.partition) for p in desc.partitions]
        if args.partition is not None:
            tps = [tp for tp in tps if tp.partition == args.partition]
            if not tps:
                raise UnknownTopicOrPartitionError(
                    f"{args.topic!r} has no partition {args.partition}"
                )
        (group,) = await admin.describe_groups([args.group])
        if group.members:
            raise NonEmptyGroupError(
                f"group {args.group!r} has {len(group.members)} active member(s) "
                f"(state {group.state}): stop its consumers before resetting offsets"
            )
        if args.to_offset is not None:
            if args.to_offset < 0:
                raise common.UsageError("--to-offset must be >= 0")
            target = dict.fromkeys(tps, args.to_offset)
        else:
            spec: int | str = (
                "earliest"
                if args.to_earliest
                else "latest"
                if args.to_latest
                else parse_datetime(args.to_datetime)
            )
            found = await admin.list_offsets(dict.fromkeys(tps, spec))
            ends = await admin.list_offsets(dict.fromkeys(tps, "latest"))
            target = {
                tp: (found[tp].offset if found[tp].offset >= 0 else ends[tp].offset) for tp in tps
            }
        await admin.alter_consumer_group_offsets(args.group, target)
    if args.output == "json":
        common.print_json(
            [
                {"topic": tp.topic, "partition": tp.partition, "offset": o}
                for tp, o in sorted(target.items())
            ]
        )
    else:
        for tp, o in sorted(target.items()):
            sys.stdout.write(f"{tp.topic}\t{tp.partition}\t{o}\n")
    return 0
