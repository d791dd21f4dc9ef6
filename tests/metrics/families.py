"""The metric families issue 6 requires, per service kind, and a scrape parser.

One list, used by the live-cluster test (each family is exported by a real process and moves)
and by the monitoring-files test (every PromQL expression names only exported metrics).
Names are as they appear in the text exposition (counters with ``_total``).
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

#: On every service: per-RPC request rate, errors, latency; prometheus_client's process metrics.
COMMON = {
    "headwater_rpc_requests_total": "counter",
    "headwater_rpc_errors_total": "counter",
    "headwater_rpc_duration_seconds": "histogram",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_start_time_seconds": "gauge",
}

BROKER = {
    "headwater_broker_under_replicated_partitions": "gauge",
    "headwater_broker_at_min_isr_partitions": "gauge",
    "headwater_broker_under_min_isr_partitions": "gauge",
    "headwater_broker_isr_shrinks_total": "counter",
    "headwater_broker_isr_expands_total": "counter",
    "headwater_broker_bytes_in_total": "counter",
    "headwater_broker_bytes_out_total": "counter",
    "headwater_broker_records_in_total": "counter",
    "headwater_broker_records_out_total": "counter",
    "headwater_broker_log_size_bytes": "gauge",
    "headwater_broker_log_segments": "gauge",
    "headwater_broker_partitions": "gauge",
}

#: Quota metrics (the quota engineer's block of services/broker/metrics.py), checked to exist
#: on brokers once that block is in the code base (see test_metrics_cluster).
BROKER_QUOTA = {
    "headwater_broker_quota_throttle_seconds_total": "counter",
}

CONTROLLER = {
    "headwater_controller_active": "gauge",
    "headwater_controller_offline_partitions": "gauge",
    "headwater_controller_partitions": "gauge",
    "headwater_controller_leader_elections_total": "counter",
    "headwater_controller_unclean_leader_elections_total": "counter",
    "headwater_controller_live_brokers": "gauge",
}

COORDINATOR = {
    "headwater_coordinator_group_lag": "gauge",
    "headwater_coordinator_group_members": "gauge",
    "headwater_coordinator_rebalances_total": "counter",
    "headwater_coordinator_rebalance_duration_seconds": "histogram",
}

_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Scrape:
    """One /metrics answer: family name -> type, and samples by sample name."""

    types: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            v
            for lbls, v in self.samples.get(name, [])
            if all(lbls.get(k) == want for k, want in labels.items())
        )


def parse(text: str) -> Scrape:
    out = Scrape()
    for line in text.splitlines():
        m = _TYPE.match(line)
        if m:
            out.types[m.group(1)] = m.group(2)
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(3) or ""))
            out.samples[m.group(1)].append((labels, float(m.group(4))))
    return out


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return parse(resp.read().decode())


def sample_names(family: str, kind: str) -> set[str]:
    """The sample names a family of ``kind`` exposes (what PromQL can select)."""
    if kind == "histogram":
        base = family
        return {f"{base}_bucket", f"{base}_sum", f"{base}_count", f"{base}_created"}
    if kind == "counter":
        base = family.removesuffix("_total")
        return {f"{base}_total", f"{base}_created"}
    return {family}
