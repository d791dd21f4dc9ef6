"""The workload of test_failures.py; runs inside a pod of the services image (a Job).

    python failures_workload.py BOOTSTRAP TOPIC RATE CONTROL_DIR

Produces numbered records (key = value = the decimal sequence number) to TOPIC through the
bootstrap Service with an idempotent acks=all producer, about RATE records a second, until the
file CONTROL_DIR/stop exists; remembers every sequence number whose send was acknowledged. Then
flushes, closes, reads every partition back from the beginning to its high watermark with a
fresh consumer and prints one ``RESULT {json}`` line: the acknowledged numbers and the numbers
read (both as [first, last] ranges), the numbers read more than once, and the failed sends.
While producing it prints ``PROGRESS {json}`` (sent, acked, failed) every second.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time
from typing import Any

from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition

#: records in flight at most (the producer's buffer is the other bound)
MAX_PENDING = 2000
#: a send may ride through a broker's restart (two sessions' worth and the pod's start)
DELIVERY_TIMEOUT_MS = 300_000
READ_TIMEOUT_S = 300.0


def ranges(numbers: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"{kind} {json.dumps(payload)}", flush=True)


async def produce(
    bootstrap: str, topic: str, rate: float, stop: str
) -> tuple[set[int], dict[int, str], int, list[TopicPartition]]:
    acked: set[int] = set()
    failed: dict[int, str] = {}
    pending: set[asyncio.Future[Any]] = set()

    def done(seq: int, fut: asyncio.Future[Any]) -> None:
        pending.discard(fut)
        exc = fut.exception()
        if exc is None:
            acked.add(seq)
        else:
            failed[seq] = repr(exc)

    producer = AsyncProducer(
        bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        client_id="failures-workload",
    )
    seq = 0
    async with producer:
        tps = await producer.partitions_for(topic)
        start = last_report = time.monotonic()
        while not os.path.exists(stop):
            due = int((time.monotonic() - start) * rate)
            while seq < due and len(pending) < MAX_PENDING:
                value = str(seq).encode()
                fut = await producer.send(topic, value, key=value)
                pending.add(fut)
                fut.add_done_callback(lambda f, s=seq: done(s, f))
                seq += 1
            if time.monotonic() - last_report >= 1.0:
                last_report = time.monotonic()
                emit("PROGRESS", {"sent": seq, "acked": len(acked), "failed": len(failed)})
            await asyncio.sleep(0.05)
        await producer.flush()
    if pending:
        await asyncio.wait(set(pending))
    return acked, failed, seq, tps


async def read_back(bootstrap: str, tps: list[TopicPartition]) -> collections.Counter[int]:
    seen: collections.Counter[int] = collections.Counter()
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        ends = await consumer.end_offsets(tps)
        todo = {tp.partition: end for tp, end in ends.items() if end > 0}
        consumer.assign([tp for tp in tps if tp.partition in todo])
        await consumer.seek_to_beginning(*consumer.assignment())
        pos = dict.fromkeys(todo, 0)

        async def drain() -> None:
            while any(pos[p] < todo[p] for p in pos):
                for fb in await consumer.poll_batches(timeout_ms=500):
                    p = fb.tp.partition
                    for off, v in zip(fb.offsets().tolist(), fb.values(), strict=True):
                        if off < todo[p]:
                            seen[int(v)] += 1
                        pos[p] = max(pos[p], int(off) + 1)

        await asyncio.wait_for(drain(), READ_TIMEOUT_S)
    return seen


async def main(bootstrap: str, topic: str, rate: float, control: str) -> None:
    acked, failed, sent, tps = await produce(bootstrap, topic, rate, os.path.join(control, "stop"))
    emit("PROGRESS", {"sent": sent, "acked": len(acked), "failed": len(failed), "done": True})
    seen = await read_back(bootstrap, tps)
    emit(
        "RESULT",
        {
            "sent": sent,
            "acked": ranges(acked),
            "read": ranges(set(seen)),
            "records_read": sum(seen.values()),
            "duplicates": sorted(n for n, c in seen.items() if c > 1),
            "failed": len(failed),
            "failed_sample": sorted(failed.items())[:5],
        },
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]))
