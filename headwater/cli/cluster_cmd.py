"""``headwater cluster describe``: the brokers and the active controller, as the controller
(through etcd) sees them."""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="describe the cluster (brokers, controller)")
    csub = p.add_subparsers(dest="cluster_cmd", required=True)
    d = csub.add_parser("describe", help="brokers with id/host/port/rack, controller and epoch")
    d.set_defaults(run=describe)


async def describe(args: argparse.Namespace) -> int:
    async with AsyncAdminClient(common.bootstrap(args), controller=common.controller(args)) as a:
        c = await a.describe_cluster()
    brokers = [
        {"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack or None}
        for b in sorted(c.brokers, key=lambda b: b.broker_id)
    ]
    if args.output == "json":
        common.print_json(
            {
                "cluster_id": c.cluster_id,
                "controller_id": c.controller_id,
                "controller_epoch": c.controller_epoch,
                "brokers": brokers,
            }
        )
        return 0
    print(f"ClusterId: {c.cluster_id}")
    print(f"Controller: {c.controller_id}\tEpoch: {c.controller_epoch}")
    for b in brokers:
        print(f"Broker: {b['broker_id']}\tHost: {b['host']}:{b['port']}\tRack: {b['rack'] or '-'}")
    return 0
