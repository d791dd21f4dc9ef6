"""``headwater partitions reassign|elect-leaders``: operations on partition replicas.

``reassign`` takes one partition (``--topic T --partition P --replicas 1,2,3``) or a
kafka-reassign-partitions style JSON file (``--reassignment-json-file F`` holding
``{"partitions": [{"topic": T, "partition": P, "replicas": [..]}, ...]}``); ``--cancel``
cancels instead; ``--list`` shows ongoing reassignments with their progress (adding,
removing, ISR). ``elect-leaders`` runs a preferred (default) or unclean election for one
partition, a topic's partitions, or every partition; it exits 1 when a partition failed for a
reason other than ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.errors import ElectionNotNeededError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partitions", help="reassign replicas, elect leaders")
    psub = p.add_subparsers(dest="partitions_cmd", required=True)

    r = psub.add_parser("reassign", help="change replica sets online (or --list / --cancel)")
    r.add_argument("--topic")
    r.add_argument("--partition", type=int)
    r.add_argument("--replicas", help="comma-separated broker ids, preferred leader first")
    r.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    r.add_argument("--cancel", action="store_true", help="cancel the given reassignments")
    r.add_argument("--list", action="store_true", help="show ongoing reassignments")
    r.set_defaults(run=reassign)

    e = psub.add_parser("elect-leaders", help="preferred or unclean leader election")
    e.add_argument("--topic")
    e.add_argument("--partition", type=int)
    e.add_argument("--type", choices=["preferred", "unclean"], default="preferred")
    e.set_defaults(run=elect_leaders)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise common.UsageError(
            f"--replicas must be comma-separated broker ids, got {text!r}"
        ) from None
    if not ids:
        raise common.UsageError("--replicas is empty")
    return ids


def _targets(args: argparse.Namespace) -> dict[tuple[str, int], list[int] | None]:
    if args.reassignment_json_file is not None:
        if args.topic is not None or args.replicas is not None:
            raise common.UsageError("give either --reassignment-json-file or --topic/--replicas")
        try:
            doc: Any = json.loads(args.reassignment_json_file.read_text())
            items = doc["partitions"]
            out: dict[tuple[str, int], list[int] | None] = {}
            for it in items:
                key = (str(it["topic"]), int(it["partition"]))
                out[key] = None if args.cancel else [int(b) for b in it["replicas"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise common.UsageError(f"cannot read {args.reassignment_json_file}: {exc}") from None
        if not out:
            raise common.UsageError(f"{args.reassignment_json_file} lists no partitions")
        return out
    if args.topic is None or args.partition is None:
        raise common.UsageError("give --topic and --partition (or --reassignment-json-file)")
    if args.cancel:
        if args.replicas is not None:
            raise common.UsageError("--cancel takes no --replicas")
        return {(args.topic, args.partition): None}
    if args.replicas is None:
        raise common.UsageError("give --replicas (or --cancel)")
    return {(args.topic, args.partition): _broker_ids(args.replicas)}


async def reassign(args: argparse.Namespace) -> int:
    if args.list:
        if args.topic or args.replicas or args.reassignment_json_file or args.cancel:
            raise common.UsageError("--list takes no other options")
        async with _admin(args) as admin:
            ongoing = await admin.list_partition_reassignments()
        if args.output == "json":
            common.print_json([r.to_json() for r in ongoing])
            return 0
        if not ongoing:
            print("no reassignments in progress")
        for r in ongoing:
            print(
                f"Topic: {r.topic}\tPartition: {r.partition}\t"
                f"Replicas: {_ids(r.replicas)}\tAdding: {_ids(r.adding_replicas)}\t"
                f"Removing: {_ids(r.removing_replicas)}\tIsr: {_ids(r.isr)}"
            )
        return 0
    targets = _targets(args)
    async with _admin(args) as admin:
        await admin.alter_partition_reassignments(targets)
    verb = "cancelled" if args.cancel else "started"
    if args.output == "json":
        common.print_json(
            {
                verb: [
                    {"topic": t, "partition": p, "replicas": ids} for (t, p), ids in targets.items()
                ]
            }
        )
    else:
        for (t, p), ids in targets.items():
            what = f" -> replicas {_ids(ids)}" if ids else ""
            print(f"reassignment of {t}-{p} {verb}{what}")
    return 0


def _ids(ids: Any) -> str:
    return ",".join(str(i) for i in ids) if ids else "-"


async def elect_leaders(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise common.UsageError("--partition needs --topic")
    async with _admin(args) as admin:
        parts: list[tuple[str, int]] | None = None
        if args.topic is not None:
            if args.partition is not None:
                parts = [(args.topic, args.partition)]
            else:
                (desc,) = await admin.describe_topics([args.topic])
                parts = [(args.topic, p.partition) for p in desc.partitions]
        results = await admin.elect_leaders(parts, election_type=args.type)
    failed = [
        r
        for r in results
        if r.error is not None and not isinstance(r.error, ElectionNotNeededError)
    ]
    if args.output == "json":
        common.print_json([r.to_json() for r in results])
    else:
        for r in results:
            if r.error is None:
                print(f"{r.topic}-{r.partition}: elected leader {r.leader}")
            else:
                print(
                    f"{r.topic}-{r.partition}: {r.error.code_name()}: {r.error.message}"
                    f" (leader {r.leader})"
                )
    return 1 if failed else 0
