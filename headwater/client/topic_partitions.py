"""The partitions of a topic as the producer sees them (Kafka's ``waitOnMetadata``).

``cache`` maps a topic to its list of :class:`TopicPartition`; the producer's per-record paths
read it directly and come here only on a miss. The cache is emptied whenever a new metadata
view arrives (a topic may have grown). A topic missing from the metadata view is waited for
up to ``max_block_ms`` (:meth:`TopicPartitions.wait`, on the producer's loop); from another
thread (``AsyncProducer.produce``) that wait runs on the loop and the thread blocks for it
(:meth:`TopicPartitions.wait_from_any_thread`). A topic that does not exist raises
:class:`UnknownTopicOrPartitionError`; metadata that does not come in time raises
:class:`BufferExhaustedError`, as Kafka's producer does when ``max.block.ms`` runs out. A
topic's ``max.message.bytes`` override, when below the producer's ``batch_size``, bounds the
batches opened for it from then on (:meth:`Accumulator.limit_batches`).
"""

from __future__ import annotations

import asyncio

from headwater import errors
from headwater.client.accumulator import Accumulator
from headwater.client.errors import BufferExhaustedError
from headwater.client.metadata import ClusterView, Metadata, TopicInfo
from headwater.client.types import TopicPartition


class TopicPartitions:
    """Topic -> partitions for one producer (see module doc); made when the producer starts."""

    def __init__(
        self,
        cache: dict[str, list[TopicPartition]],
        metadata: Metadata,
        acc: Accumulator,
        max_block_ms: float,
    ) -> None:
        self.cache = cache
        self._metadata = metadata
        self._acc = acc
        self._max_block_ms = max_block_ms
        metadata.add_listener(lambda _v: cache.clear())

    async def wait(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions, waiting up to ``max_block_ms`` for its metadata (on the
        producer's loop)."""
        tps = self.cache.get(topic)
        if tps is not None:
            return tps
        info = self._metadata.view.topics.get(topic)
        if info is None:
            try:
                info = await self._metadata.wait_for_topic(topic, self._max_block_ms / 1000)
            except errors.UnknownTopicOrPartitionError:
                raise
            except errors.HeadwaterError as exc:
                raise BufferExhaustedError(f"no metadata for topic {topic!r}: {exc}") from exc
        return self._learn(topic, info, self._metadata.view)  # on the loop: current

    def wait_from_any_thread(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions from the metadata view, else waited for (another thread);
        on the loop a topic not in the view raises :class:`BufferExhaustedError` at once."""
        acc = self._acc
        view = self._metadata.view
        info = view.topics.get(topic)
        if info is not None:
            return self._learn(topic, info, view)
        loop = acc._loop
        if loop is None or acc.on_loop_thread():
            raise BufferExhaustedError(
                f"no metadata for topic {topic!r} yet: await partitions_for({topic!r}) first"
            )
        fut = asyncio.run_coroutine_threadsafe(self.wait(topic), loop)
        try:
            return fut.result(self._max_block_ms / 1000 + 1)
        except TimeoutError:
            fut.cancel()
            raise BufferExhaustedError(f"no metadata for topic {topic!r}") from None

    def _learn(self, topic: str, info: TopicInfo, view: ClusterView) -> list[TopicPartition]:
        """The topic's partitions in ``view`` (``info`` is its entry there), cached while
        ``view`` is still the current one; batches of the topic opened from now on keep
        within its ``max.message.bytes`` (a topic-level override in the metadata). A view
        replaced meanwhile (another thread read it just before the loop swapped in a new one
        and cleared the cache) is not cached: the next call learns the new one."""
        self._acc.limit_batches(topic, _max_message_bytes(info.configs))
        tps = [TopicPartition(topic, p) for p in range(len(info.partitions))]
        if self._metadata.view is view:
            self.cache[topic] = tps
        return tps


def _max_message_bytes(configs: dict[str, str]) -> int | None:
    """The topic's ``max.message.bytes`` override, None when absent or not a positive int
    (the broker validates topic configs; the producer only uses a sensible one)."""
    raw = configs.get("max.message.bytes")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 else None
