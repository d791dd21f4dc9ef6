"""Headwater side by side with Apache Kafka, NATS JetStream and Redis Streams: one run, one table.

Runs, one after another on this machine (never two systems at once):

1. the machine's ceilings (bench/ceilings.py): page-cache write into a growing file and into
   freed pages, Python gRPC loopback unary (8 x 1 MiB in flight) and server-stream;
2. ``bench/peers/<system>.py --out rows.jsonl`` for each system: each starts its system on
   127.0.0.1, runs the workload matrix of bench/peers/common.py and stops it by PID.

Then prints (and writes to ``<out-dir>/table.md``) a Markdown report: every row with its
ratio to Apache Kafka's fastest client on the same workload (its Java perf tool or
confluent-kafka) and, for Headwater, the fraction of the ceilings; then the issue's targets
with their verdicts.

    python bench/side_by_side.py [--systems headwater,kafka,nats,redis] [--quick] [--no-rf3]
                                 [--max-seconds 30] [--out-dir DIR] [--only "produce-max"]
    python bench/side_by_side.py --report DIR/rows.jsonl DIR/ceilings.json   # table only

``--interleave`` runs the systems unit by unit instead of system by system: a unit is one
topic shape (its produce-max rows and the consume row that reads them) or one fixed-rate row;
every system runs a unit, with the systems' order reversed from one unit to the next (A B,
B A, A B, ...), before the next unit starts. On a shared machine whose load drifts over
minutes, the two rows of a ratio are then measured within a minute or two of each other
instead of half an hour apart. Each step (unit, system, UTC start and end, load average) is
written to ``<out-dir>/steps.json``.

``--rounds N`` (with ``--interleave``) runs the whole interleaved sequence N times, the
systems' order flipped from one round to the next as well, and tags each row with its round
(``extra["round"]``). The report then uses, per measurement (system, client, workload,
configuration, API), the median row by records/s (the lower middle one for an even N),
with every round's figure in ``extra["rounds_records_per_sec"]``: one sample of a 2-second
row on a shared 2-core VM moves by ±30% from run to run (docs/benchmarks.md, session 33),
and the median of an odd number of rounds, for both systems alike, does not follow one
outlier.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))

import ceilings  # noqa: E402
from common import (  # noqa: E402
    DEFAULT_WARM_MIB,
    WARM_MIB_ENV,
    WORKLOADS,
    Row,
    Workload,
    read_rows,
    selected,
    workloads,
)
from core import machine  # noqa: E402

from headwater.dev.procs import python_env  # noqa: E402

SYSTEMS = ("headwater", "kafka", "nats", "redis")


def measure_ceilings(growing_mib: int) -> dict[str, float]:
    """Page-cache and gRPC ceilings, measured now (see bench/ceilings.py)."""
    with tempfile.TemporaryDirectory(prefix="hw-ceil-") as tmp:
        out = {
            "page_cache_write_growing_mb_s": ceilings.page_cache_write_mb_s(
                Path(tmp), growing_mib, repeats=1
            ),
            "page_cache_rewrite_mb_s": ceilings.page_cache_write_mb_s(Path(tmp)),
            "page_cache_write_sustained_mb_s": ceilings.page_cache_write_sustained_mb_s(
                Path(tmp), 2 * growing_mib
            ),
        }
    out.update(ceilings.grpc_ceilings(env=python_env()))
    return out


def run_system(system: str, rows_path: Path, flags: list[str], timeout: float) -> int:
    """Run one peer module as a child process; its rows are appended to ``rows_path``."""
    argv = [sys.executable, str(HERE / "peers" / f"{system}.py"), "--out", str(rows_path), *flags]
    print(f"== {system}: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    # on a timeout: SIGTERM first, so the harness stops the servers it started (they run in
    # their own sessions and would outlive a SIGKILLed harness), then SIGKILL
    child = subprocess.Popen(argv, env=python_env())
    try:
        code = child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.terminate()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        code = -1
    print(f"== {system}: exit {code} after {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return code


def interleave_units(ws: Iterable[Workload]) -> list[list[Workload]]:
    """The units ``--interleave`` alternates systems over, in matrix order: the produce-max
    and consume workloads of one (partitions, record size, replication factor) — a consume
    row reads the topic its produce-max rows wrote, so they must run in one harness call —
    and every other workload alone."""
    units: dict[tuple[object, ...], list[Workload]] = {}
    for w in ws:
        shape: tuple[object, ...] = (
            (w.partitions, w.record_size, w.rf)
            if w.kind in ("produce-max", "consume")
            else (w.key,)
        )
        units.setdefault(shape, []).append(w)
    return list(units.values())


def interleaved_steps(
    units: list[list[Workload]], systems: list[str], rounds: int = 1
) -> list[tuple[int, int, str, list[Workload]]]:
    """(round, unit index, system, workloads) in run order: every system runs unit *i* before
    unit *i + 1* starts, in the given order when *i + round* is even and reversed when it is
    odd, so neither system always goes first after a change of unit, nor in every round."""
    return [
        (r, i, system, unit)
        for r in range(rounds)
        for i, unit in enumerate(units)
        for system in (systems if (i + r) % 2 == 0 else systems[::-1])
    ]


def tag_rows(rows_path: Path, first: int, round_: int) -> None:
    """Add ``extra["round"] = round_`` to the rows of ``rows_path`` from line ``first`` on
    (the rows one step appended)."""
    if not rows_path.exists():
        return
    lines = [x for x in rows_path.read_text().splitlines() if x.strip()]
    for k in range(first, len(lines)):
        d = json.loads(lines[k])
        d["extra"] = {**(d.get("extra") or {}), "round": round_}
        lines[k] = json.dumps(d)
    rows_path.write_text("".join(x + "\n" for x in lines))


def _row_count(rows_path: Path) -> int:
    if not rows_path.exists():
        return 0
    return sum(1 for x in rows_path.read_text().splitlines() if x.strip())


def median_rows(rows: list[Row]) -> list[Row]:
    """One row per measurement of a ``--rounds`` run: rows tagged with a round that share
    system, client, workload, configuration, API (``mode``) and linger are replaced by their
    median by records/s (the lower middle one of an even count), which carries every round's
    records/s, in round order, in ``extra["rounds_records_per_sec"]``. Untagged rows pass
    through unchanged, in place."""
    groups: dict[tuple[object, ...], list[Row]] = {}
    out: list[Row | tuple[object, ...]] = []
    for r in rows:
        if "round" not in r.extra:
            out.append(r)
            continue
        key = (
            r.system,
            r.client,
            r.workload,
            r.config,
            str(r.extra.get("mode", "")),
            str(r.extra.get("linger_ms", "")),
        )
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(r)
    result: list[Row] = []
    for item in out:
        if isinstance(item, Row):
            result.append(item)
            continue
        group = sorted(groups[item], key=lambda r: int(str(r.extra["round"])))
        median = sorted(group, key=lambda r: r.records_per_sec)[(len(group) - 1) // 2]
        extra = {**median.extra, "rounds_records_per_sec": [r.records_per_sec for r in group]}
        result.append(dataclasses.replace(median, extra=extra))
    return result


def _utc() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def run_interleaved(
    units: list[list[Workload]],
    systems: list[str],
    rows_path: Path,
    flags_of: dict[str, list[str]],
    timeout: float,
    steps_path: Path,
    rounds: int = 1,
) -> dict[str, int]:
    """Run :func:`interleaved_steps`, each step one harness call restricted to its unit's
    exact workload keys (its rows tagged with the round when ``rounds`` > 1); return each
    system's worst exit code (0 when all were 0)."""
    exits: dict[str, int] = {s: 0 for s in systems}
    steps: list[dict[str, object]] = []
    for r, i, system, unit in interleaved_steps(units, systems, rounds):
        first = _row_count(rows_path)
        step: dict[str, object] = {
            "round": r,
            "unit": i,
            "system": system,
            "workloads": [w.key for w in unit],
            "start_utc": _utc(),
            "load_start": os.getloadavg()[0],
        }
        only = ",".join(w.key for w in unit)
        code = run_system(system, rows_path, [*flags_of[system], "--only", only], timeout)
        if rounds > 1:
            tag_rows(rows_path, first, r)
        step.update(end_utc=_utc(), load_end=os.getloadavg()[0], exit=code)
        steps.append(step)
        steps_path.write_text(json.dumps(steps, indent=2))
        if code != 0 and exits[system] == 0:
            exits[system] = code
    return exits


def _kafka_reference(rows: Iterable[Row]) -> dict[str, Row]:
    """Kafka's fastest row of each workload, whichever client (the ratio's denominator): its
    Java perf tool or librdkafka under Python, so no ratio flatters Headwater."""
    ref: dict[str, Row] = {}
    for r in rows:
        if r.system == "kafka" and r.mb_per_sec > getattr(ref.get(r.workload), "mb_per_sec", -1):
            ref[r.workload] = r
    return ref


def _lat(r: Row) -> str:
    lat = r.latency_ms or {}
    if "p50" not in lat:
        return "—"
    return " / ".join(f"{lat[q]:.1f}" if q in lat else "—" for q in ("p50", "p99", "p999"))


_MODE = {
    "many": "send_many",
    "send": "send()",
    "sync": "Producer.send()",
    "produce": "produce()",
    "records": "Consumer.poll() per record",
}


def _client(r: Row) -> str:
    """The client column: Headwater's bench rows name their API (bulk send_many or send())."""
    mode = r.extra.get("mode")
    return f"{r.client}, {_MODE.get(str(mode), mode)}" if mode else r.client


def _ordered(rows: list[Row]) -> list[Row]:
    """Rows grouped by workload (matrix order), then system (SYSTEMS order), stable within."""
    order = {w.key: i for i, w in enumerate(WORKLOADS)}
    return sorted(
        rows,
        key=lambda r: (
            order.get(r.workload, len(order)),
            SYSTEMS.index(r.system) if r.system in SYSTEMS else len(SYSTEMS),
        ),
    )


def _pct(x: float, ceiling: float | None) -> str:
    return f"{100 * x / ceiling:.0f}%" if ceiling else "—"


def _records_per_sec(r: Row) -> str:
    """records/s; a median row of several rounds adds the rounds' range."""
    seen = r.extra.get("rounds_records_per_sec")
    if isinstance(seen, list) and len(seen) > 1:
        return f"{r.records_per_sec:,.0f} ({min(seen):,.0f} to {max(seen):,.0f})"
    return f"{r.records_per_sec:,.0f}"


def throughput_table(rows: list[Row], ceil: dict[str, float]) -> list[str]:
    """One line per (workload, system, client) of produce-max and consume rows."""
    ref = _kafka_reference(rows)
    pc = ceil.get("page_cache_write_growing_mb_s")
    lines = [
        "| workload | system | client | records/s | MB/s | vs Kafka (best client) | "
        "% of page-cache write | % of gRPC ceiling | ack latency p50 / p99 / p99.9 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in _ordered(rows):
        if r.kind not in ("produce-max", "consume"):
            continue
        k = ref.get(r.workload)
        vs = f"{r.mb_per_sec / k.mb_per_sec:.2f}x" if k and k.mb_per_sec else "—"
        grpc = ceil.get(
            "grpc_unary_1mib_8_in_flight_mb_s"
            if r.kind == "produce-max"
            else "grpc_stream_1mib_mb_s"
        )
        hw = r.system == "headwater"
        lines.append(
            f"| {r.workload} | {r.system} | {_client(r)} | {_records_per_sec(r)} | "
            f"{r.mb_per_sec:,.1f} | {vs} | {_pct(r.mb_per_sec, pc) if hw else '—'} | "
            f"{_pct(r.mb_per_sec, grpc) if hw else '—'} | {_lat(r)} |"
        )
    return lines


def latency_table(rows: list[Row]) -> list[str]:
    """Fixed-rate rows: ack latency (produce-fixed) and end-to-end latency (e2e)."""
    lines = [
        "| workload | system | client | configuration | achieved MB/s | p50 / p99 / p99.9 ms "
        "| max ms |",
        "|---|---|---|---|---:|---|---:|",
    ]
    for r in _ordered(rows):
        if r.kind not in ("produce-fixed", "e2e"):
            continue
        mx = (r.latency_ms or {}).get("max")
        lines.append(
            f"| {r.workload} | {r.system} | {_client(r)} | {r.config} | {r.mb_per_sec:,.1f} | "
            f"{_lat(r)} | "
            f"{f'{mx:.1f}' if mx is not None else '—'} |"
        )
    return lines


def _best(rows: list[Row], system: str, workload: str, client: str | None = None) -> Row | None:
    cands = [
        r
        for r in rows
        if r.system == system and r.workload == workload and (client is None or r.client == client)
    ]
    return max(cands, key=lambda r: r.mb_per_sec, default=None)


def _versus(hw: Row, k: Row) -> str:
    return (
        f"{hw.mb_per_sec:,.0f} MB/s ({_client(hw)}) vs {k.mb_per_sec:,.0f} MB/s ({_client(k)}):"
        f" {hw.mb_per_sec / k.mb_per_sec:.2f}x"
    )


def _at_least(what: str, hw: Row | None, ck: Row | None) -> tuple[str, str, bool | None] | None:
    """(what, measured, Headwater's records/s >= confluent-kafka's?); "not measured" when one
    side is missing, None when both are."""
    if hw and ck:
        got = (
            f"{hw.records_per_sec:,.0f} vs {ck.records_per_sec:,.0f} rec/s: "
            f"{hw.records_per_sec / ck.records_per_sec:.2f}x"
        )
        return (what, got, hw.records_per_sec >= ck.records_per_sec)
    if hw or ck:
        return (what, "not measured", None)
    return None


def per_record_targets(rows: list[Row]) -> list[tuple[str, str, bool | None]]:
    """Issue 17: each per-record API (blocking ``Producer.send()``, asyncio ``produce()``)
    against confluent-kafka's ``produce()`` on the same workload, and the blocking
    ``Consumer``'s per-record iteration against confluent-kafka's consumer, in records/s."""
    out: list[tuple[str, str, bool | None] | None] = []
    for w in WORKLOADS:
        if w.kind != "produce-max" or w.rf != 1:
            continue
        ck = _best(rows, "kafka", w.key, "python confluent-kafka")
        for mode in ("sync", "produce"):
            hw = [
                r
                for r in rows
                if r.system == "headwater" and r.workload == w.key and r.extra.get("mode") == mode
            ]
            what = f"{w.key}: {_MODE[mode]} ≥ confluent-kafka produce() records/s"
            out.append(_at_least(what, hw[0] if hw else None, ck))
    for w in WORKLOADS:
        if w.kind != "consume" or w.rf != 1:
            continue
        ck = _best(rows, "kafka", w.key, "python confluent-kafka")
        hw = [
            r
            for r in rows
            if r.system == "headwater" and r.workload == w.key and r.extra.get("mode") == "records"
        ]
        what = f"{w.key}: blocking Consumer per record ≥ confluent-kafka consumer records/s"
        out.append(_at_least(what, hw[0] if hw else None, ck))
    return [o for o in out if o is not None]


def targets(rows: list[Row]) -> list[tuple[str, str, bool | None]]:
    """The issue's targets: (what, measured, met?) — None when a side is missing."""
    out: list[tuple[str, str, bool | None]] = []
    for size, share, label in ((1024, 1.0, "1 KiB"), (100, 0.5, "100 B")):
        w = f"produce-max p=1 {size}B acks=1 rf=1"
        hw, k = _best(rows, "headwater", w), _best(rows, "kafka", w)
        want = "≥" if share == 1 else f"≥ {share:.0%} of"
        what = f"produce {label}, acks=1, one producer: Headwater {want} Kafka MB/s"
        if hw and k:
            got = _versus(hw, k)
            out.append((what, got, hw.mb_per_sec >= share * k.mb_per_sec))
        else:
            out.append((what, "not measured", None))
    for size, label in ((1024, "1 KiB"), (100, "100 B")):
        w = f"consume p=1 {size}B acks=1 rf=1"
        hw, k = _best(rows, "headwater", w), _best(rows, "kafka", w)
        what = f"consumer {label}: Headwater ≥ Kafka MB/s"
        if hw and k:
            got = _versus(hw, k)
            out.append((what, got, hw.mb_per_sec >= k.mb_per_sec))
        else:
            out.append((what, "not measured", None))
    out += per_record_targets(rows)
    e2e = [
        r
        for r in rows
        if r.system == "headwater" and r.kind == "e2e" and r.rf == 1 and r.latency_ms
    ]
    what = "p99 end-to-end latency ≤ 10 ms at 10 MB/s (1 KiB)"
    if e2e:
        best = min(e2e, key=lambda r: (r.latency_ms or {})["p99"])
        p99 = (best.latency_ms or {})["p99"]
        others = ", ".join(
            f"{(r.latency_ms or {})['p99']:.1f} ms ({r.config})" for r in e2e if r is not best
        )
        got = f"p99 {p99:.1f} ms ({best.config})" + (f"; other configs: {others}" if others else "")
        out.append((what, got, p99 <= 10.0))
    else:
        out.append((what, "not measured", None))
    return out


def report(rows: list[Row], ceil: dict[str, float], mach: str) -> str:
    """The Markdown report; rows of a ``--rounds`` run are reduced to their medians first
    (:func:`median_rows`)."""
    rounds = {r.extra["round"] for r in rows if "round" in r.extra}
    rows = median_rows(rows)
    lines = [f"Machine: {mach}", ""]
    if rounds:
        lines += [
            f"Medians of {len(rounds)} rounds: each figure is the median row of its "
            "measurement by records/s (every round's figure in the row's "
            '``extra["rounds_records_per_sec"]``).',
            "",
        ]
    if ceil:
        lines += [
            "Ceilings in the same run: page-cache write into a growing file "
            f"{ceil.get('page_cache_write_growing_mb_s', 0):,.0f} MB/s (rewriting freed pages "
            f"{ceil.get('page_cache_rewrite_mb_s', 0):,.0f} MB/s; sustained, the last GiB of "
            f"a longer pass, {ceil.get('page_cache_write_sustained_mb_s', 0):,.0f} MB/s); "
            "Python gRPC loopback unary "
            f"1 MiB x8 in flight {ceil.get('grpc_unary_1mib_8_in_flight_mb_s', 0):,.0f} MB/s; "
            f"server stream 1 MiB {ceil.get('grpc_stream_1mib_mb_s', 0):,.0f} MB/s.",
            "",
        ]
    lines += ["### Throughput", "", *throughput_table(rows, ceil), ""]
    lines += ["### Latency at a fixed rate", "", *latency_table(rows), ""]
    lines += [
        "### Against the issue's targets",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
    ]
    for what, got, met in targets(rows):
        verdict = "not measured" if met is None else ("met" if met else "short")
        lines.append(f"| {what} | {got} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-rf3", action="store_true")
    p.add_argument("--max-seconds", type=float, default=30)
    p.add_argument("--out-dir", type=Path)
    p.add_argument(
        "--kafka-python-only",
        action="store_true",
        help="Kafka's rows from confluent-kafka only, without the Java perf tools (the "
        "per-record comparison of issue 17 needs only those)",
    )
    p.add_argument(
        "--only",
        default="",
        help="run only workloads whose key contains this, or any part of a comma-separated "
        "list (every system)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="alternate the systems unit by unit (one topic shape or fixed-rate row at a "
        "time, order reversed each unit) instead of running each system's whole matrix",
    )
    p.add_argument(
        "--warm-mib",
        type=int,
        default=DEFAULT_WARM_MIB,
        help="MiB every peer writes and deletes before each produce-max row, so no row's rate "
        "depends on what its system's earlier rows wrote (0: none; bench/peers/common.py "
        "warm_page_cache)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --interleave: run the interleaved sequence this many times and report "
        "each measurement's median (odd counts recommended)",
    )
    p.add_argument("--system-timeout", type=float, default=1800)
    p.add_argument("--report", nargs=2, type=Path, metavar=("ROWS", "CEILINGS"))
    args = p.parse_args()
    if args.rounds < 1 or (args.rounds > 1 and not args.interleave):
        p.error("--rounds takes a count >= 1, and more than 1 only with --interleave")
    if args.report:
        rows = read_rows(args.report[0])
        ceil = json.loads(args.report[1].read_text())
        print(report(rows, ceil, ceil.get("machine", machine())))
        return
    os.environ[WARM_MIB_ENV] = str(args.warm_mib)  # the peers are its children
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="hw-side-by-side-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / "rows.jsonl"
    ceil: dict[str, float | str] = {"machine": machine()}
    ceil.update(measure_ceilings(growing_mib=256 if args.quick else 2048))
    (out_dir / "ceilings.json").write_text(json.dumps(ceil, indent=2))
    flags = ["--max-seconds", str(args.max_seconds)]
    flags += ["--quick"] if args.quick else []
    flags += ["--no-rf3"] if args.no_rf3 else []
    kafka_flags = ["--no-java"] if args.kafka_python_only else []
    systems = args.systems.split(",")
    flags_of = {s: flags + (kafka_flags if s == "kafka" else []) for s in systems}
    if args.interleave:
        selected_ws = [w for w in workloads(not args.no_rf3) if selected(args.only, w.key)]
        exits = run_interleaved(
            interleave_units(selected_ws),
            systems,
            rows_path,
            flags_of,
            args.system_timeout,
            out_dir / "steps.json",
            args.rounds,
        )
    else:
        only = ["--only", args.only] if args.only else []
        exits = {
            s: run_system(s, rows_path, flags_of[s] + only, args.system_timeout) for s in systems
        }
    rows = read_rows(rows_path) if rows_path.exists() else []
    text = report(rows, {k: v for k, v in ceil.items() if isinstance(v, float)}, machine())
    text += "\nExit codes: " + ", ".join(f"{s} {c}" for s, c in exits.items()) + "\n"
    (out_dir / "table.md").write_text(text)
    print(text)
    print(f"rows: {rows_path}; table: {out_dir / 'table.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
