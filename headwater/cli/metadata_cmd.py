"""``headwater metadata``: brokers, controller and topics as a broker sees them."""

from __future__ import annotations

import argparse

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="show brokers, controller and topics")
    p.set_defaults(run=run)


async def run(args: argparse.Namespace) -> int:
    async with AsyncAdminClient(common.bootstrap(args), controller=common.controller(args)) as a:
        view = await a.metadata()
    brokers = [
        {"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
        for _, b in sorted(view.brokers.items())
    ]
    topics = {name: len(t.partitions) for name, t in sorted(view.topics.items())}
    if args.output == "json":
        common.print_json(
            {
                "cluster_id": view.cluster_id,
                "controller_id": view.controller_id,
                "controller": view.controller_address,
                "brokers": brokers,
                "topics": topics,
            }
        )
        return 0
    print(f"cluster {view.cluster_id}, controller {view.controller_id} ({view.controller_address})")
    for b in brokers:
        print(f"broker {b['broker_id']} at {b['host']}:{b['port']} rack={b['rack'] or '-'}")
    for name, n in topics.items():
        print(f"topic {name}: {n} partitions")
    return 0
