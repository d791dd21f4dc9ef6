"""The producer's ``batch_size`` default: 4 MiB, or the buffer / the request size when the
caller set either smaller (so a configuration valid before the default grew stays valid)."""

from __future__ import annotations

from typing import Any

import pytest

from headwater import errors
from headwater.client.producer_config import DEFAULT_BATCH_SIZE, ProducerConfig

pytestmark = pytest.mark.fast

MiB = 1024 * 1024


def _config(**kw: Any) -> ProducerConfig:
    args: dict[str, Any] = dict(
        acks="all",
        batch_size=None,
        linger_ms=5,
        buffer_memory=32 * MiB,
        max_block_ms=60_000,
        compression_type="none",
        retries=10,
        retry_backoff_ms=100,
        delivery_timeout_ms=120_000,
        max_in_flight=5,
        request_timeout_ms=30_000,
        max_request_size=8 * MiB,
        client_id="t",
        partitioner=None,
        metadata_max_age_ms=300_000,
        enable_idempotence=None,
        transactional_id=None,
        transaction_timeout_ms=60_000,
    )
    args.update(kw)
    return ProducerConfig(**args)


def test_the_default_batch_is_4_mib() -> None:
    assert 4 * MiB == DEFAULT_BATCH_SIZE
    assert _config().batch_size == 4 * MiB


@pytest.mark.parametrize(
    ("buffer_memory", "max_request_size", "expected"),
    [(2 * MiB, 8 * MiB, 2 * MiB), (32 * MiB, MiB, MiB), (MiB // 2, MiB, MiB // 2)],
)
def test_the_default_fits_a_smaller_buffer_or_request(
    buffer_memory: int, max_request_size: int, expected: int
) -> None:
    c = _config(buffer_memory=buffer_memory, max_request_size=max_request_size)
    assert c.batch_size == expected


def test_a_given_batch_size_is_kept_and_still_checked() -> None:
    assert _config(batch_size=64 * 1024).batch_size == 64 * 1024
    with pytest.raises(errors.InvalidConfigError):
        _config(batch_size=4 * MiB, buffer_memory=2 * MiB)
