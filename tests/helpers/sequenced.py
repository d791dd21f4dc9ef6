"""Stand-ins for the idempotent producer's unit tests: a batch as the Sequencer sees it, and
the metadata a Sender asks (one partition leader, broker 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.client.types import TopicPartition


@dataclass(eq=False)
class Item:
    """What :class:`headwater.client.idempotence.Sequenced` asks of a batch."""

    tp: TopicPartition
    count: int
    base_seq: int = -1
    restamp: bool = False


class FakeView:
    """Every partition led by broker 0; the partitions in ``unreplicated`` have no followers."""

    brokers: dict[int, Any] = {}

    def __init__(self) -> None:
        self.unreplicated: set[TopicPartition] = set()

    def leader(self, _tp: TopicPartition) -> int:
        return 0

    def replicated(self, tp: TopicPartition) -> bool:
        return tp not in self.unreplicated

    def address(self, _broker: int) -> str:
        return "fake:1"


class FakeMetadata:
    def __init__(self) -> None:
        self.view = FakeView()

    def add_listener(self, _fn: Any) -> None:
        pass

    def request_update(self) -> None:
        pass

    def maybe_refresh(self) -> None:
        pass
