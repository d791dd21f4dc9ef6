"""Partitioners: the cross-language CRC-32C rule, Kafka's murmur2, sticky null keys."""

from __future__ import annotations

import random

import pytest

from headwater.client.partitioner import (
    DefaultPartitioner,
    Murmur2Partitioner,
    crc32c,
    crc32c_partition,
    murmur2,
    murmur2_partition,
    resolve,
)
from headwater.errors import InvalidConfigError

pytestmark = pytest.mark.fast

# Vectors other languages check against: unsigned CRC-32C (Castagnoli) of the key bytes.
CRC32C_VECTORS = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),  # the standard CRC-32C check value
    (b"a", 0xC1D04330),
    (b"hello", 0x9A71BB4C),
    (b"\x00" * 32, 0x8A9136AA),  # RFC 3720 B.4: 32 bytes of zeros
    (b"\xff" * 32, 0x62A8AB43),  # RFC 3720 B.4: 32 bytes of ones
]


@pytest.mark.parametrize(("key", "expected"), CRC32C_VECTORS)
def test_crc32c_vectors(key: bytes, expected: int) -> None:
    assert crc32c(key) == expected


def test_crc32c_partition_is_unsigned_mod() -> None:
    # 0xE3069283 = 3808858755 would be negative as a signed int; the rule uses unsigned
    assert crc32c_partition(b"123456789", 7) == 3808858755 % 7
    assert crc32c_partition(b"123456789", 1000) == 755
    for n in (1, 3, 12):
        assert crc32c_partition(b"hello", n) == 0x9A71BB4C % n


# From Apache Kafka's UtilsTest.testMurmur2 (signed 32-bit results).
MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), MURMUR2_VECTORS)
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert murmur2_partition(key, 10) == (expected & 0x7FFFFFFF) % 10


def test_default_partitioner_keys_and_sticky_null_keys() -> None:
    p = DefaultPartitioner(random.Random(1))
    assert p(b"hello", 5, "t") == 0x9A71BB4C % 5
    first = p(None, 5, "t")
    assert all(p(None, 5, "t") == first for _ in range(100))  # sticks until a batch seals
    p.on_batch_sealed("t", first, 5)
    second = p(None, 5, "t")
    assert second != first
    assert all(p(None, 5, "t") == second for _ in range(100))
    # sealing some other partition does not move the sticky one
    p.on_batch_sealed("t", (second + 1) % 5, 5)
    assert p(None, 5, "t") == second


def test_sticky_spreads_over_all_partitions() -> None:
    p = DefaultPartitioner(random.Random(7))
    seen = set()
    for _ in range(200):
        cur = p(None, 4, "t")
        seen.add(cur)
        p.on_batch_sealed("t", cur, 4)
    assert seen == {0, 1, 2, 3}


def test_sticky_single_partition_and_per_topic() -> None:
    p = DefaultPartitioner()
    assert p(None, 1, "a") == 0
    p.on_batch_sealed("a", 0, 1)
    assert p(None, 1, "a") == 0
    assert 0 <= p(None, 3, "b") < 3


def test_murmur2_partitioner_and_resolve() -> None:
    assert isinstance(resolve(None), DefaultPartitioner)
    assert isinstance(resolve("murmur2"), Murmur2Partitioner)
    assert Murmur2Partitioner()(b"foobar", 10, "t") == (-790332482 & 0x7FFFFFFF) % 10

    def custom(key: bytes | None, n: int, topic: str) -> int:
        return n - 1

    assert resolve(custom) is custom
    with pytest.raises(InvalidConfigError):
        resolve("nope")


def test_the_vectors_every_client_shares() -> None:
    """clients/partitioner-vectors.json, which the Go client's tests read too
    (clients/go/partitioner_test.go): Python's partitioner and the broker's records path
    (ProduceRecords with partition -1) place every key where the file says."""
    import json
    from pathlib import Path

    from services.broker.handlers.produce_records import default_partition

    doc = json.loads((Path(__file__).parents[2] / "clients/partitioner-vectors.json").read_text())
    assert len(doc["crc32c"]) >= 10 and len(doc["partition"]) >= 100
    assert any(v["crc32c"] >= 1 << 31 for v in doc["crc32c"])  # the unsigned reading matters
    for v in doc["crc32c"]:
        assert crc32c(bytes.fromhex(v["key_hex"])) == v["crc32c"], v
    for v in doc["partition"]:
        key, n = bytes.fromhex(v["key_hex"]), v["partitions"]
        assert crc32c_partition(key, n) == v["partition"], v
        assert DefaultPartitioner()(key, n, "t") == v["partition"], v
        assert default_partition(key, n) == v["partition"], v
