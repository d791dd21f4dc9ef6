"""Accumulators and senders with the small test settings the client unit tests share."""

from __future__ import annotations

from typing import Any

from headwater.batch import Compression
from headwater.client.accumulator import Accumulator
from headwater.client.sender import Sender
from headwater.v1 import broker_pb2


def accumulator(**kw: Any) -> Accumulator:
    """An uncompressed accumulator of 4 KiB batches, 64 KiB of buffer, a 50 ms block and a
    60 s delivery timeout (linger 10 ms); ``kw`` overrides any of them (and sets ``clock``)."""
    cfg: dict[str, Any] = dict(
        batch_size=4096,
        linger_ms=10,
        buffer_memory=64 * 1024,
        max_block_ms=50,
        delivery_timeout_ms=60_000,
        compression=Compression.NONE,
    )
    cfg.update(kw)
    return Accumulator(**cfg)


def sender(acc: Accumulator, metadata: Any, pool: Any, **kw: Any) -> Sender:
    """A sender with acks=all, 5 in flight, a 1 s request timeout, 10 retries 1 ms apart and
    1 MiB requests; ``kw`` overrides any of them (``producing`` for idempotence)."""
    cfg: dict[str, Any] = dict(
        acks=broker_pb2.ACKS_ALL,
        max_in_flight=5,
        request_timeout_ms=1000,
        retries=10,
        retry_backoff_ms=1,
        max_request_size=1 << 20,
        client_id="t",
    )
    cfg.update(kw)
    return Sender(acc, metadata, pool, **cfg)
