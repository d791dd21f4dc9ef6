"""The sync Producer facade keeps call order: a commit_transaction (or flush, abort,
send_offsets_to_transaction) called right after send() runs only once that send has been
buffered, even when buffering waits (metadata of a new topic). Fake AsyncProducer: pure
ordering logic of the facade."""

from __future__ import annotations

import asyncio
from typing import Any

from headwater.client.sync import Producer, _LoopThread


class SlowBufferingProducer:
    """send() buffers after a delay; commit records what was buffered when it ran."""

    def __init__(self) -> None:
        self.buffered: list[bytes] = []
        self.committed_with: list[bytes] | None = None

    async def send(self, topic: str, value: bytes, key: Any = None, **kw: Any) -> Any:
        await asyncio.sleep(0.2)
        self.buffered.append(value)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(len(self.buffered) - 1)
        return fut

    async def commit_transaction(self) -> None:
        self.committed_with = list(self.buffered)


def test_commit_after_send_waits_until_the_send_is_buffered() -> None:
    p = Producer.__new__(Producer)
    p._lt = _LoopThread("test-producer")
    p._buffering = set()
    p._tail = None
    fake = SlowBufferingProducer()
    p._p = fake  # type: ignore[assignment]
    try:
        f = p.send("t", b"one")
        p.commit_transaction(timeout=5)
        assert fake.committed_with == [b"one"]
        assert f.result(5) == 0
    finally:
        p._lt.stop()
