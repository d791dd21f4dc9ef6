"""Partitioners: which partition a record goes to.

The cross-language rule (documented in docs/architecture.md, used by every Headwater client
and by the broker's records path)::

    partition = crc32c(key_bytes) mod partition_count

where ``crc32c`` is the CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final
xor 0xFFFFFFFF) of the key's bytes, taken as an *unsigned* 32-bit integer. Check value:
``crc32c(b"123456789") == 0xE3069283``. Records with a null key are spread with *sticky*
partitioning: they stick to one partition until the batch being filled for it is sealed, then
switch to another one (chosen at random among the others), so null-key traffic forms few, full
batches instead of many small ones.

:func:`murmur2_partition` reproduces Apache Kafka's default for keyed records
(``toPositive(murmur2(key)) % n``) for users migrating keyed data from Kafka.

A custom partitioner is any callable ``(key, partition_count, topic) -> int``; it is called
for every record sent without an explicit partition, null keys included. Partitioners are
called on the producer's event loop only (no locking).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import crc32c as _crc32c

#: The partitioner signature: (key or None, partition count, topic) -> partition.
Partitioner = Callable[[bytes | None, int, str], int]


def crc32c(data: bytes) -> int:
    """Unsigned CRC-32C of ``data``."""
    return int(_crc32c.crc32c(data))


def crc32c_partition(key: bytes, partition_count: int) -> int:
    """The cross-language key rule: unsigned CRC-32C of the key bytes mod the partition count."""
    return int(_crc32c.crc32c(key)) % partition_count


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, as a *signed* int."""
    m = 0x5BD1E995
    r = 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_partition(key: bytes, partition_count: int) -> int:
    """Kafka's keyed rule: ``(murmur2(key) & 0x7fffffff) % partition_count``."""
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


class StickyPartitioner:
    """Base of the built-in partitioners: sticky placement of null keys.

    ``on_batch_sealed(topic, partition, partition_count)`` is called by the accumulator when
    the batch being filled for ``partition`` is sealed; if that partition is the topic's
    sticky one, the next null-key record goes elsewhere.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        #: the sticky partition of each topic (read by the producer's fast path)
        self.current: dict[str, int] = {}
        self._rng = rng or random.Random()

    def sticky_partition(self, topic: str, partition_count: int) -> int:
        p = self.current.get(topic)
        if p is None or p >= partition_count:
            p = self._rng.randrange(partition_count)
            self.current[topic] = p
        return p

    def on_batch_sealed(self, topic: str, partition: int, partition_count: int) -> None:
        current = self.current.get(topic)
        if current is None or current != partition:
            return
        if partition_count <= 1:
            self.current[topic] = 0
            return
        nxt = self._rng.randrange(partition_count - 1)
        self.current[topic] = nxt if nxt < current else nxt + 1

    def keyed(self, key: bytes, partition_count: int) -> int:
        raise NotImplementedError

    def __call__(self, key: bytes | None, partition_count: int, topic: str) -> int:
        if key is None:
            return self.sticky_partition(topic, partition_count)
        return self.keyed(key, partition_count)


class DefaultPartitioner(StickyPartitioner):
    """CRC-32C of the key mod partitions; sticky for null keys (the cross-language default)."""

    def keyed(self, key: bytes, partition_count: int) -> int:
        return int(_crc32c.crc32c(key)) % partition_count


class Murmur2Partitioner(StickyPartitioner):
    """Kafka-compatible keyed placement (murmur2); sticky for null keys."""

    def keyed(self, key: bytes, partition_count: int) -> int:
        return murmur2_partition(key, partition_count)


def resolve(partitioner: str | Partitioner | None) -> Partitioner:
    """``None``/``"default"``/``"crc32c"``, ``"murmur2"``, or a callable used as is."""
    if partitioner is None or partitioner in ("default", "crc32c"):
        return DefaultPartitioner()
    if partitioner == "murmur2":
        return Murmur2Partitioner()
    if callable(partitioner):
        return partitioner
    from headwater.errors import InvalidConfigError

    raise InvalidConfigError(f"unknown partitioner {partitioner!r} (default, murmur2, callable)")
