"""``python -m services.controller``: run one controller process.

    python -m services.controller --controller-id N --host 127.0.0.1 --port 0 \
        --etcd HOST:PORT [--metrics-port M] [--ready-file PATH] [--lease-ttl S]
        [--no-auto-leader-rebalance] [--leader-imbalance-check-interval-s S]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from headwater.platform.limits import add_limit_flags, limits_from_args
from headwater.platform.security_flags import add_security_flags, security_from_args
from services.controller.app import Settings, run


def parse(argv: list[str] | None = None) -> Settings:
    ap = argparse.ArgumentParser(prog="python -m services.controller", description=__doc__)
    ap.add_argument("--controller-id", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--etcd", required=True, help="etcd client endpoint HOST:PORT")
    ap.add_argument("--metrics-port", type=int, default=0, help="0 picks; -1 disables")
    ap.add_argument("--ready-file", type=Path, default=None)
    ap.add_argument("--lease-ttl", type=int, default=5, help="seconds (failover time)")
    ap.add_argument(
        "--auto-leader-rebalance",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="periodically move leadership back to preferred replicas (default: on)",
    )
    ap.add_argument(
        "--leader-imbalance-check-interval-s",
        type=float,
        default=300.0,
        help="seconds between automatic rebalance checks (default 300)",
    )
    ap.add_argument(
        "--leader-imbalance-per-broker-percentage",
        type=float,
        default=10.0,
        help="rebalance a broker's partitions when more than this share of those it is the"
        " preferred leader of are led elsewhere (default 10)",
    )
    ap.add_argument(
        "--crash-detection",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold a liveness stream to each broker and fail a broker over at once when it"
        " resets and its port refuses connections; off: only its etcd lease (default: on)",
    )
    ap.add_argument("--log-level", default="INFO")
    add_security_flags(ap)
    add_limit_flags(ap)
    a = ap.parse_args(argv)
    security = security_from_args(a, ap)
    limits = limits_from_args(a, ap)
    if a.leader_imbalance_check_interval_s <= 0:
        ap.error("--leader-imbalance-check-interval-s must be > 0")
    logging.basicConfig(
        level=a.log_level.upper(),
        format="%(asctime)s %(levelname)s controller-%(process)d %(name)s: %(message)s",
    )
    return Settings(
        controller_id=a.controller_id,
        host=a.host,
        port=a.port,
        etcd=a.etcd,
        metrics_port=None if a.metrics_port < 0 else a.metrics_port,
        ready_file=a.ready_file,
        lease_ttl=a.lease_ttl,
        auto_leader_rebalance=a.auto_leader_rebalance,
        crash_detection=a.crash_detection,
        imbalance_check_interval_s=a.leader_imbalance_check_interval_s,
        imbalance_percent=a.leader_imbalance_per_broker_percentage,
        security=security,
        limits=limits,
    )


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
