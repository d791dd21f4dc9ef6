"""``headwater consume TOPIC``: print records (text or one JSON object per line)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from headwater.cli import common
from headwater.client.consumer import AsyncConsumer
from headwater.client.fetched import FetchedBatch
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records of a topic")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument("--offset", type=int, help="start at this offset (every partition read)")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument(
        "--group",
        help="consume as a member of this consumer group (subscribe; commits as it goes; "
        "starts at the committed offsets, else at the end or --from-beginning)",
    )
    p.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, never past the last "
        "stable offset (docs/transactions.md)",
    )
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument(
        "--timeout-ms", type=int, help="exit when no record arrives for this long (default: wait)"
    )
    p.add_argument("--print-key", action="store_true", help="text output: KEY<TAB>VALUE")
    p.add_argument("--key-separator", default="\t", help="with --print-key (default TAB)")
    p.set_defaults(run=run)


def _write_text(fb: FetchedBatch, limit: int | None, print_key: bool, sep: bytes) -> int:
    values = fb.values()
    if limit is not None:
        values = values[:limit]
    out = sys.stdout.buffer
    if print_key:
        keys = fb.keys()[: len(values)]
        lines = [
            (b"null" if k is None else k) + sep + (b"null" if v is None else v)
            for k, v in zip(keys, values, strict=True)
        ]
    else:
        lines = [b"null" if v is None else v for v in values]
    out.write(b"\n".join(lines) + b"\n")
    return len(values)


def _write_json(fb: FetchedBatch, limit: int | None) -> int:
    records = fb.records()
    if limit is not None:
        records = records[:limit]
    sys.stdout.write(
        "".join(
            json.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": common.text(r.key),
                    "value": common.text(r.value),
                }
            )
            + "\n"
            for r in records
        )
    )
    return len(records)


async def _partitions(boot: str, topic: str, only: int | None) -> list[TopicPartition]:
    from headwater.client.connection import ConnectionPool, parse_bootstrap

    pool = ConnectionPool()
    try:
        md = Metadata(pool, parse_bootstrap(boot))
        info = await md.wait_for_topic(topic, 10.0)
    finally:
        await pool.close()
    if only is not None:
        if only not in info.partitions:
            from headwater.errors import UnknownTopicOrPartitionError

            raise UnknownTopicOrPartitionError(f"{topic!r} has no partition {only}")
        return [TopicPartition(topic, only)]
    return [TopicPartition(topic, p) for p in sorted(info.partitions)]


async def _run_group(args: argparse.Namespace, boot: str) -> int:
    if args.partition is not None or args.offset is not None:
        raise common.UsageError("--group does not combine with --partition or --offset")
    reset = "earliest" if args.from_beginning else "latest"
    sep = args.key_separator.encode()
    count = 0
    async with AsyncConsumer(
        boot,
        group_id=args.group,
        auto_offset_reset=reset,
        client_id="headwater-cli",
        auto_commit_interval_ms=1000,
        isolation_level=args.isolation_level,
    ) as c:
        c.subscribe([args.topic])
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            wait = 1000 if args.timeout_ms is None else max(1, args.timeout_ms)
            left = None if args.max_messages is None else args.max_messages - count
            batches = await c.poll_batches(timeout_ms=wait, max_records=left)
            if not batches:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= (
                    args.timeout_ms
                ):
                    break
                continue
            last = time.monotonic()
            for fb in batches:
                if args.output == "json":
                    count += _write_json(fb, None)
                else:
                    count += _write_text(fb, None, args.print_key, sep)
            sys.stdout.flush()
            await c.commit()
    return 0


async def run(args: argparse.Namespace) -> int:
    boot = common.bootstrap(args)
    if args.group:
        return await _run_group(args, boot)
    tps = await _partitions(boot, args.topic, args.partition)
    sep = args.key_separator.encode()
    count = 0
    async with AsyncConsumer(
        boot,
        auto_offset_reset="latest",
        client_id="headwater-cli",
        isolation_level=args.isolation_level,
    ) as c:
        c.assign(tps)
        if args.from_beginning:
            await c.seek_to_beginning()
        elif args.offset is not None:
            for tp in tps:
                c.seek(tp, args.offset)
        else:
            await c.seek_to_end()
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            wait = 1000 if args.timeout_ms is None else max(1, args.timeout_ms)
            batches = await c.poll_batches(timeout_ms=wait)
            if not batches:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= (
                    args.timeout_ms
                ):
                    break
                continue
            last = time.monotonic()
            for fb in batches:
                left = None if args.max_messages is None else args.max_messages - count
                if left is not None and left <= 0:
                    break
                if args.output == "json":
                    count += _write_json(fb, left)
                else:
                    count += _write_text(fb, left, args.print_key, sep)
            sys.stdout.flush()
    return 0
