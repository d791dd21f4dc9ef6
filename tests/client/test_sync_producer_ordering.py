"""The sync Producer facade keeps call order: a commit_transaction (or flush, abort,
send_offsets_to_transaction) called right after send() or send_many() runs only once that
send has been buffered, even when buffering waits (metadata of a new topic). Fake
AsyncProducer: pure ordering logic of the facade. (send() buffers in the caller's thread
before it returns — AsyncProducer.produce — so its order needs no machinery.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.client.sync import Producer, _LoopThread

pytestmark = pytest.mark.fast


class SlowBufferingProducer:
    """send() buffers after a delay; commit records what was buffered when it ran."""

    def __init__(self) -> None:
        self.buffered: list[bytes] = []
        self.committed_with: list[bytes] | None = None

    async def send_many(self, topic: str, values: list[bytes], keys: Any = None, **kw: Any) -> Any:
        await asyncio.sleep(0.2)
        self.buffered.extend(values)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(len(self.buffered) - 1)
        return fut

    def produce(self, topic: str, value: bytes, *args: Any) -> Any:
        self.buffered.append(value)
        return len(self.buffered) - 1

    async def commit_transaction(self) -> None:
        self.committed_with = list(self.buffered)


def test_commit_after_sends_waits_until_they_are_buffered() -> None:
    p = Producer.__new__(Producer)
    p._lt = _LoopThread("test-producer")
    p._buffering = set()
    p._tail = None
    fake = SlowBufferingProducer()
    p._p = fake  # type: ignore[assignment]
    try:
        assert p.send("t", b"zero") == 0
        f = p.send_many("t", [b"one"])
        p.commit_transaction(timeout=5)
        assert fake.committed_with == [b"zero", b"one"]
        assert f.result(5) == 1
    finally:
        p._lt.stop()
