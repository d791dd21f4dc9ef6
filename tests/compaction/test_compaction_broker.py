"""One real broker cleaning a compacted topic: the log shrinks, a consumer reading from the
beginning gets the latest value of every key, offsets ascending with gaps."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import wait_for

TOPIC = "compacted"


def _log_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob(f"{TOPIC}-0/*.log"))


def test_broker_compacts_and_consumer_skips_gaps(tmp_path_factory: pytest.TempPathFactory) -> None:
    data = tmp_path_factory.mktemp("compaction")
    with LocalCluster(
        data,
        brokers=1,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--log-cleaner-backoff-ms", "300"],
    ) as cluster:
        boot = cluster.bootstrap
        expect: dict[bytes, bytes] = {}

        async def produce() -> None:
            async with AsyncAdminClient(boot) as admin:
                await admin.create_topic(
                    TOPIC,
                    1,
                    configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": "4096",
                        "min.cleanable.dirty.ratio": "0.01",
                    },
                )
            async with AsyncProducer(boot) as p:
                for r in range(100):  # odd keys only every other round: gaps when cleaned
                    ids = range(20) if r % 2 == 0 else range(0, 20, 2)
                    keys = [b"key-%02d" % i for i in ids]
                    values = [b"round-%03d-%02d" % (r, i) for i in ids]
                    await (await p.send_many(TOPIC, values, keys))
                    expect.update(zip(keys, values, strict=True))

        asyncio.run(produce())
        last = 50 * 20 + 50 * 10 - 1
        # uncompacted: 100 batches of ~400 B (~40 KB); compacted: ~20 keys plus the active
        # segment (cleaning already runs while the producer writes)
        wait_for(lambda: _log_bytes(data) < 12_000, timeout=60, what="log compacted")

        async def consume() -> list[tuple[int, bytes | None, bytes | None]]:
            out: list[tuple[int, bytes | None, bytes | None]] = []
            tp = TopicPartition(TOPIC, 0)
            async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
                c.assign([tp])
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    for rec in await c.poll(timeout_ms=300):
                        out.append((rec.offset, rec.key, rec.value))
                    if out and out[-1][0] == last:
                        break
            return out

        got = asyncio.run(consume())
        offsets = [o for o, _, _ in got]
        assert offsets and offsets[-1] == last
        assert offsets == sorted(set(offsets))
        assert len(got) < 750  # most updates removed
        assert any(b - a > 1 for a, b in itertools.pairwise(offsets))  # gaps
        final = {k: v for _, k, v in got}
        assert final == expect
