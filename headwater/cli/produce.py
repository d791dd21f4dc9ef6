"""``headwater produce TOPIC``: lines from stdin, sent in bulk with ``send_many``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from headwater.cli import common
from headwater.client.producer import AsyncProducer
from headwater.client.producer_config import DEFAULT_BATCH_SIZE

#: bytes of stdin read (and handed to send_many) at a time
CHUNK_BYTES = 1 << 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="produce lines from stdin (one record per line)")
    p.add_argument("topic")
    p.add_argument("--key-separator", help="split each line into KEY<SEP>VALUE")
    p.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    p.add_argument("--compression", default="none", choices=["none", "gzip", "lz4", "zstd"])
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--linger-ms", type=float, default=5)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--max-block-ms", type=float, default=30_000)
    p.set_defaults(run=run)


def _split(lines: list[bytes], sep: bytes) -> tuple[list[bytes | None], list[bytes | None]]:
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for line in lines:
        k, found, v = line.partition(sep)
        if found:
            keys.append(k)
            values.append(v)
        else:
            keys.append(None)
            values.append(line)
    return keys, values


async def run(args: argparse.Namespace) -> int:
    sep = args.key_separator.encode() if args.key_separator else None
    stdin = sys.stdin.buffer
    loop = asyncio.get_running_loop()
    total = 0
    started = last_report = time.monotonic()
    futures: list[asyncio.Future[object]] = []
    async with AsyncProducer(
        common.bootstrap(args),
        acks=args.acks,
        compression_type=args.compression,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        max_block_ms=args.max_block_ms,
        client_id="headwater-cli",
    ) as producer:
        while True:
            raw = await loop.run_in_executor(None, stdin.readlines, CHUNK_BYTES)
            if not raw:
                break
            lines = [line.rstrip(b"\r\n") for line in raw]
            if sep is not None:
                keys, values = _split(lines, sep)
                fut = await producer.send_many(args.topic, values, keys, partition=args.partition)
            else:
                fut = await producer.send_many(args.topic, lines, partition=args.partition)
            futures.append(fut)  # type: ignore[arg-type]
            done = [f for f in futures if f.done()]
            for f in done:
                f.result()  # raise the first delivery error now
            futures = [f for f in futures if not f.done()]
            total += len(lines)
            now = time.monotonic()
            if now - last_report >= 2:
                last_report = now
                common.progress(
                    f"produced {total} records ({total / (now - started):,.0f} records/s)"
                )
        await producer.flush()
        for f in futures:
            f.result()
    elapsed = time.monotonic() - started
    if elapsed >= 2:
        common.progress(f"produced {total} records in {elapsed:.1f}s")
    return 0
