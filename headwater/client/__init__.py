"""The Headwater Python client: producer, consumer (manual assignment or consumer groups)
and admin client.

asyncio API: :class:`AsyncProducer`, :class:`AsyncConsumer`, :class:`AsyncAdminClient`.
Blocking API (a private loop in a thread): :class:`Producer`, :class:`Consumer`,
:class:`AdminClient`. Errors are the typed exceptions of :mod:`headwater.errors` plus the
client-side ones in :mod:`headwater.client.errors`.

Names are imported lazily (PEP 562 module ``__getattr__``): ``import headwater.client`` loads
none of the submodules; ``headwater.client.AdminClient`` (or ``from headwater.client import
AdminClient``) imports only the module defining it and what that module needs, so a process
that only needs the admin client (Spark's stream-reader runner, the CLI) does not pay for the
producer, consumer and group modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.client.admin import (
        AsyncAdminClient,
        BrokerDescription,
        ClusterDescription,
        NewTopic,
        PartitionDescription,
        TopicDescription,
    )
    from headwater.client.admin_configs import ConfigEntry, ConfigResource
    from headwater.client.admin_groups import GroupDescription, ListedGroup, PartitionLag
    from headwater.client.consumer import AsyncConsumer
    from headwater.client.errors import (
        BufferExhaustedError,
        ConsumerClosedError,
        DeliveryTimeoutError,
        IllegalStateError,
        NoOffsetForPartitionError,
        ProducerClosedError,
    )
    from headwater.client.fetched import FetchedBatch
    from headwater.client.group import RebalanceListener
    from headwater.client.partitioner import (
        DefaultPartitioner,
        Murmur2Partitioner,
        crc32c_partition,
        murmur2,
        murmur2_partition,
    )
    from headwater.client.producer import AsyncProducer
    from headwater.client.sync import AdminClient, Consumer, Producer
    from headwater.client.types import (
        ConsumerRecord,
        GroupMetadata,
        OffsetAndTimestamp,
        PartitionRange,
        RecordMetadata,
        TopicPartition,
    )

_EXPORTS: dict[str, str] = {
    "AsyncAdminClient": "headwater.client.admin",
    "BrokerDescription": "headwater.client.admin",
    "ClusterDescription": "headwater.client.admin",
    "NewTopic": "headwater.client.admin",
    "PartitionDescription": "headwater.client.admin",
    "TopicDescription": "headwater.client.admin",
    "ConfigEntry": "headwater.client.admin_configs",
    "ConfigResource": "headwater.client.admin_configs",
    "GroupDescription": "headwater.client.admin_groups",
    "ListedGroup": "headwater.client.admin_groups",
    "PartitionLag": "headwater.client.admin_groups",
    "AsyncConsumer": "headwater.client.consumer",
    "BufferExhaustedError": "headwater.client.errors",
    "ConsumerClosedError": "headwater.client.errors",
    "DeliveryTimeoutError": "headwater.client.errors",
    "IllegalStateError": "headwater.client.errors",
    "NoOffsetForPartitionError": "headwater.client.errors",
    "ProducerClosedError": "headwater.client.errors",
    "FetchedBatch": "headwater.client.fetched",
    "RebalanceListener": "headwater.client.group",
    "DefaultPartitioner": "headwater.client.partitioner",
    "Murmur2Partitioner": "headwater.client.partitioner",
    "crc32c_partition": "headwater.client.partitioner",
    "murmur2": "headwater.client.partitioner",
    "murmur2_partition": "headwater.client.partitioner",
    "AsyncProducer": "headwater.client.producer",
    "AdminClient": "headwater.client.sync",
    "Consumer": "headwater.client.sync",
    "Producer": "headwater.client.sync",
    "ConsumerRecord": "headwater.client.types",
    "GroupMetadata": "headwater.client.types",
    "OffsetAndTimestamp": "headwater.client.types",
    "PartitionRange": "headwater.client.types",
    "RecordMetadata": "headwater.client.types",
    "TopicPartition": "headwater.client.types",
}


def __getattr__(name: str) -> Any:
    """Import the public name's module on first use and cache the name in this package."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "AdminClient",
    "AsyncAdminClient",
    "AsyncConsumer",
    "AsyncProducer",
    "BrokerDescription",
    "BufferExhaustedError",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerRecord",
    "DefaultPartitioner",
    "DeliveryTimeoutError",
    "FetchedBatch",
    "GroupDescription",
    "GroupMetadata",
    "IllegalStateError",
    "ListedGroup",
    "Murmur2Partitioner",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PartitionDescription",
    "PartitionLag",
    "PartitionRange",
    "Producer",
    "ProducerClosedError",
    "RebalanceListener",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "crc32c_partition",
    "murmur2",
    "murmur2_partition",
]
