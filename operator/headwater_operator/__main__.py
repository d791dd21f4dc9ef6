"""``python -m headwater_operator --bootstrap HOST:PORT [--namespace NS ...|--all-namespaces]``

Kubernetes credentials come from the in-cluster service account or ``KUBECONFIG`` (kopf's
usual login). Runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

import kopf

from headwater_operator.config import OperatorConfig
from headwater_operator.registry import build_registry


def parse_args(argv: list[str] | None = None) -> OperatorConfig:
    ap = argparse.ArgumentParser(prog="headwater_operator", description=__doc__)
    ap.add_argument(
        "--bootstrap",
        default=os.environ.get("HEADWATER_BOOTSTRAP"),
        help="Headwater bootstrap brokers host:port[,...] (env HEADWATER_BOOTSTRAP)",
    )
    scope = ap.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    ap.add_argument("--drift-interval", type=float, default=60.0, help="seconds (default 60)")
    ap.add_argument(
        "--group-interval", type=float, default=15.0, help="ConsumerGroup status refresh seconds"
    )
    ap.add_argument(
        "--delete-attempts",
        type=int,
        default=8,
        help="failed topic deletions after which the finalizer is released anyway",
    )
    ap.add_argument("--max-backoff", type=float, default=60.0, help="seconds")
    ap.add_argument("--request-timeout-ms", type=int, default=10_000)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not args.bootstrap:
        ap.error("--bootstrap (or HEADWATER_BOOTSTRAP) is required")
    return OperatorConfig(
        bootstrap=args.bootstrap,
        namespaces=tuple(args.namespace),
        all_namespaces=args.all_namespaces,
        drift_interval_s=args.drift_interval,
        group_interval_s=args.group_interval,
        delete_attempts=args.delete_attempts,
        max_backoff_s=args.max_backoff,
        request_timeout_ms=args.request_timeout_ms,
        verbose=args.verbose,
    )


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if config.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    namespaces = config.namespaces or (() if config.all_namespaces else ("default",))
    asyncio.run(
        kopf.operator(
            registry=build_registry(config),
            standalone=True,
            clusterwide=config.all_namespaces,
            namespaces=namespaces,
        )
    )


if __name__ == "__main__":
    main()
