"""``headwater transactions list|describe``: what the transaction coordinators hold.

``list [--state S ...]`` prints ``transactional_id  producer_id  state`` per id (Kafka's state
names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead);
``describe ID`` prints the state, producer id and epoch, timeout, start time and the
partitions and groups of the open transaction. ``--output json`` prints objects instead.
"""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transactions", help="transactions: list, describe")
    tsub = p.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    ls = tsub.add_parser("list", help="list transactional ids and their states")
    ls.add_argument("--state", action="append", default=[], help="only this state (repeatable)")
    ls.set_defaults(run=run_list)
    d = tsub.add_parser("describe", help="one transactional id's state and open partitions")
    d.add_argument("transactional_id")
    d.set_defaults(run=run_describe)


def _admin(args: argparse.Namespace) -> AsyncAdminClient:
    return AsyncAdminClient(common.bootstrap(args), controller=common.controller(args))


async def run_list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        txns = await admin.list_transactions(args.state)
    if args.output == "json":
        common.print_json(
            [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "state": t.state,
                }
                for t in txns
            ]
        )
    else:
        for t in txns:
            print(f"{t.transactional_id}\t{t.producer_id}\t{t.state}")
    return 0


async def run_describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        (t,) = await admin.describe_transactions([args.transactional_id])
    if args.output == "json":
        common.print_json(t.to_json())
        return 0
    print(f"transactional id: {t.transactional_id}")
    print(f"state:            {t.state}")
    print(f"producer:         id {t.producer_id}, epoch {t.producer_epoch}")
    print(f"timeout:          {t.timeout_ms} ms")
    if t.start_ms >= 0:
        print(f"started:          {t.start_ms} (ms since the epoch)")
    for tp in t.partitions:
        print(f"partition:        {tp.topic}[{tp.partition}]")
    for g in t.groups:
        print(f"group:            {g}")
    return 0
