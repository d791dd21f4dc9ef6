"""Producer id blocks from a real etcd: unique across allocators, concurrent claims included."""

from __future__ import annotations

import asyncio

from headwater.platform import etcd as hetcd
from headwater.platform.producer_ids import BLOCK_KEY, ProducerIdAllocator


def test_allocators_never_hand_out_the_same_id(etcd: str) -> None:
    async def run() -> None:
        clients = [await hetcd.Etcd.connect(etcd) for _ in range(3)]
        try:
            allocators = [ProducerIdAllocator(c, block_size=7) for c in clients]

            async def take(a: ProducerIdAllocator, n: int) -> list[int]:
                return [await a.next_id() for _ in range(n)]

            got = await asyncio.gather(*(take(a, 25) for a in allocators for _ in range(2)))
            ids = [i for chunk in got for i in chunk]
            assert len(ids) == 150
            assert len(set(ids)) == 150, "an id was handed out twice"
            assert min(ids) >= 0
            value = await clients[0].get(BLOCK_KEY)
            assert value is not None and int(value[0]) > max(ids)
        finally:
            for c in clients:
                await c.close()

    asyncio.run(run())
