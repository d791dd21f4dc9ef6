"""The producer and the consumer of the day-two tests, run in a pod of the services image.

The test ships this file in a ConfigMap and runs it in Jobs (``python day_two_workload.py
produce|consume BOOTSTRAP TOPIC``); only the Headwater client library is used.

``produce``: an idempotent acks=all producer sends values ``0, 1, 2, ...`` (key ``k<n % 64>``;
a progress line every ``PROGRESS_EVERY``) until the file ``STOP_FILE`` exists (the test creates
it with ``kubectl exec``) or ``--max`` records were sent, then flushes and prints one JSON line:
how many were sent, the acknowledged values as ranges, and every failed send (an error the
producer's retries did not absorb).
``consume``: reads every partition of the topic from the beginning up to the end offsets taken
at start and prints one JSON line: the values read as ranges, and the values read more than once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections import Counter

from headwater.client.consumer import AsyncConsumer
from headwater.client.producer import AsyncProducer, Callback
from headwater.client.types import RecordMetadata

STOP_FILE = "/tmp/stop"
#: pause between sends: a steady trickle (about 200 records/s) on a node shared by 2 cores
SEND_PAUSE_S = 0.005
#: a progress line (sent, acked so far) every this many sends
PROGRESS_EVERY = 500
#: how long the consumer waits for the next records before it gives up on the end offsets
CONSUME_IDLE_S = 60.0


def ranges(values: set[int]) -> list[list[int]]:
    """Sorted values as inclusive ``[first, last]`` runs."""
    out: list[list[int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


async def produce(bootstrap: str, topic: str, max_records: int) -> dict[str, object]:
    acked: set[int] = set()
    failed: dict[int, str] = {}

    def on_done(n: int) -> Callback:
        def cb(md: RecordMetadata | None, exc: BaseException | None) -> None:
            if exc is None:
                acked.add(n)
            else:
                failed[n] = repr(exc)

        return cb

    producer = AsyncProducer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
    sent = 0
    async with producer:
        while sent < max_records and not os.path.exists(STOP_FILE):
            await producer.send(topic, str(sent).encode(), key=f"k{sent % 64}".encode(),
                                callback=on_done(sent))  # fmt: skip
            sent += 1
            if sent % PROGRESS_EVERY == 0:
                print(json.dumps({"progress": sent, "acked": len(acked)}), flush=True)
            await asyncio.sleep(SEND_PAUSE_S)
        await producer.flush()
    return {"sent": sent, "acked": ranges(acked), "failed": failed}


async def consume(bootstrap: str, topic: str) -> dict[str, object]:
    async with AsyncProducer(bootstrap) as probe:
        tps = await probe.partitions_for(topic)
    seen: Counter[int] = Counter()
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            records = await consumer.poll(timeout_ms=500, max_records=5000)
            if records:
                idle_since = loop.time()
            elif loop.time() - idle_since > CONSUME_IDLE_S:
                break
            seen.update(int(r.value or b"-1") for r in records)
        positions = {tp.partition: await consumer.position(tp) for tp in tps}
    return {
        "values": ranges(set(seen)),
        "duplicates": sorted(v for v, c in seen.items() if c > 1),
        "end_offsets": {tp.partition: end[tp] for tp in tps},
        "positions": positions,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["produce", "consume"])
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("--max", type=int, default=200_000)
    a = p.parse_args()
    if a.mode == "produce":
        result = asyncio.run(produce(a.bootstrap, a.topic, a.max))
    else:
        result = asyncio.run(consume(a.bootstrap, a.topic))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
