"""Streaming at scale: a ``format("headwater")`` streaming query keeps up with two concurrent
producers, its processed offsets committed to its group, lag sampled with the CLI.

A local cluster (etcd, one controller, one broker, one coordinator) in a temporary folder; a
topic of ``--partitions`` (16) partitions; two producer processes, each sending ``--rate / 2``
records/s of ``--size`` bytes spread evenly over the partitions for ``--seconds``; one
``local[2]`` SparkSession running ``readStream.format("headwater")`` (startingOffsets=earliest,
``kafka.group.id`` = ``--group``, so every finished micro-batch's end offsets are committed to
that group) into a ``foreachBatch`` that counts rows and value bytes, with a processing-time
trigger of ``--trigger``. While the producers run, every ``--sample`` seconds the benchmark runs
``headwater --output json groups describe <group>`` (the CLI, a subprocess) and records the
group's total lag. When the producers stop it waits (bounded) until the query has processed
every produced record and the group's lag is 0.

Reported (printed, and with ``--json`` written with every sample and micro-batch): produced
rows/s (both producers, measured; the producing window is the first producer's start to the
last one's last acknowledgement), processed rows/s, the lag samples, the micro-batches of the
steady part (after ``--warmup`` s: rows, trigger duration median / p90 / max) and a verdict:
the steady part's max and mean lag, the least-squares slope of the lag over the second half of
the producing window (records/s), the drain time (end of producing until the query has
processed every produced record; then the group's lag is confirmed 0 with the CLI), and
"kept up" = processed == produced exactly, |slope| <= ``--max-slope`` x the rate and drain <=
``--max-drain`` s.

    python bench/spark_streaming_scale.py [--rate 4000] [--seconds 300] [--partitions 16]
        [--size 100] [--trigger "5 seconds"] [--sample 7] [--warmup 60] [--max-slope 0.01]
        [--max-drain 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import machine
from headwater.dev.cluster import LocalCluster
from tests.helpers.spark import make_topic

HEADWATER_CLI = [str(Path(sys.executable).parent / "headwater")]  # the installed CLI


def log(msg: str) -> None:
    print(f"[spark-scale] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- producers


def _produce(
    bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, size: int, out: Any
) -> None:
    """One producer process: ``rate`` records/s for ``seconds`` (10 ticks a second, catching
    up after a late tick), acks=all; puts (records sent, wall-clock start, wall-clock end:
    the last record acknowledged) on ``out``."""
    from headwater.client import AsyncProducer

    async def go() -> tuple[int, float, float]:
        value = b"x" * size
        sent = 0
        async with AsyncProducer(bootstrap, acks="all", linger_ms=5) as p:
            t0, wall0 = time.monotonic(), time.time()
            while (now := time.monotonic() - t0) < seconds:
                due = int(rate * now) - sent
                for _ in range(due):
                    await p.send(topic, value, partition=sent % partitions)
                    sent += 1
                await asyncio.sleep(0.1)
            await p.flush()
            return sent, wall0, time.time()

    out.put(asyncio.run(go()))


# ---------------------------------------------------------------- lag through the CLI


def describe_lag(bootstrap: str, group: str) -> int | None:
    """The group's total lag as ``headwater groups describe`` prints it (None: no group yet)."""
    r = subprocess.run(
        [*HEADWATER_CLI, "--bootstrap", bootstrap, "--output", "json", "groups", "describe", group],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        return None
    desc = json.loads(r.stdout)
    if not desc.get("partitions"):
        return None
    return int(desc["total_lag"])


# ---------------------------------------------------------------- micro-batches


def collect_progress(query: Any, into: dict[int, dict[str, Any]], wall0: float) -> None:
    """Add the query's recent progress reports (one per micro-batch) to ``into`` by batch id:
    when the trigger started (s after ``wall0``, a ``time.time()``), rows, the trigger's
    duration and its parts (Spark's ``durationMs``)."""
    for p in query.recentProgress:
        bid = int(p["batchId"])
        if bid in into:
            continue
        started = dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        into[bid] = {
            "batch": bid,
            "t": round(started.timestamp() - wall0, 1),
            "rows": int(p["numInputRows"]),
            "ms": {k: int(v) for k, v in p["durationMs"].items()},
        }


def batch_summary(batches: list[dict[str, Any]], after: float) -> dict[str, Any]:
    """Micro-batches reported at or after ``after`` s: how many, rows each, and the trigger's
    duration (``triggerExecution``) and its ``addBatch`` part (reading + the foreachBatch)."""
    steady = [b for b in batches if b["t"] >= after and b["rows"] > 0]
    if not steady:
        return {"micro_batches": 0}

    def pct(xs: list[int], q: float) -> int:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    trig = [b["ms"].get("triggerExecution", 0) for b in steady]
    add = [b["ms"].get("addBatch", 0) for b in steady]
    rows = [b["rows"] for b in steady]
    return {
        "micro_batches": len(steady),
        "rows_per_batch_median": pct(rows, 0.5),
        "trigger_ms_median": pct(trig, 0.5),
        "trigger_ms_p90": pct(trig, 0.9),
        "trigger_ms_max": max(trig),
        "add_batch_ms_median": pct(add, 0.5),
    }


def slope(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope of y over x and its standard error (None with fewer than 3
    points)."""
    n = len(points)
    if n < 3:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if not sxx:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    return b, math.sqrt(resid / (n - 2) / sxx)


def verdict(
    samples: list[dict[str, Any]],
    *,
    window: tuple[float, float],
    rate: float,
    warmup: float,
    max_slope: float,
    drain_secs: float,
    max_drain: float,
    exact: bool,
) -> dict[str, Any]:
    """Did the query keep up? The steady part is the producing window after ``warmup`` s (the
    query's first micro-batches start its Python workers). Kept up = every produced record
    processed exactly once, the lag's least-squares slope over the second half of the
    producing window within ``max_slope`` x the rate (records/s; a query that falls behind
    by a fraction f of the rate has a slope of f x rate), and the drain after the
    producers stop (until the query has processed every record) within ``max_drain`` s."""
    points = [(s["t"], float(s["lag"])) for s in samples if s["lag"] is not None]
    start, end = window
    steady = [(t, lag) for t, lag in points if start + warmup <= t <= end]
    second_half = [(t, lag) for t, lag in points if (start + end) / 2 <= t <= end]
    fit = slope(second_half)
    bound = max_slope * rate
    slope_ok = fit is not None and abs(fit[0]) <= bound
    drain_ok = drain_secs <= max_drain
    return {
        "steady_s": [round(start + warmup, 1), round(end, 1)],
        "steady_samples": len(steady),
        "steady_max_lag": max((lag for _, lag in steady), default=None),
        "steady_mean_lag": round(sum(lag for _, lag in steady) / len(steady)) if steady else None,
        "steady_max_lag_seconds_of_production": (
            round(max(lag for _, lag in steady) / rate, 1) if steady and rate else None
        ),
        "second_half_samples": len(second_half),
        "second_half_slope_records_per_s": None if fit is None else round(fit[0], 2),
        "second_half_slope_stderr": None if fit is None else round(fit[1], 2),
        "slope_bound_records_per_s": round(bound, 2),
        "drain_seconds": round(drain_secs, 1),
        "drain_bound_seconds": max_drain,
        "kept_up": bool(exact and slope_ok and drain_ok),
        "why_not": [
            w
            for w, bad in (
                ("processed != produced", not exact),
                (f"|slope| > {bound:g} records/s (or too few samples)", not slope_ok),
                (f"drain > {max_drain:g} s", not drain_ok),
            )
            if bad
        ],
    }


# ---------------------------------------------------------------- the run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=4000, help="records/s, both producers")
    ap.add_argument("--seconds", type=float, default=300, help="how long the producers run")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--trigger", default="5 seconds", help="processing-time trigger")
    ap.add_argument(
        "--sample",
        type=float,
        default=7,
        help="seconds between lag samples (not a multiple of the trigger: the lag is a "
        "sawtooth of the trigger's period, and samples at a fixed phase would alias it)",
    )
    ap.add_argument("--group", default="spark-scale")
    ap.add_argument("--drain-timeout", type=float, default=600)
    ap.add_argument(
        "--warmup", type=float, default=60, help="seconds of producing left out of the steady part"
    )
    ap.add_argument(
        "--max-slope",
        type=float,
        default=0.01,
        help="kept up: |lag slope| over the second half <= this x the rate (records/s)",
    )
    ap.add_argument(
        "--max-drain", type=float, default=60, help="kept up: lag back to 0 within this (s)"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the cluster and Spark are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import headwater_spark
    from pyspark.sql import SparkSession

    load0 = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="hw-spark-scale-") as tmp_s,
        LocalCluster(Path(tmp_s) / "hw", brokers=1, controllers=1, coordinators=1) as cluster,
    ):
        tmp = Path(tmp_s)
        bootstrap = cluster.bootstrap
        topic = "scale"
        make_topic(bootstrap, topic, args.partitions)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("spark-streaming-scale")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")  # loopback only
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        headwater_spark.register(spark)
        processed = [0, 0]  # rows, value bytes
        lock = threading.Lock()

        def each(df: Any, _batch_id: int) -> None:
            [r] = df.selectExpr("count(*) AS n", "coalesce(sum(length(value)), 0) AS b").collect()
            with lock:
                processed[0] += int(r.n)
                processed[1] += int(r.b)

        query = (
            spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.group.id", args.group)
            .load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(tmp / "ckpt"))
            .trigger(processingTime=args.trigger)
            .start()
        )
        # the query is running (its runner started, first offsets planned) before producing
        deadline = time.monotonic() + 300
        while not query.recentProgress and time.monotonic() < deadline:
            query.awaitTermination(1)
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        log(f"query running; producing {args.rate:g} records/s for {args.seconds:g} s")

        ctx = mp.get_context("spawn")
        results: Any = ctx.Queue()
        producers = [
            ctx.Process(
                target=_produce,
                args=(
                    *(bootstrap, topic, args.partitions, args.rate / 2, args.seconds),
                    *(args.size, results),
                ),
            )
            for _ in range(2)
        ]
        wall0 = time.time()  # every t below is seconds after this
        for p in producers:
            p.start()
        samples: list[dict[str, Any]] = []
        progress: dict[int, dict[str, Any]] = {}  # batchId -> the query's progress report
        while any(p.is_alive() for p in producers):
            collect_progress(query, progress, wall0)
            asked = time.time()
            lag = describe_lag(bootstrap, args.group)
            with lock:
                done = processed[0]
            # the lag is read somewhere inside the CLI's run (its start-up is most of it)
            t = (asked + time.time()) / 2 - wall0
            samples.append({"t": round(t, 1), "lag": lag, "processed": done})
            log(json.dumps(samples[-1]))
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
            time.sleep(max(0.0, asked + args.sample - time.time()))
        sent = [results.get(timeout=60) for _ in producers]
        for p in producers:
            p.join(60)
        # the producing window: first producer's start to the last one's last ack
        window = (min(a for _, a, _ in sent) - wall0, max(b for _, _, b in sent) - wall0)
        produce_secs = window[1] - window[0]
        produced = sum(n for n, _, _ in sent)
        with lock:
            processed_in_window = processed[0]
        # drain: the query has processed every produced record (watched each 0.5 s), then the
        # group's lag (CLI) is back to 0
        drain_deadline = time.time() + args.drain_timeout
        caught_up: float | None = None
        final_lag = None
        while time.time() < drain_deadline:
            with lock:
                done = processed[0]
            if caught_up is None and done >= produced:
                caught_up = time.time() - wall0
            if caught_up is not None:
                final_lag = describe_lag(bootstrap, args.group)
                t = round(time.time() - wall0, 1)
                log(json.dumps({"t": t, "draining": True, "lag": final_lag, "processed": done}))
                if final_lag == 0:
                    break
            collect_progress(query, progress, wall0)
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
            time.sleep(0.5 if caught_up is None else args.sample)
        lag_zero_at = time.time() - wall0
        collect_progress(query, progress, wall0)
        total_secs = lag_zero_at - window[0]
        drain_secs = (lag_zero_at if caught_up is None else caught_up) - window[1]
        query.stop()
        with lock:
            rows, nbytes = processed
        spark.stop()
    load1 = os.getloadavg()

    lags = [s["lag"] for s in samples if s["lag"] is not None]
    result = {
        "machine": machine(),
        "argv": sys.argv[1:],
        "load_avg_start": [round(x, 1) for x in load0],
        "load_avg_end": [round(x, 1) for x in load1],
        "partitions": args.partitions,
        "record_size": args.size,
        "trigger": args.trigger,
        "target_rate": args.rate,
        "produced": produced,
        "produce_window_s": [round(window[0], 1), round(window[1], 1)],
        "produce_seconds": round(produce_secs, 1),
        "produced_rows_per_s": round(produced / produce_secs),
        "processed": rows,
        "processed_bytes": nbytes,
        "exact": rows == produced and nbytes == produced * args.size,
        "processed_rows_per_s_while_producing": round(processed_in_window / produce_secs),
        "processed_rows_per_s_overall": round(rows / total_secs),
        "lag_samples": len(lags),
        "max_lag": max(lags) if lags else None,
        "final_lag": final_lag,
        "lag_zero_confirmed_s_after_window": round(lag_zero_at - window[1], 1),
        "batches": batch_summary([progress[b] for b in sorted(progress)], window[0] + args.warmup),
        "samples": samples,
        "micro_batches": [progress[b] for b in sorted(progress)],
    }
    result["verdict"] = verdict(
        samples,
        window=window,
        rate=produced / produce_secs,
        warmup=args.warmup,
        max_slope=args.max_slope,
        drain_secs=drain_secs,
        max_drain=args.max_drain,
        exact=bool(result["exact"]),
    )
    summary = {k: v for k, v in result.items() if k not in ("samples", "micro_batches")}
    print(json.dumps(summary, indent=2))
    print("lag samples (t s: lag):", ", ".join(f"{s['t']:g}: {s['lag']}" for s in samples))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not result["exact"]:
        raise SystemExit(f"processed {rows} records / {nbytes} B, produced {produced}")


if __name__ == "__main__":
    main()
