"""``python -m services.coordinator``: run one coordinator process (groups + transactions).

    python -m services.coordinator --coordinator-id N --host 127.0.0.1 --port 0 \
        --etcd HOST:PORT [--metrics-port M] [--ready-file PATH] [--lease-ttl S]
        [--offsets-topic-partitions P] [--offsets-topic-replication-factor R]
        [--offsets-retention-minutes M] [--topic-watch-interval-ms MS]
        [--transaction-state-partitions P] [--transaction-max-timeout-ms MS] [--log-level L]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from headwater.platform.limits import add_limit_flags, limits_from_args
from headwater.platform.security_flags import add_security_flags, security_from_args
from services.coordinator.app import Settings, run
from services.coordinator.topic_watch import WATCH_INTERVAL_S


def parse(argv: list[str] | None = None) -> Settings:
    ap = argparse.ArgumentParser(prog="python -m services.coordinator", description=__doc__)
    ap.add_argument("--coordinator-id", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--etcd", required=True, help="etcd client endpoint HOST:PORT")
    ap.add_argument("--metrics-port", type=int, default=0, help="0 picks; -1 disables")
    ap.add_argument("--ready-file", type=Path, default=None)
    ap.add_argument(
        "--lease-ttl", type=int, default=5, help="registration lease seconds (failover time)"
    )
    ap.add_argument(
        "--offsets-topic-partitions",
        type=int,
        default=12,
        help="partitions of __consumer_offsets when this process creates it (default 12)",
    )
    ap.add_argument(
        "--offsets-topic-replication-factor",
        type=int,
        default=3,
        help="replication factor of __consumer_offsets, capped at the live brokers (default 3)",
    )
    ap.add_argument(
        "--offsets-retention-minutes",
        type=int,
        default=7 * 24 * 60,
        help="committed offsets of an Empty group expire after this (default 7 days)",
    )
    ap.add_argument(
        "--topic-watch-interval-ms",
        type=int,
        default=int(WATCH_INTERVAL_S * 1000),
        help="how often subscribed topics' partition counts are checked (default 2000)",
    )
    ap.add_argument(
        "--transaction-state-partitions",
        type=int,
        default=8,
        help="partitions of __transaction_state when this process creates it (default 8)",
    )
    ap.add_argument(
        "--transaction-max-timeout-ms",
        type=int,
        default=15 * 60 * 1000,
        help="largest transaction_timeout_ms InitProducerId accepts (default 900000)",
    )
    ap.add_argument("--log-level", default="INFO")
    add_security_flags(ap)
    add_limit_flags(ap)
    a = ap.parse_args(argv)
    security = security_from_args(a, ap)
    limits = limits_from_args(a, ap)
    if a.offsets_topic_partitions < 1 or a.offsets_topic_replication_factor < 1:
        ap.error("--offsets-topic-partitions and --offsets-topic-replication-factor must be >= 1")
    if a.transaction_state_partitions < 1 or a.transaction_max_timeout_ms < 1:
        ap.error("--transaction-state-partitions and --transaction-max-timeout-ms must be >= 1")
    if a.topic_watch_interval_ms < 100:
        ap.error("--topic-watch-interval-ms must be >= 100")
    if a.lease_ttl < 2 or a.offsets_retention_minutes < 1:
        ap.error("--lease-ttl must be >= 2 and --offsets-retention-minutes >= 1")
    logging.basicConfig(
        level=a.log_level.upper(),
        format="%(asctime)s %(levelname)s coordinator-%(process)d %(name)s: %(message)s",
    )
    return Settings(
        coordinator_id=a.coordinator_id,
        host=a.host,
        port=a.port,
        etcd=a.etcd,
        metrics_port=None if a.metrics_port < 0 else a.metrics_port,
        ready_file=a.ready_file,
        offsets_topic_partitions=a.offsets_topic_partitions,
        offsets_topic_replication_factor=a.offsets_topic_replication_factor,
        lease_ttl=a.lease_ttl,
        offsets_retention_ms=a.offsets_retention_minutes * 60_000,
        topic_watch_interval_s=a.topic_watch_interval_ms / 1000,
        transaction_state_partitions=a.transaction_state_partitions,
        transaction_max_timeout_ms=a.transaction_max_timeout_ms,
        security=security,
        limits=limits,
    )


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
