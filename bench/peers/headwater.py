"""Headwater's side of the side-by-side benchmark (issue 10).

    .venv/bin/python bench/peers/headwater.py --out rows.jsonl [--quick] [--no-rf3]
        [--max-seconds 30] [--only "e2e"] [--lingers 0,2,5]

Starts a :class:`~headwater.dev.cluster.LocalCluster` in a temporary folder (etcd, one
controller, one broker for the RF=1 rows; three brokers for the RF=3 rows, whose topics are
created with replication factor 3, so acks=all waits for every in-sync replica), runs
:data:`common.WORKLOADS` and stops every process by PID (the cluster's ``stop``; the e2e
children by their ``Popen``) even on error.

Clients:

* ``client="headwater bench"``: the ``headwater bench`` command (headwater/cli/bench.py) in its own
  process. ``produce-max`` with ``--mode many`` (the bulk API, ``send_many`` of 10,000 records);
  for 1 partition and acks=1 also a row with ``--mode send`` (one awaited ``send()`` per
  record, as Kafka's ProducerPerformance does; ``note`` says which); for every RF=1 row also
  ``--mode sync`` (the blocking ``Producer.send()`` per record, the README's API) and
  ``--mode produce`` (the asyncio producer's non-awaiting ``produce()`` per record): the
  per-record rows compared with confluent-kafka's ``produce()`` (issue 17). ``consume``
  reads the topic of the matching acks=1 ``produce-max`` row from the start, ``--decode
  values`` (every record's value as a Python ``bytes``). ``produce-fixed``: ``--mode send
  --throughput`` (records/s for 10 MB/s), every ack's latency sampled.
* ``client="python headwater"``: ``e2e`` with the client library directly: a producer process
  (``AsyncProducer.send`` per record, paced by :class:`common.Pacer`, each value
  :func:`common.stamp`-ed) and a consumer process (``AsyncConsumer.poll_batches``, one
  :func:`common.age_ns` per record against one clock read per poll) — ``--role`` below.

Partitions map to Headwater partitions one to one; acks "1" = ``acks=1`` (the leader appended
it), "all" = ``acks=all`` (every ISR member has it).

Configuration (``Row.config``):

* ``defaults`` — the broker as ``LocalCluster`` starts it, i.e. every broker default of
  docs/configuration.md: no fsync per append (``flush.messages``/``flush.ms`` = -1, durability
  comes from replication, like Kafka's default ``log.flush.interval.messages``), the malloc
  tunables of docs/benchmarks.md set by the launcher. Producer as the bench command sets it:
  ``batch_size`` 4 MiB, ``linger_ms`` 5, ``max_in_flight`` 5, no compression (docs/benchmarks.md
  "throughput"); consumer ``max_partition_fetch_bytes`` 4 MiB. For durability the documented
  setting is RF=3 with acks=all (docs/replication.md): the RF=3 rows.
* ``latency (linger_ms 0)`` / ``linger_ms 2`` / ``defaults (linger_ms 5)`` — produce-fixed and
  e2e run three times: with the producer's ``linger_ms`` 0 (Confluent "Optimize for latency",
  Kafka's default before 4.0), 2, and the client's default 5 ms (Kafka's default since
  KIP-1030, which bench/peers/kafka.py uses for its fixed-rate rows: compare those with the
  ``defaults`` rows). In Python a Produce request costs the broker ~0.3-0.5 ms of CPU, so
  linger 0 (a request per ~7 records at 10 MB/s of 1 KiB) keeps ~1.5 cores busy across
  producer, broker and consumer, against ~0.45 with linger 5.
  e2e consumer: ``fetch_max_wait_ms`` 500, ``fetch_min_bytes`` 1 (a Fetch is a stream the
  broker answers as soon as data is appended; the wait only bounds an empty answer).

Warmup: the first 10% of each run's records are sent but left out of the figures (as
bench/peers/kafka.py does with ProducerPerformance ``--warmup-records``); e2e rows keep the
whole run's percentiles in ``extra["latency_ms_with_warmup"]``. The e2e producer and consumer
processes (and ``headwater bench``) call ``gc.freeze()`` after their set-up, as the broker does
once serving: full GC collections otherwise walk every start-up object (15-90 ms pauses
measured on the shared 2-vCPU VM). e2e rows also carry the producer's ack latency and the
CPU seconds of the producer and consumer processes in ``extra``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

_HERE = Path(__file__).resolve().parent
# this file is named like the ``headwater`` package: its folder must not shadow it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent.parent))

from bench.peers import common  # noqa: E402
from bench.peers.common import MB, Row, Workload  # noqa: E402

SYSTEM = "headwater"
CONFIG = "defaults"
E2E_LINGER_MS = 0.0
#: produce-fixed and e2e run once per producer linger: 0 (the latency setting), 2 (between:
#: linger 0 costs a Produce request per ~7 records at 10 MB/s, ~1.5 CPU cores in all) and 5
#: (the client's default, as Kafka's since KIP-1030: the one to compare with bench/peers/kafka.py)
LATENCY_LINGERS_MS = (0.0, 2.0, 5.0)


#: the per-record APIs measured on every RF=1 produce-max workload (issue 17)
PER_RECORD_MODES = ("sync", "produce")


def _topic(w: Workload, suffix: str = "") -> str:
    return f"{w.kind}-p{w.partitions}-{w.record_size}-acks{w.acks}-rf{w.rf}{suffix}"


def _bench(bootstrap: str, timeout: float, *args: str) -> dict[str, float]:
    env = {**os.environ, "HEADWATER_BOOTSTRAP": bootstrap}
    cmd = [sys.executable, "-m", "headwater.cli.main", "--output", "json", "bench", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout[proc.stdout.index("{") :])  # type: ignore[no-any-return]


def _latency(res: dict[str, float]) -> dict[str, float] | None:
    if "latency_p50_ms" not in res:
        return None
    return {
        "p50": res["latency_p50_ms"],
        "p99": res["latency_p99_ms"],
        "p999": res["latency_p999_ms"],
        "max": res["latency_max_ms"],
    }


def _acks(w: Workload) -> str:
    return "all" if w.acks == "all" else "1"


def produce_max(
    bootstrap: str,
    w: Workload,
    n: int,
    max_s: float,
    mode: str = "many",
    topic: str | None = None,
) -> tuple[Row, str]:
    """``headwater bench produce`` in its own process; ``topic`` defaults to one named after
    the workload and mode (created by the command when missing)."""
    topic = topic or _topic(w, "" if mode == "many" else f"-{mode}")
    common.warm_page_cache()
    res = _bench(
        bootstrap,
        max_s + 300,
        "produce",
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        str(w.record_size),
        "--acks",
        _acks(w),
        "--partitions",
        str(w.partitions),
        "--replication-factor",
        str(w.rf),
        "--mode",
        mode,
        "--max-seconds",
        str(max_s),
        "--warmup-records",
        str(n // 10),
    )
    note = {
        "many": "send_many() of 10,000 records per call (bulk API); ack latency per call",
        "send": "one awaited AsyncProducer.send() per record; ack latency of every 64th record",
        "sync": "one blocking Producer.send() per record (lazy future each); ack latency of "
        "every 64th record",
        "produce": "one AsyncProducer.produce() per record, no await (lazy future each; the "
        "loop yields every 1,024); ack latency of every 64th record",
    }[mode] + "; first 10% of records = warmup, left out"
    row = Row.of(
        SYSTEM,
        "headwater bench",
        w,
        int(res["records"]),
        float(res["seconds"]),
        latency_ms=_latency(res),
        config=CONFIG,
        note=note,
        extra={"mode": mode},
    )
    return row, topic


def consume(
    bootstrap: str, w: Workload, topic: str, n: int, max_s: float, decode: str = "values"
) -> Row:
    """``decode`` "values": the asyncio consumer's batches; "records": the blocking
    ``Consumer.poll()`` iterated per record (issue 17's per-record consumer row)."""
    res = _bench(
        bootstrap,
        max_s + 300,
        "consume",
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--decode",
        decode,
        "--max-seconds",
        str(max_s),
    )
    records = int(res["records"])
    return Row.of(
        SYSTEM,
        "headwater bench",
        w,
        records,
        float(res["seconds"]),
        config=CONFIG,
        note=f"reads {topic} from the start, "
        + (
            "blocking Consumer.poll() (500 records a call), iterated per record"
            if decode == "records"
            else "--decode values (bytes per record)"
        ),
        extra={"wire_mb_per_sec": res["mb_per_sec"]}
        | ({"mode": "records"} if decode == "records" else {}),
    )


def produce_fixed(bootstrap: str, w: Workload, seconds: float, linger_ms: float) -> Row:
    assert w.rate_mb_s
    rate = w.rate_mb_s * MB / w.record_size
    n = int(rate * seconds)
    res = _bench(
        bootstrap,
        seconds + 300,
        "produce",
        "--topic",
        _topic(w, f"-linger{linger_ms:g}"),
        "--num-records",
        str(n),
        "--warmup-records",
        str(n // 10),
        "--linger-ms",
        str(linger_ms),
        "--record-size",
        str(w.record_size),
        "--acks",
        _acks(w),
        "--partitions",
        str(w.partitions),
        "--replication-factor",
        str(w.rf),
        "--mode",
        "send",
        "--throughput",
        f"{rate:.1f}",
    )
    return Row.of(
        SYSTEM,
        "headwater bench",
        w,
        int(res["records"]),
        float(res["seconds"]),
        latency_ms=_latency(res),
        config=_latency_config(linger_ms),
        note=(
            f"send() per record paced to {rate:,.0f} records/s, linger_ms {linger_ms:g}; every "
            "ack's latency; first 10% of records = warmup, left out"
        ),
        extra={"mode": "send", "linger_ms": linger_ms},
    )


def _latency_config(linger_ms: float) -> str:
    if linger_ms == 0:
        return "latency (linger_ms 0)"
    return "defaults (linger_ms 5)" if linger_ms == 5 else f"linger_ms {linger_ms:g}"


# --- e2e: two processes of this module -------------------------------------------------------


async def _e2e_producer(args: argparse.Namespace) -> None:
    from headwater.client.producer import AsyncProducer

    pool = common.payload_pool(args.record_size)
    rate = args.rate_mb_s * MB / args.record_size
    n = int(rate * args.seconds)
    async with AsyncProducer(
        args.bootstrap,
        acks=args.acks,
        linger_ms=args.linger_ms,
        client_id="headwater-e2e-producer",
    ) as p:
        await p.send_and_wait(args.topic, common.stamp(pool[0]))  # metadata + connection
        gc.freeze()  # no full-collection pauses over what exists now (docstring)
        pacer = common.Pacer(rate)
        step = max(1, int(rate / 2000))  # check the schedule every ~0.5 ms worth of records
        sent = 0
        npool = len(pool)
        send, stamp, topic = p.send, common.stamp, args.topic
        acked: list[int] = []  # stamp-to-ack latency of every 16th record (ns)

        def on_ack(t0: int) -> Callable[[object], None]:
            return lambda _f: acked.append(time.monotonic_ns() - t0)

        while sent < n:
            d = pacer.delay(step)
            if d > 0:
                await asyncio.sleep(d)
            for _ in range(step):
                value = stamp(pool[sent % npool])
                fut = await send(topic, value)
                if sent % 16 == 0:
                    fut.add_done_callback(on_ack(common.STAMP.unpack_from(value)[0]))
                sent += 1
        await p.flush()
    ack = common.percentiles_ms(acked)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    report = {"sent": sent + 1, "ack_latency_ms": ack, "cpu_s": ru.ru_utime + ru.ru_stime}
    print(json.dumps(report), flush=True)


async def _e2e_consumer(args: argparse.Namespace) -> None:
    from headwater.client.consumer import AsyncConsumer
    from headwater.client.types import TopicPartition

    ages: list[int] = []
    c = AsyncConsumer(
        args.bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=args.fetch_max_wait_ms,
        client_id="headwater-e2e-consumer",
    )
    try:
        c.assign([TopicPartition(args.topic, 0)])
        await c.poll_batches(timeout_ms=200)
        gc.freeze()
        Path(args.ready_file).write_text("ready")
        deadline = time.monotonic() + args.seconds + 60
        idle_since: float | None = None
        age_ns = common.age_ns
        while time.monotonic() < deadline:
            batches = await c.poll_batches(timeout_ms=500)
            now = time.monotonic_ns()
            if not batches:
                if ages and Path(args.done_file).exists():
                    if idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > 1.0:
                        break
                continue
            idle_since = None
            for fb in batches:
                ages.extend(age_ns(v, now) for v in fb.values())
    finally:
        await c.close()
    np.save(args.samples, np.asarray(ages, dtype=np.int64))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    Path(args.samples + ".cpu").write_text(str(ru.ru_utime + ru.ru_stime))


def e2e(
    bootstrap: str, w: Workload, seconds: float, tmp: Path, linger_ms: float = E2E_LINGER_MS
) -> Row:
    assert w.rate_mb_s
    topic = _topic(w, f"-linger{linger_ms:g}")

    async def create() -> None:
        from headwater.client.admin import AsyncAdminClient

        async with AsyncAdminClient(bootstrap) as a:
            await a.create_topic(topic, w.partitions, w.rf)

    asyncio.run(create())
    ready, done, samples = tmp / f"{topic}.ready", tmp / f"{topic}.done", tmp / f"{topic}.npy"
    base = [sys.executable, str(Path(__file__).resolve()), "--bootstrap", bootstrap]
    base += ["--topic", topic, "--seconds", str(seconds), "--record-size", str(w.record_size)]
    consumer = subprocess.Popen(
        [
            *base,
            *("--role", "e2e-consumer", "--ready-file", str(ready)),
            *("--done-file", str(done), "--samples", str(samples)),
        ]
    )
    producer: subprocess.Popen[bytes] | None = None
    try:
        t_end = time.monotonic() + 60
        while not ready.exists():
            if consumer.poll() is not None or time.monotonic() > t_end:
                raise RuntimeError("e2e consumer did not start")
            time.sleep(0.05)
        producer = subprocess.Popen(
            [
                *base,
                *("--role", "e2e-producer", "--acks", _acks(w)),
                *("--rate-mb-s", str(w.rate_mb_s), "--linger-ms", str(linger_ms)),
            ],
            stdout=subprocess.PIPE,
        )
        out, _ = producer.communicate(timeout=seconds + 120)
        if producer.returncode != 0:
            raise RuntimeError(f"e2e producer failed ({producer.returncode})")
        done.write_text("done")
        consumer.wait(timeout=90)
        if consumer.returncode != 0:
            raise RuntimeError(f"e2e consumer failed ({consumer.returncode})")
    finally:
        for proc in (producer, consumer):
            if proc is not None and proc.poll() is None:
                proc.kill()  # by PID
                proc.wait()
    report = json.loads(out.decode().strip().splitlines()[-1])
    sent = report["sent"]
    everything = np.load(samples)
    ages = everything[len(everything) // 10 :]  # the first 10% (in arrival order) = warmup
    return Row.of(
        SYSTEM,
        "python headwater",
        w,
        len(ages),
        seconds * len(ages) / max(1, len(everything)),  # the measured (post-warmup) part
        latency_ms=common.percentiles_ms(ages),
        config=_latency_config(linger_ms),
        note=(
            f"producer process send() per record paced to {w.rate_mb_s:g} MB/s "
            f"(linger_ms {linger_ms:g}), consumer process poll_batches; {len(everything)} of "
            f"{sent} records received, the first 10% = warmup, left out"
        ),
        extra={
            "sent": sent,
            "latency_ms_with_warmup": common.percentiles_ms(everything),
            "linger_ms": linger_ms,
            "producer_ack_latency_ms": report["ack_latency_ms"],
            "producer_cpu_s": report["cpu_s"],
            "consumer_cpu_s": float(Path(str(samples) + ".cpu").read_text()),
        },
    )


# --- driver ------------------------------------------------------------------------------------


def run_cluster(
    out: Path,
    ws: list[Workload],
    brokers: int,
    quick: bool,
    max_s: float,
    tmp: Path,
    lingers: tuple[float, ...] = LATENCY_LINGERS_MS,
) -> None:
    from headwater.dev.cluster import LocalCluster

    fixed_s = common.FIXED_RATE_SECONDS if not quick else 5
    with LocalCluster(tmp / f"cluster-{brokers}", brokers=brokers) as cluster:
        boot = cluster.bootstrap
        topics: dict[tuple[int, int, int], str] = {}
        for w in ws:
            print(f"[headwater] {w.key}", flush=True)
            rows: list[Row] = []
            try:
                if w.kind == "produce-max":
                    n = common.record_count(w.record_size, quick)
                    row, topic = produce_max(boot, w, n, max_s)
                    rows.append(row)
                    if w.acks == "1":
                        topics[(w.partitions, w.record_size, w.rf)] = topic
                    if w.acks == "1" and w.partitions == 1 and w.rf == 1:
                        rows.append(produce_max(boot, w, n, max_s, mode="send")[0])
                    if w.rf == 1:
                        for mode in PER_RECORD_MODES:
                            rows.append(produce_max(boot, w, n, max_s, mode=mode)[0])
                elif w.kind == "consume":
                    n = common.record_count(w.record_size, quick)
                    src = topics.get((w.partitions, w.record_size, w.rf))
                    if src is None:
                        print(f"[headwater] skip {w.key}: no produce-max topic", flush=True)
                        continue
                    rows.append(consume(boot, w, src, n, max_s))
                    if w.rf == 1:
                        rows.append(consume(boot, w, src, n, max_s, decode="records"))
                elif w.kind == "produce-fixed":
                    for linger in lingers:
                        rows.append(produce_fixed(boot, w, fixed_s, linger))
                elif w.kind == "e2e":
                    for linger in lingers:
                        rows.append(e2e(boot, w, fixed_s, tmp, linger))
            except Exception as e:  # one failed row must not lose the others
                print(f"[headwater] {w.key} FAILED: {e}", flush=True)
                continue
            for row in rows:
                common.append_row(out, row)
                lat = row.latency_ms or {}
                print(
                    f"[headwater]   {row.client} {row.extra.get('mode', '')} [{row.config}]: "
                    f"{row.records} records, {row.records_per_sec:,.0f} rec/s, "
                    f"{row.mb_per_sec:,.1f} MB/s"
                    + (
                        f", p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} p99.9 {lat['p999']:.2f} ms"
                        if lat
                        else ""
                    ),
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-rf3", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=30)
    ap.add_argument("--only", default="", help="run only workloads whose key contains this")
    ap.add_argument(
        "--lingers",
        default=",".join(f"{x:g}" for x in LATENCY_LINGERS_MS),
        help="producer linger_ms values for the produce-fixed and e2e rows (comma-separated)",
    )
    # e2e child roles
    ap.add_argument("--role", choices=["e2e-producer", "e2e-consumer"])
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rate-mb-s", type=float, default=10)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--linger-ms", type=float, default=E2E_LINGER_MS)
    ap.add_argument("--fetch-max-wait-ms", type=int, default=500)
    ap.add_argument("--ready-file")
    ap.add_argument("--done-file")
    ap.add_argument("--samples")
    args = ap.parse_args()
    if args.role == "e2e-producer":
        asyncio.run(_e2e_producer(args))
        return
    if args.role == "e2e-consumer":
        asyncio.run(_e2e_consumer(args))
        return
    if args.out is None:
        ap.error("--out is required")

    def terminated(signum: int, _frame: object) -> None:
        # bench/side_by_side.py's timeout: unwind, so the cluster and the e2e children stop
        raise SystemExit(f"[headwater] signal {signum}: stopping")

    signal.signal(signal.SIGTERM, terminated)
    ws = [w for w in common.workloads(not args.no_rf3) if common.selected(args.only, w.key)]
    with tempfile.TemporaryDirectory(prefix="hw-peer-") as tmp:
        for brokers, rf in ((1, 1), (3, 3)):
            sel = [w for w in ws if w.rf == rf]
            if sel:
                lingers = tuple(float(x) for x in args.lingers.split(","))
                run_cluster(
                    args.out, sel, brokers, args.quick, args.max_seconds, Path(tmp), lingers
                )


if __name__ == "__main__":
    main()
