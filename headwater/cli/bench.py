"""``headwater bench produce|consume``: throughput and latency, like Kafka's perf-test tools.

produce ``--mode many`` hands the producer ``--chunk`` records per ``send_many`` call (the
bulk API; latency is measured per call: from the call to the acknowledgement of its last
batch). ``--mode send`` awaits ``AsyncProducer.send()`` per record; ``--mode produce`` calls
the non-awaiting ``AsyncProducer.produce()`` per record (yielding to the loop every 1,024
records, as a confluent-kafka loop calls ``poll(0)``; buffer full, it awaits ``send()``);
``--mode sync`` calls the blocking ``Producer.send()`` per record from the main thread (the
producer's loop runs in its own thread). Per-record modes sample latency on every 64th record.
The payloads are a pool of random uppercase records reused across the run (generated before
the clock starts).

``--throughput R`` paces the producer to R records/s (like Kafka's ProducerPerformance; -1, the
default, = as fast as it goes); paced, every record's ack latency is sampled (``--mode send``)
and ``--mode many`` sends chunks of at most 5 ms worth of records. ``--max-seconds`` stops a
run early (the report gives the records actually sent or read). ``--warmup-records N``: the
first N records are sent but left out of the figures (like ProducerPerformance's).
``--replication-factor`` and ``--partitions`` apply when the topic must be created.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import random
import string
import time
from collections.abc import Callable

import numpy as np

from headwater.cli import common
from headwater.client.admin import AsyncAdminClient
from headwater.client.consumer import AsyncConsumer
from headwater.client.errors import BufferExhaustedError
from headwater.client.producer import AsyncProducer
from headwater.client.producer_config import DEFAULT_BATCH_SIZE
from headwater.client.sync import Consumer, Producer
from headwater.client.types import TopicPartition
from headwater.errors import TopicAlreadyExistsError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure produce or consume throughput")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)

    pp = bsub.add_parser("produce", help="producer throughput and ack latency")
    pp.add_argument("--topic", required=True)
    pp.add_argument("--num-records", type=int, default=1_000_000)
    pp.add_argument("--record-size", type=int, default=100)
    pp.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    pp.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    pp.add_argument("--compression", default="none", choices=["none", "gzip", "lz4", "zstd"])
    pp.add_argument("--linger-ms", type=float, default=5)
    pp.add_argument("--max-in-flight", type=int, default=5)
    pp.add_argument(
        "--idempotence",
        choices=["default", "on", "off"],
        default="default",
        help="enable_idempotence (default: on with acks=all, as the producer's default)",
    )
    pp.add_argument("--buffer-memory", type=int, default=64 * 1024 * 1024)
    pp.add_argument("--mode", choices=["many", "send", "produce", "sync"], default="many")
    pp.add_argument("--chunk", type=int, default=10_000, help="records per send_many call")
    pp.add_argument("--partitions", type=int, default=1, help="if the topic must be created")
    pp.add_argument(
        "--replication-factor", type=int, default=1, help="if the topic must be created"
    )
    pp.add_argument(
        "--throughput",
        type=float,
        default=-1,
        help="records/s to pace the producer to (-1: as fast as possible)",
    )
    pp.add_argument("--max-seconds", type=float, default=0, help="stop after this long (0: no)")
    pp.add_argument(
        "--warmup-records",
        type=int,
        default=0,
        help="records sent first and left out of the figures (clock and latency samples)",
    )
    pp.set_defaults(run=produce)

    pc = bsub.add_parser("consume", help="consumer throughput (records decoded)")
    pc.add_argument("--topic", required=True)
    pc.add_argument("--num-records", type=int, default=1_000_000)
    pc.add_argument(
        "--decode",
        choices=["values", "arrow", "none", "records"],
        default="values",
        help="values/arrow/none: the asyncio consumer's poll_batches; records: the blocking "
        "Consumer's poll() iterated record by record (each record's value read)",
    )
    pc.add_argument("--fetch-bytes", type=int, default=4 * 1024 * 1024)
    pc.add_argument("--timeout-ms", type=int, default=10_000)
    pc.add_argument("--max-seconds", type=float, default=0, help="stop after this long (0: no)")
    pc.set_defaults(run=consume)


def _payloads(size: int, n: int = 1000) -> list[bytes]:
    rng = random.Random(42)
    letters = string.ascii_uppercase.encode()
    return [bytes(rng.choices(letters, k=size)) for _ in range(n)]


def _report(args: argparse.Namespace, result: dict[str, float | int]) -> None:
    if args.output == "json":
        common.print_json(result)
        return
    line = (
        f"{result['records']} records, {result['records_per_sec']:,.1f} records/sec "
        f"({result['mb_per_sec']:.2f} MB/sec)"
    )
    if "latency_p50_ms" in result:
        line += (
            f", {result['latency_avg_ms']:.1f} ms avg latency, "
            f"{result['latency_max_ms']:.1f} ms max latency, "
            f"{result['latency_p50_ms']:.0f} ms 50th, {result['latency_p99_ms']:.0f} ms 99th, "
            f"{result['latency_p999_ms']:.0f} ms 99.9th."
        )
    print(line)


async def _ensure_topic(args: argparse.Namespace) -> None:
    async with AsyncAdminClient(common.bootstrap(args), controller=common.controller(args)) as a:
        with contextlib.suppress(TopicAlreadyExistsError):
            await a.create_topic(args.topic, args.partitions, args.replication_factor)


async def _pace(at: float, loop: asyncio.AbstractEventLoop) -> None:
    """Sleep until loop time ``at`` (no-op when behind schedule)."""
    delay = at - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _producer_config(args: argparse.Namespace) -> dict[str, object]:
    return dict(
        acks=args.acks,
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        compression_type=args.compression,
        max_in_flight=args.max_in_flight,
        enable_idempotence={"default": None, "on": True, "off": False}[args.idempotence],
        buffer_memory=max(args.buffer_memory, args.batch_size),
        client_id="headwater-bench",
    )


def _result(counted: int, size: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    lat = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "records": counted,
        "seconds": round(elapsed, 3),
        "records_per_sec": counted / elapsed,
        "mb_per_sec": counted * size / elapsed / 1e6,
        "latency_avg_ms": float(lat.mean()),
        "latency_max_ms": float(lat.max()),
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
        "latency_p999_ms": float(np.percentile(lat, 99.9)),
    }


def _stamp_sync(latencies: list[float], t0: float, keep: bool) -> Callable[[object], None]:
    def done(_f: object) -> None:
        if keep:
            latencies.append(time.monotonic() - t0)

    return done


def _produce_sync(args: argparse.Namespace) -> dict[str, float]:
    """``--mode sync``: the blocking facade's ``send()`` per record, in this thread."""
    n, size = args.num_records, args.record_size
    pool = _payloads(size)
    npool = len(pool)
    latencies: list[float] = []
    warmup = max(0, min(args.warmup_records, n - 1))
    clock = time.monotonic
    with Producer(common.bootstrap(args), **_producer_config(args)) as p:
        p.send_many(args.topic, pool[:10]).result(60)  # metadata and connections
        p.flush()
        gc.freeze()
        rate = args.throughput if args.throughput > 0 else 0.0
        deadline = math.inf if args.max_seconds <= 0 else clock() + args.max_seconds
        send, topic = p.send, args.topic
        futures = []
        sent = 0
        start = clock()
        measured_from = (start, 0)
        every = 1 if rate else 64
        while sent < n:
            if sent & 1023 == 0:
                if clock() >= deadline:
                    break
                if rate:
                    wait = start + sent / rate - clock()
                    if wait > 0:
                        time.sleep(wait)
            fut = send(topic, pool[sent % npool])
            if sent % every == 0:
                fut.add_done_callback(_stamp_sync(latencies, clock(), sent >= warmup))
                futures.append(fut)
            sent += 1
            if sent == warmup:
                measured_from = (clock(), sent)
        p.flush()
        elapsed = clock() - measured_from[0]
        for f in futures:
            f.result()
    return _result(sent - measured_from[1], size, elapsed, latencies)


async def produce(args: argparse.Namespace) -> int:
    await _ensure_topic(args)
    if args.mode == "sync":
        _report(args, _produce_sync(args))
        return 0
    n, size = args.num_records, args.record_size
    pool = _payloads(size)
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    warmup = max(0, min(args.warmup_records, n - 1))

    def stamp(t0: float, keep: bool = True) -> object:
        return lambda _f: latencies.append(loop.time() - t0) if keep else None

    async with AsyncProducer(common.bootstrap(args), **_producer_config(args)) as p:  # type: ignore[arg-type]
        await p.send_many(args.topic, pool[:10])  # warm up metadata and connections
        await p.flush()
        gc.freeze()  # what exists now is never garbage: no full-collection pauses over it
        futures: list[asyncio.Future[object]] = []
        rate = args.throughput if args.throughput > 0 else 0.0
        deadline = math.inf if args.max_seconds <= 0 else loop.time() + args.max_seconds
        sent = 0
        start = loop.time()
        measured_from = (start, 0)  # (clock, records sent) where the figures start
        if args.mode == "many":
            size_chunk = args.chunk if not rate else max(1, min(args.chunk, int(rate / 200)))
            chunk = (pool * (size_chunk // len(pool) + 1))[:size_chunk]
            while sent < n and loop.time() < deadline:
                part = chunk if n - sent >= len(chunk) else chunk[: n - sent]
                if rate:
                    await _pace(start + (sent + len(part)) / rate, loop)
                t0 = loop.time()
                fut = await p.send_many(args.topic, part)
                fut.add_done_callback(stamp(t0, sent >= warmup))  # type: ignore[arg-type]
                futures.append(fut)  # type: ignore[arg-type]
                sent += len(part)
                if warmup and sent - len(part) < warmup <= sent:
                    measured_from = (loop.time(), sent)
        elif args.mode == "produce":
            produce_one, send_one = p.produce, p.send
            topic = args.topic
            npool = len(pool)
            every = 1 if rate else 64
            while sent < n:
                if sent & 1023 == 0:
                    if loop.time() >= deadline:
                        break
                    if rate:
                        await _pace(start + sent / rate, loop)
                    else:
                        await asyncio.sleep(0)  # let the sender run (poll(0) in librdkafka)
                value = pool[sent % npool]
                try:
                    fut3: object = produce_one(topic, value)
                except BufferExhaustedError:
                    fut3 = await send_one(topic, value)  # waits for buffer memory
                if sent % every == 0:
                    fut3.add_done_callback(stamp(loop.time(), sent >= warmup))  # type: ignore[attr-defined]
                    futures.append(fut3)  # type: ignore[arg-type]
                sent += 1
                if sent == warmup:
                    measured_from = (loop.time(), sent)
        else:
            send = p.send
            topic = args.topic
            npool = len(pool)
            every = 1 if rate else 64
            check = max(1, min(1000, int(rate / 1000))) if rate else 1000
            while sent < n:
                if sent % check == 0:
                    if loop.time() >= deadline:
                        break
                    if rate:
                        await _pace(start + sent / rate, loop)
                fut2 = await send(topic, pool[sent % npool])
                if sent % every == 0:
                    fut2.add_done_callback(stamp(loop.time(), sent >= warmup))  # type: ignore[arg-type]
                    futures.append(fut2)  # type: ignore[arg-type]
                sent += 1
                if sent == warmup:
                    measured_from = (loop.time(), sent)
        await p.flush()
        elapsed = loop.time() - measured_from[0]
        counted = sent - measured_from[1]
        for f in futures:
            f.result()
    _report(args, _result(counted, size, elapsed, latencies))
    return 0


def _consume_records(args: argparse.Namespace) -> dict[str, float]:
    """``--decode records``: the blocking facade's ``poll()``, iterated per record."""
    from headwater.client.metadata import Metadata

    with Consumer(
        common.bootstrap(args),
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=args.fetch_bytes,
        max_buffer_bytes=4 * args.fetch_bytes,
        client_id="headwater-bench",
    ) as c:
        inner = c._c
        inner._ensure_started()
        md: Metadata | None = inner._metadata
        assert md is not None
        info = c._lt.run(md.wait_for_topic(args.topic, 10.0))
        c.assign([TopicPartition(args.topic, p) for p in sorted(info.partitions)])
        c.seek_to_beginning()
        gc.freeze()
        count = nbytes = 0
        start = time.perf_counter()
        deadline = math.inf if args.max_seconds <= 0 else start + args.max_seconds
        poll = c.poll
        while count < args.num_records and time.perf_counter() < deadline:
            records = poll(args.timeout_ms)  # max_records: its default, 500
            if not records:
                break
            for rec in records:
                v = rec.value
                nbytes += len(v) if v is not None else 0
                count += 1
        elapsed = time.perf_counter() - start
    return {
        "records": count,
        "seconds": round(elapsed, 3),
        "records_per_sec": count / elapsed if elapsed else 0.0,
        "mb_per_sec": nbytes / elapsed / 1e6 if elapsed else 0.0,
    }


async def consume(args: argparse.Namespace) -> int:
    from headwater.client.consumer import FetchedBatch  # noqa: F401  (documented type)
    from headwater.client.metadata import Metadata

    if args.decode == "records":
        res = _consume_records(args)
        _report(args, res)
        return 0 if res["records"] >= args.num_records or args.max_seconds > 0 else 1
    boot = common.bootstrap(args)
    c = AsyncConsumer(
        boot,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=args.fetch_bytes,
        max_buffer_bytes=4 * args.fetch_bytes,
        client_id="headwater-bench",
    )
    try:
        c._ensure_started()
        md: Metadata | None = c._metadata
        assert md is not None
        info = await md.wait_for_topic(args.topic, 10.0)
        c.assign([TopicPartition(args.topic, p) for p in sorted(info.partitions)])
        await c.seek_to_beginning()
        gc.freeze()
        count = nbytes = 0
        start = time.perf_counter()
        deadline = math.inf if args.max_seconds <= 0 else start + args.max_seconds
        while count < args.num_records and time.perf_counter() < deadline:
            batches = await c.poll_batches(timeout_ms=args.timeout_ms)
            if not batches:
                break
            for fb in batches:
                if args.decode == "values":
                    vals = fb.values()
                    count += len(vals)
                elif args.decode == "arrow":
                    count += fb.to_arrow().num_rows
                else:
                    count += len(fb)
                nbytes += fb.batch.header.total_size
        elapsed = time.perf_counter() - start
    finally:
        await c.close()
    _report(
        args,
        {
            "records": count,
            "seconds": round(elapsed, 3),
            "records_per_sec": count / elapsed if elapsed else 0.0,
            "mb_per_sec": nbytes / elapsed / 1e6 if elapsed else 0.0,
        },
    )
    return 0 if count >= args.num_records or args.max_seconds > 0 else 1
