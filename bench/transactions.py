"""Exactly-once cost (issue 5): plain vs idempotent vs transactional produce, one run.

One local cluster (3 brokers, RF 3, min.insync.replicas 2, one coordinator); each mode sends
the same N records of SIZE bytes with acks=all to a 6-partition topic of its own:

* ``plain``         — acks=all, enable_idempotence=False;
* ``idempotent``    — acks=all with sequence numbers (the default producer);
* ``txn/<k>``       — a transactional producer committing every k records
  (begin, k sends, commit_transaction), for k in TXN_SIZES.

Reported: records/s, MB/s and the ratio to ``plain`` measured in the same run (the machine is
shared; compare ratios, not absolute figures). Modes run interleaved twice and the better
of the two runs of each is kept.

    python bench/transactions.py [--records 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.client import AsyncAdminClient, AsyncProducer, NewTopic
from headwater.dev.cluster import LocalCluster

PARTITIONS = 6
TXN_SIZES = (100, 1000, 10_000)


async def _create(bootstrap: str, topic: str) -> None:
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})])


async def _send_all(p: AsyncProducer, topic: str, values: list[bytes]) -> None:
    futures = [await p.send(topic, v) for v in values]
    await asyncio.gather(*futures)


async def run_mode(bootstrap: str, mode: str, topic: str, n: int, size: int) -> float:
    """Seconds to send n records of ``size`` bytes in ``mode`` (topic created before)."""
    value = b"x" * size
    values = [value] * n
    if mode == "plain":
        producer = AsyncProducer(bootstrap, acks="all", enable_idempotence=False)
    elif mode == "idempotent":
        producer = AsyncProducer(bootstrap, acks="all")
    else:
        producer = AsyncProducer(bootstrap, transactional_id=f"bench-{topic}")
    async with producer:
        if mode.startswith("txn/"):
            await producer.init_transactions()
            k = int(mode.split("/")[1])
            start = time.perf_counter()
            for i in range(0, n, k):
                producer.begin_transaction()
                await _send_all(producer, topic, values[i : i + k])
                await producer.commit_transaction()
        else:
            await _send_all(producer, topic, values[: min(1000, n)])  # warm: metadata, pid
            start = time.perf_counter()
            await _send_all(producer, topic, values)
        return time.perf_counter() - start


async def main_async(bootstrap: str, n: int, size: int) -> dict[str, dict[str, float]]:
    modes = ["plain", "idempotent", *[f"txn/{k}" for k in TXN_SIZES]]
    best: dict[str, float] = {}
    for rnd in range(2):
        for mode in modes:
            topic = f"bench-{mode.replace('/', '-')}-{rnd}"
            await _create(bootstrap, topic)
            secs = await run_mode(bootstrap, mode, topic, n, size)
            best[mode] = min(best.get(mode, secs), secs)
            print(f"round {rnd} {mode:>12}: {n / secs:>10,.0f} records/s", flush=True)
    base = n / best["plain"]
    return {
        m: {
            "records_per_s": round(n / s),
            "mb_per_s": round(n * size / s / 1e6, 2),
            "ratio_to_plain": round((n / s) / base, 3),
        }
        for m, s in best.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as d,
        LocalCluster(Path(d), brokers=3, controllers=1, coordinators=1) as c,
    ):
        out = asyncio.run(main_async(c.bootstrap, args.records, args.size))
    print(json.dumps({"records": args.records, "size": args.size, "modes": out}, indent=2))


if __name__ == "__main__":
    main()
