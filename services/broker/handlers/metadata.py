"""Metadata: brokers, controller, cluster id and topics from the metadata cache.

Any broker answers. An empty topic list means every topic; a requested topic the cache does
not know comes back with ``UNKNOWN_TOPIC_OR_PARTITION`` in its ``error_code``.
"""

from __future__ import annotations

from headwater.v1 import metadata_pb2
from services.broker.metadata_cache import MetadataCache


async def handle(
    cache: MetadataCache, req: metadata_pb2.MetadataRequest
) -> metadata_pb2.MetadataResponse:
    return cache.describe(req.topics)
