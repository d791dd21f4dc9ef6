"""The per-record produce call's own cost, no broker: µs of the caller's thread per record.

Measures what a user's tight loop of ``producer.send(topic, value)`` costs the calling thread
(issue 17 item 1), apart from the network and the broker: an :class:`AsyncProducer`'s
``produce()`` (what the blocking ``Producer.send()`` is) appends to a real
:class:`Accumulator` whose loop thread drains every ready batch, encodes it as the sender does
and completes it at once (a stand-in for the broker's acknowledgement), so buffer memory,
sealing, the sticky partitioner's switch and the lock handed between the two threads are all
real. Printed per row: the caller thread's CPU µs per record (``time.thread_time``), the loop
thread's, and records/s of wall time. ``--confluent`` adds confluent-kafka's ``produce()``
call on the same values (librdkafka buffers them; no broker is reachable, nothing is sent),
its caller CPU per record measured the same way.

Usage::

    nice -n 15 .venv/bin/python bench/produce_call.py [--records 300000] [--confluent]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Any

from headwater.batch import Compression
from headwater.client.accumulator import Accumulator, ProducerBatch
from headwater.client.producer import AsyncProducer
from headwater.client.types import TopicPartition


class _View:
    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def partition_count(self, topic: str) -> int:
        return self._counts.get(topic, 0)


class _Metadata:
    """What ``AsyncProducer._on_batch_sealed`` reads (the sticky partitioner's switch)."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.view = _View(counts)


class LoopDrain:
    """A loop thread that drains ready batches, encodes and completes them (no network)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.offsets: dict[TopicPartition, int] = {}
        self.acc: Accumulator | None = None
        self.batches = 0
        self._scheduled = False
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, fn: Any) -> Any:
        async def go() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(30)

    def wake(self) -> None:
        # called on the loop (Accumulator.wakeup); drain on the next turn, once
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self, force: bool = False) -> None:
        self._scheduled = False
        acc = self.acc
        assert acc is not None
        if force:
            acc.flushing += 1
        try:
            out, next_at, _unknown = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 30)
        finally:
            if force:
                acc.flushing -= 1
        for taken in out.values():
            for b in taken:
                self._complete(acc, b)
        if next_at is not None:
            self.loop.call_later(max(0.0, next_at - acc.clock()), self.wake)

    def _complete(self, acc: Accumulator, b: ProducerBatch) -> None:
        base = self.offsets.get(b.tp, 0)
        self.offsets[b.tp] = base + b.count
        self.batches += 1
        acc.complete(b, base)

    def flush(self) -> None:
        self.call(lambda: self._drain(force=True))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def headwater_row(records: int, size: int, partitions: int, batch_size: int) -> dict[str, Any]:
    drain = LoopDrain()
    p = AsyncProducer("127.0.0.1:1", batch_size=batch_size, linger_ms=5)

    def build() -> Accumulator:
        return Accumulator(
            batch_size=batch_size,
            linger_ms=5,
            buffer_memory=32 << 20,
            max_block_ms=60_000,
            delivery_timeout_ms=600_000,
            compression=Compression.NONE,
            on_batch_sealed=p._on_batch_sealed,
        )

    acc: Accumulator = drain.call(build)
    acc.wakeup = drain.wake
    drain.acc = acc
    topic = "bench"
    p._metadata = _Metadata({topic: partitions})  # type: ignore[assignment]
    p._tps[topic] = [TopicPartition(topic, i) for i in range(partitions)]
    p._acc = acc
    value = b"x" * size
    send = p.produce
    warm = records // 10
    for _ in range(warm):
        send(topic, value)
    drain.flush()
    loop_cpu0 = drain.call(time.thread_time)
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    last = None
    for _ in range(records):
        last = send(topic, value)
    cpu = time.thread_time() - cpu0
    drain.flush()
    assert last is not None and last.result(30).offset >= 0
    wall = time.perf_counter() - wall0
    loop_cpu = drain.call(time.thread_time) - loop_cpu0
    drain.stop()
    return {
        "system": "headwater produce()",
        "size": size,
        "partitions": partitions,
        "records": records,
        "caller_us": round(cpu / records * 1e6, 3),
        "loop_us": round(loop_cpu / records * 1e6, 3),
        "records_per_s": round(records / wall),
        "batches": drain.batches,
    }


def confluent_row(records: int, size: int, partitions: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "queue.buffering.max.messages": 10_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "batch.size": 1_000_000,
            "linger.ms": 10,
            "log_level": 0,
        }
    )
    value = b"x" * size
    done = [0]

    def on_delivery(_err: Any, _msg: Any) -> None:
        done[0] += 1

    produce = p.produce
    # no broker: records stay queued in librdkafka; without metadata its partitioner cannot
    # run, so the partition is named (the call's own cost is what is measured)
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for i in range(records):
        produce("bench", value, partition=i % partitions, on_delivery=on_delivery)
        if not i & 1023:
            p.poll(0)
    cpu = time.thread_time() - cpu0
    wall = time.perf_counter() - wall0
    p.purge()
    p.poll(0)
    return {
        "system": "confluent-kafka produce() (queued only)",
        "size": size,
        "partitions": partitions,
        "records": records,
        "caller_us": round(cpu / records * 1e6, 3),
        "loop_us": None,
        "records_per_s": round(records / wall),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--partitions", default="1,8")
    ap.add_argument("--batch-size", type=int, default=1 << 20)
    ap.add_argument("--confluent", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    a = ap.parse_args()
    for size in (int(s) for s in a.sizes.split(",")):
        for parts in (int(s) for s in a.partitions.split(",")):
            rows = [headwater_row(a.records, size, parts, a.batch_size)]
            if a.confluent:
                rows.append(confluent_row(a.records, size, parts))
            for r in rows:
                if a.json:
                    print(json.dumps(r), flush=True)
                else:
                    print(
                        f"{r['system']:42s} {size:5d} B p={parts}  caller {r['caller_us']:6.2f}"
                        f" µs/rec  loop {r['loop_us'] if r['loop_us'] is not None else '-':>6}"
                        f" µs/rec  {r['records_per_s']:>10,} rec/s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
