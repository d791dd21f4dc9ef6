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

Reported: produced rows/s (both producers, measured), processed rows/s over the producing
window and over the whole run, the lag samples (max, final, and max in the last third of the
producing window next to the first third: bounded lag does not grow), the drain time, and the
check that the query processed exactly the produced records.

    python bench/spark_streaming_scale.py [--rate 4000] [--seconds 300] [--partitions 16]
        [--size 100] [--trigger "5 seconds"] [--sample 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
    up after a late tick), acks=all; puts (records sent, seconds) on ``out``."""
    from headwater.client import AsyncProducer

    async def go() -> tuple[int, float]:
        value = b"x" * size
        sent = 0
        async with AsyncProducer(bootstrap, acks="all", linger_ms=5) as p:
            t0 = time.monotonic()
            while (now := time.monotonic() - t0) < seconds:
                due = int(rate * now) - sent
                for _ in range(due):
                    await p.send(topic, value, partition=sent % partitions)
                    sent += 1
                await asyncio.sleep(0.1)
            await p.flush()
            return sent, time.monotonic() - t0

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


# ---------------------------------------------------------------- the run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=4000, help="records/s, both producers")
    ap.add_argument("--seconds", type=float, default=300, help="how long the producers run")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--trigger", default="5 seconds", help="processing-time trigger")
    ap.add_argument("--sample", type=float, default=5, help="seconds between lag samples")
    ap.add_argument("--group", default="spark-scale")
    ap.add_argument("--drain-timeout", type=float, default=600)
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
        t0 = time.monotonic()
        for p in producers:
            p.start()
        samples: list[dict[str, Any]] = []
        while any(p.is_alive() for p in producers):
            lag = describe_lag(bootstrap, args.group)
            with lock:
                done = processed[0]
            samples.append({"t": round(time.monotonic() - t0, 1), "lag": lag, "processed": done})
            log(json.dumps(samples[-1]))
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
            time.sleep(args.sample)
        sent = [results.get(timeout=60) for _ in producers]
        for p in producers:
            p.join(60)
        produce_secs = max(s for _, s in sent)
        produced = sum(n for n, _ in sent)
        with lock:
            processed_in_window = processed[0]
        # drain: every produced record processed and the group's lag back to 0
        drain_deadline = time.monotonic() + args.drain_timeout
        final_lag = describe_lag(bootstrap, args.group)
        while time.monotonic() < drain_deadline:
            with lock:
                done = processed[0]
            final_lag = describe_lag(bootstrap, args.group)
            t = round(time.monotonic() - t0, 1)
            log(json.dumps({"t": t, "draining": True, "lag": final_lag, "processed": done}))
            if done >= produced and final_lag == 0:
                break
            time.sleep(args.sample)
        total_secs = time.monotonic() - t0
        drain_secs = total_secs - produce_secs
        query.stop()
        with lock:
            rows, nbytes = processed
        spark.stop()
    load1 = os.getloadavg()

    lags = [s["lag"] for s in samples if s["lag"] is not None]
    third = max(1, len(lags) // 3)
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
        "produce_seconds": round(produce_secs, 1),
        "produced_rows_per_s": round(produced / produce_secs),
        "processed": rows,
        "processed_bytes": nbytes,
        "exact": rows == produced and nbytes == produced * args.size,
        "processed_rows_per_s_while_producing": round(processed_in_window / produce_secs),
        "processed_rows_per_s_overall": round(rows / total_secs),
        "lag_samples": len(lags),
        "max_lag": max(lags) if lags else None,
        "max_lag_first_third": max(lags[:third]) if lags else None,
        "max_lag_last_third": max(lags[-third:]) if lags else None,
        "final_lag": final_lag,
        "drain_seconds": round(drain_secs, 1),
        "samples": samples,
    }
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not result["exact"]:
        raise SystemExit(f"processed {rows} records / {nbytes} B, produced {produced}")


if __name__ == "__main__":
    main()
