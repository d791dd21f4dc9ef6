"""Headwater core benchmark: one run, one machine, figures and ratios for docs/benchmarks.md.

Starts a local cluster (etcd, controller, one broker) in a temporary folder, measures the
machine's ceilings (bench/ceilings.py) and runs ``headwater bench`` as separate processes:

* produce 100 B and 1 KiB records, acks=1, bulk API (``send_many``) and per-record ``send()``;
* consume the 100 B topic from the start, decoded to Python values and to Arrow.

Prints a Markdown table (and JSON with ``--json``).

    python bench/core.py [--records-100 3000000] [--records-1k 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ceilings

from headwater.dev.cluster import LocalCluster
from headwater.dev.procs import python_env

_LINE = re.compile(
    r"(?P<n>\d+) records, (?P<rps>[\d,.]+) records/sec \((?P<mbs>[\d,.]+) MB/sec\)"
    r"(?:.*?(?P<p50>[\d.]+) ms 50th, (?P<p99>[\d.]+) ms 99th, (?P<p999>[\d.]+) ms 99.9th)?"
)


def _bench(bootstrap: str, *args: str) -> dict[str, float]:
    env = {**os.environ, "HEADWATER_BOOTSTRAP": bootstrap}
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "bench", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=True,
    ).stdout
    m = None
    for line in out.splitlines():
        m = _LINE.search(line) or m
    if m is None:
        raise RuntimeError(f"unparsable bench output: {out!r}")
    return {k: float(v.replace(",", "")) for k, v in m.groupdict().items() if v is not None}


def machine() -> str:
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    py = platform.python_version()
    return f"{os.cpu_count()} vCPU {cpu}, Linux {platform.release()}, Python {py}"


def run(records_100: int, records_1k: int) -> dict[str, object]:
    results: dict[str, object] = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        # as many bytes as the produce runs below append, in one growing file (like a log)
        growing_mib = (records_100 * 100 + records_1k * 1024) * 12 // 10 // 2**20
        results["page_cache_write_growing_mb_s"] = ceilings.page_cache_write_mb_s(
            Path(tmp), growing_mib, repeats=1
        )
        results["page_cache_rewrite_mb_s"] = ceilings.page_cache_write_mb_s(Path(tmp))
        # the ceiling's server gets the broker's environment (malloc tunables included)
        results.update(ceilings.grpc_ceilings(env=python_env()))
        with LocalCluster(Path(tmp) / "cluster") as cluster:
            b = cluster.bootstrap
            rows: dict[str, dict[str, float]] = {}
            rows["produce 100 B, send_many"] = _bench(
                b,
                "produce",
                "--topic",
                "p100",
                "--num-records",
                str(records_100),
                "--record-size",
                "100",
                "--mode",
                "many",
            )
            rows["produce 100 B, send()"] = _bench(
                b,
                "produce",
                "--topic",
                "p100s",
                "--num-records",
                str(records_100 // 10),
                "--record-size",
                "100",
                "--mode",
                "send",
            )
            rows["produce 1 KiB, send_many"] = _bench(
                b,
                "produce",
                "--topic",
                "p1k",
                "--num-records",
                str(records_1k),
                "--record-size",
                "1024",
                "--mode",
                "many",
            )
            rows["produce 1 KiB, send()"] = _bench(
                b,
                "produce",
                "--topic",
                "p1ks",
                "--num-records",
                str(records_1k // 5),
                "--record-size",
                "1024",
                "--mode",
                "send",
            )
            rows["consume 100 B, decoded to values"] = _bench(
                b,
                "consume",
                "--topic",
                "p100",
                "--num-records",
                str(records_100),
                "--decode",
                "values",
            )
            rows["consume 100 B, decoded to Arrow"] = _bench(
                b,
                "consume",
                "--topic",
                "p100",
                "--num-records",
                str(records_100),
                "--decode",
                "arrow",
            )
            rows["consume 1 KiB, decoded to values"] = _bench(
                b,
                "consume",
                "--topic",
                "p1k",
                "--num-records",
                str(records_1k),
                "--decode",
                "values",
            )
            results["rows"] = rows
    return results


def to_markdown(r: dict[str, object]) -> str:
    pc = float(r["page_cache_write_growing_mb_s"])  # type: ignore[arg-type]
    rewrite = float(r["page_cache_rewrite_mb_s"])  # type: ignore[arg-type]
    unary = float(r["grpc_unary_1mib_8_in_flight_mb_s"])  # type: ignore[arg-type]
    stream = float(r["grpc_stream_1mib_mb_s"])  # type: ignore[arg-type]
    lines = [
        f"Machine: {r['machine']}",
        "",
        f"Ceilings in the same run: page-cache write into a growing file {pc:,.0f} MB/s "
        f"(rewriting freed pages: {rewrite:,.0f} MB/s); Python gRPC loopback "
        f"unary 1 MiB x8 in flight {unary:,.0f} MB/s; server stream 1 MiB {stream:,.0f} MB/s.",
        "",
        "| workload | records/s | MB/s | % of page-cache write (growing) | % of gRPC ceiling | "
        "ack latency p50 / p99 / p99.9 (ms) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    rows: dict[str, dict[str, float]] = r["rows"]  # type: ignore[assignment]
    for name, v in rows.items():
        ceiling = unary if name.startswith("produce") else stream
        lat = f"{v['p50']:.0f} / {v['p99']:.0f} / {v['p999']:.0f}" if "p50" in v else "—"
        lines.append(
            f"| {name} | {v['rps']:,.0f} | {v['mbs']:,.0f} | {100 * v['mbs'] / pc:.1f}% | "
            f"{100 * v['mbs'] / ceiling:.0f}% | {lat} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records-100", type=int, default=3_000_000)
    parser.add_argument("--records-1k", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.records_100, args.records_1k)
    print(json.dumps(results, indent=2) if args.json else to_markdown(results))


if __name__ == "__main__":
    main()
