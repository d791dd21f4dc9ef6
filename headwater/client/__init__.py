"""The Headwater Python client: producer, consumer (manual assignment or consumer groups)
and admin client.

asyncio API: :class:`AsyncProducer`, :class:`AsyncConsumer`, :class:`AsyncAdminClient`.
Blocking API (a private loop in a thread): :class:`Producer`, :class:`Consumer`,
:class:`AdminClient`. Errors are the typed exceptions of :mod:`headwater.errors` plus the
client-side ones in :mod:`headwater.client.errors`.
"""

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
