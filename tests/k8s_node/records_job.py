"""The program of the in-cluster Jobs of test_in_cluster_use.py (and of the Job example in
docs/kubernetes.md): produce N keyed records, or consume them back as a consumer group, and
report what went through.

It runs inside a pod of the services image (only the standard library and
:mod:`headwater.client` are imported), mounted from a ConfigMap:

    python /job/records_job.py produce --bootstrap B --topic T --count N
    python /job/records_job.py consume --bootstrap B --topic T --group G --count N

The report is one JSON object, printed and written to the container's termination message
(``/dev/termination-log``), where the test reads it from the pod's status:

- ``count``: records acknowledged (produce: every ``send_many`` group's future succeeded with
  acks=all) or received (consume);
- ``distinct_keys``: how many different keys those records had (a duplicate shows as
  ``count > distinct_keys``);
- ``sha256``: SHA-256 over the sorted (key, value) pairs, each written as the key's length
  (4 bytes), the key, the value's length and the value: equal on both sides only when the
  same records went through, whatever their order;
- ``partitions``: records per partition;
- ``seconds`` / ``records_per_s``: produce, from the first send to the last acknowledgement;
  consume, from subscribing (the group join included) to the last record;
- produce only: ``idempotent``, whether the producer ran idempotent (the default with
  acks=all);
- consume only: ``committed``, the sum of the group's committed offsets after the final commit.

Values are random bytes (``os.urandom``), so the checksum cannot be derived from the keys
alone: the consumer's checksum matches only if every value came back unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable

from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition

TERMINATION_LOG = "/dev/termination-log"
#: records per send_many call
CHUNK = 5000


def digest(pairs: Iterable[tuple[bytes, bytes]]) -> str:
    """SHA-256 of the sorted (key, value) pairs, each length-prefixed (order-independent)."""
    h = hashlib.sha256()
    for key, value in sorted(pairs):
        h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()


def _summary(pairs: list[tuple[bytes, bytes]], partitions: Counter[int], seconds: float) -> dict:
    return {
        "count": len(pairs),
        "distinct_keys": len({k for k, _ in pairs}),
        "sha256": digest(pairs),
        "partitions": {str(p): n for p, n in sorted(partitions.items())},
        "seconds": round(seconds, 3),
        "records_per_s": round(len(pairs) / seconds) if seconds > 0 else None,
    }


async def produce(args: argparse.Namespace) -> dict:
    keys = [f"key-{i:06d}".encode() for i in range(args.count)]
    values = [os.urandom(args.value_bytes) for _ in range(args.count)]
    partitions: Counter[int] = Counter()
    async with AsyncProducer(
        args.bootstrap, acks="all", linger_ms=10, client_id="records-job-producer"
    ) as producer:
        await producer.partitions_for(args.topic)  # metadata first: not part of the timing
        start = time.monotonic()
        futures = []
        for i in range(0, args.count, CHUNK):
            futures.append(
                await producer.send_many(args.topic, values[i : i + CHUNK], keys[i : i + CHUNK])
            )
        for group in await asyncio.gather(*futures):
            for r in group.ranges:
                partitions[r.partition] += r.count
        seconds = time.monotonic() - start
        idempotent = producer.enable_idempotence
    acked = sum(partitions.values())
    if acked != args.count:
        raise SystemExit(f"{acked} records acknowledged, {args.count} sent")
    out = {"role": "produce", "topic": args.topic, "acks": "all", "idempotent": idempotent}
    out.update(_summary(list(zip(keys, values, strict=True)), partitions, seconds))
    return out


async def consume(args: argparse.Namespace) -> dict:
    pairs: list[tuple[bytes, bytes]] = []
    partitions: Counter[int] = Counter()
    async with AsyncConsumer(
        args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        client_id="records-job-consumer",
    ) as consumer:
        consumer.subscribe([args.topic])
        start = time.monotonic()
        last = start
        while len(pairs) < args.count:
            batches = await consumer.poll_batches(timeout_ms=1000)
            now = time.monotonic()
            if not batches:
                if now - last > args.idle_timeout_s:
                    break  # reported as a short count
                continue
            last = now
            for fb in batches:
                for r in fb.records():
                    pairs.append((r.key or b"", r.value or b""))
                    partitions[r.partition] += 1
            await consumer.commit()
        seconds = last - start
        await consumer.commit()
        tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
        committed = await consumer.committed(tps)
    out = {"role": "consume", "topic": args.topic, "group": args.group}
    out.update(_summary(pairs, partitions, seconds))
    out["committed"] = sum(o for o in committed.values() if o is not None)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("produce", "consume"):
        p = sub.add_parser(role)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--count", type=int, required=True)
        if role == "produce":
            p.add_argument("--value-bytes", type=int, default=100)
        else:
            p.add_argument("--group", required=True)
            p.add_argument("--partitions", type=int, required=True, help="the topic's")
            p.add_argument(
                "--idle-timeout-s", type=float, default=120, help="give up after no record"
            )
    args = parser.parse_args(argv)
    report = asyncio.run(produce(args) if args.role == "produce" else consume(args))
    text = json.dumps(report, sort_keys=True)
    print(text, flush=True)
    if os.path.exists(TERMINATION_LOG):
        with open(TERMINATION_LOG, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
