"""``python -m services.broker``: run one broker process.

    python -m services.broker --broker-id N --host 127.0.0.1 --port P --data-dirs d1[,d2] \
        --etcd HOST:PORT --metrics-port M [--rack R] [--ready-file F] [--log-level INFO] \
        [--peer-override ID=HOST:PORT ...] [--replica-lag-time-max-ms MS] \
        [--controlled-shutdown-timeout-s S] [--config KEY=VALUE ...]

``--port 0`` / ``--metrics-port 0`` pick free ports; with ``--ready-file`` the chosen ones are
written there as JSON ``{"port": P, "metrics_port": M}`` (atomically) once the broker serves
and is registered. SIGTERM or SIGINT stops it cleanly. For large messages, launch it with
``GLIBC_TUNABLES`` set as in PERFORMANCE-NOTES (the launcher's job: it must precede start-up).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from headwater.errors import HeadwaterError
from headwater.platform.dynamic_config import parse_static
from headwater.platform.limits import add_limit_flags, limits_from_args
from headwater.platform.security_flags import add_security_flags, security_from_args
from services.broker.descriptors import INDEX_FILES_OPEN_MAX
from services.broker.group_stream import StreamLimits
from services.broker.registration import LEASE_TTL_S
from services.broker.replication.peers import parse_overrides
from services.broker.server import BrokerSettings, serve


def parse_args(argv: list[str] | None = None) -> BrokerSettings:
    ap = argparse.ArgumentParser(
        prog="python -m services.broker", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--broker-id", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    ap.add_argument(
        "--advertised-host",
        default=None,
        help="host registered for clients and peers (default: --host), e.g. a pod's DNS name "
        "when binding 0.0.0.0",
    )
    ap.add_argument(
        "--advertised-port",
        type=int,
        default=None,
        help="port registered for clients and peers (default: the bound port)",
    )
    ap.add_argument("--data-dirs", required=True, help="comma-separated log directories")
    ap.add_argument("--etcd", required=True, help="etcd endpoint HOST:PORT")
    ap.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: pick)")
    ap.add_argument("--rack", default="")
    ap.add_argument("--ready-file", type=Path, default=None)
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument(
        "--peer-override",
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="connect to broker ID at HOST:PORT for replication (repeatable; clients unaffected)",
    )
    ap.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        default=10_000,
        help="a follower not caught up for this long leaves the ISR",
    )
    ap.add_argument(
        "--index-files-open-max",
        type=int,
        default=INDEX_FILES_OPEN_MAX,
        help="index files (offset and time indexes of active segments) open at once, least "
        "recently used closed first and reopened on their next write; at most a quarter of "
        "the open-file limit",
    )
    ap.add_argument(
        "--log-page-cache-window-bytes",
        type=int,
        default=0,
        help="each log segment starts the writeback of what it appends and drops from the "
        "page cache what lies more than this many bytes behind its end (0: never, the kernel "
        "decides both, as with Kafka); only for hosts where fresh memory is slow "
        "(docs/storage.md, write-behind and the page-cache window); readers further behind "
        "read from the disk",
    )
    ap.add_argument(
        "--controlled-shutdown-timeout-s",
        type=float,
        default=10.0,
        help="how long SIGTERM waits for the controller to move leaderships away (0: skip)",
    )
    ap.add_argument(
        "--session-timeout-s",
        type=int,
        default=LEASE_TTL_S,
        help="TTL of the broker's etcd lease: how long after a crash the controller notices "
        "and fails its partitions over (etcd's minimum is 2)",
    )
    ap.add_argument(
        "--log-cleaner-backoff-ms",
        type=int,
        default=15_000,
        help="pause between two log-compaction passes over the compacted logs",
    )
    ap.add_argument(
        "--log-cleaner-io-max-bytes-per-second",
        type=float,
        default=0,
        help="throttle of the log cleaner's reads plus writes (0: unlimited)",
    )
    ap.add_argument(
        "--log-retention-check-interval-ms",
        type=int,
        default=30_000,
        help="pause between two retention passes (deleting expired segments)",
    )
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="static broker config (repeatable): a topic config used as the default of topics "
        "without an override (e.g. retention.ms=3600000), or quota.window.num / "
        "quota.window.size.seconds; dynamic configs in etcd (headwater configs alter "
        "--entity-type brokers) take precedence",
    )
    gsd = StreamLimits()
    g = ap.add_argument_group("group streams (GroupStreamService.Consume, docs/groups.md)")
    g.add_argument(
        "--group-stream-max-streams",
        type=int,
        default=gsd.max_streams,
        help="concurrent group streams this broker serves (more: THROTTLING_QUOTA_EXCEEDED)",
    )
    g.add_argument(
        "--group-stream-max-credit-records",
        type=int,
        default=gsd.max_credit_records,
        help="records a stream's client may have granted and not received (larger grants "
        "are capped)",
    )
    g.add_argument(
        "--group-stream-max-credit-bytes",
        type=int,
        default=gsd.max_credit_bytes,
        help="bytes a stream's client may have granted and not received (larger grants are capped)",
    )
    g.add_argument(
        "--group-stream-fetch-buffer-bytes",
        type=int,
        default=gsd.fetch_buffer_bytes,
        help="fetched bytes a stream buffers per assigned partition",
    )
    add_security_flags(ap)
    add_limit_flags(ap)
    a = ap.parse_args(argv)
    security = security_from_args(a, ap)
    limits = limits_from_args(a, ap)
    dirs = [Path(d) for d in a.data_dirs.split(",") if d.strip()]
    if not dirs:
        ap.error("--data-dirs needs at least one directory")
    if a.host in ("0.0.0.0", "::") and not a.advertised_host:
        ap.error(f"--host {a.host} is not an address clients can reach: set --advertised-host")
    if a.advertised_port is not None and not 0 < a.advertised_port < 65536:
        ap.error("--advertised-port must be in 1..65535")
    if a.broker_id < 0:
        ap.error("--broker-id must be >= 0")
    if a.session_timeout_s < 2:
        ap.error("--session-timeout-s must be at least 2 (etcd's minimum lease TTL)")
    if a.log_cleaner_backoff_ms <= 0:
        ap.error("--log-cleaner-backoff-ms must be positive")
    if a.log_cleaner_io_max_bytes_per_second < 0:
        ap.error("--log-cleaner-io-max-bytes-per-second must be >= 0")
    if a.replica_lag_time_max_ms <= 0:
        ap.error("--replica-lag-time-max-ms must be positive")
    if a.index_files_open_max < 2:
        ap.error("--index-files-open-max must be at least 2")
    if a.log_page_cache_window_bytes != 0 and a.log_page_cache_window_bytes < 64 * 1024 * 1024:
        ap.error("--log-page-cache-window-bytes must be 0 (off) or at least 67108864 (64 MiB)")
    if a.log_retention_check_interval_ms <= 0:
        ap.error("--log-retention-check-interval-ms must be positive")
    stream_limits = StreamLimits(
        max_streams=a.group_stream_max_streams,
        max_credit_records=a.group_stream_max_credit_records,
        max_credit_bytes=a.group_stream_max_credit_bytes,
        fetch_buffer_bytes=a.group_stream_fetch_buffer_bytes,
    )
    try:
        stream_limits.validate()
    except HeadwaterError as exc:
        ap.error(str(exc))
    try:
        overrides = parse_overrides(a.peer_override)
        static_configs = parse_static(a.config)
    except ValueError as exc:
        ap.error(str(exc))
    logging.basicConfig(
        level=a.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [broker %(broker_id)s] %(message)s".replace(
            "%(broker_id)s", str(a.broker_id)
        ),
    )
    return BrokerSettings(
        broker_id=a.broker_id,
        host=a.host,
        port=a.port,
        data_dirs=dirs,
        etcd=a.etcd,
        metrics_port=a.metrics_port,
        rack=a.rack,
        ready_file=a.ready_file,
        peer_overrides=overrides,
        replica_lag_time_max_ms=a.replica_lag_time_max_ms,
        index_files_open_max=a.index_files_open_max,
        page_cache_window_bytes=a.log_page_cache_window_bytes,
        controlled_shutdown_s=a.controlled_shutdown_timeout_s,
        session_timeout_s=a.session_timeout_s,
        log_cleaner_backoff_ms=a.log_cleaner_backoff_ms,
        log_cleaner_io_max_bytes_per_s=a.log_cleaner_io_max_bytes_per_second or None,
        retention_check_interval_ms=a.log_retention_check_interval_ms,
        static_configs=static_configs,
        security=security,
        limits=limits,
        group_stream=stream_limits,
        advertised_host=a.advertised_host,
        advertised_port=a.advertised_port,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
