"""An in-memory partition for a coordinator runtime's log machinery (log_runtime.py): appends
get the next offset at once (a committed append) and the tail reader hands out ONE record per
poll, so the interleavings of appends and reads are exact. Fakes for the producer and the tail
consumer only; everything else of the runtime is the real code."""

from __future__ import annotations

import asyncio
from typing import Any

from headwater.client.types import ConsumerRecord
from services.coordinator import records as rec


class FakeLog:
    """The partition: appends get the next offset at once (a committed append)."""

    def __init__(self) -> None:
        self.records: list[ConsumerRecord] = []

    def append(self, r: rec.Record) -> int:
        return self.append_raw(r.key, r.value, r.epoch)

    def append_raw(self, key: bytes, value: bytes | None, epoch: int) -> int:
        off = len(self.records)
        headers = ((rec.EPOCH_HEADER, str(epoch).encode()),)
        self.records.append(ConsumerRecord("t", 0, off, 0, key, value, headers))
        return off


class _Md:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FakeProducer:
    def __init__(self, log: FakeLog) -> None:
        self.log = log

    async def send(self, topic: str, value: Any, key: Any, **kw: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(_Md(self.log.append_raw(key, value, int(kw["headers"][0][1]))))
        return fut


class OneAtATimeConsumer:
    def __init__(self, log: FakeLog) -> None:
        self.log = log
        self.position = 0

    async def poll(self, timeout_ms: int = 0, max_records: int = 0) -> list[ConsumerRecord]:
        if self.position >= len(self.log.records):
            await asyncio.sleep(0)
            return []
        self.position += 1
        return [self.log.records[self.position - 1]]
