"""What a request handler returns: records to append, a response, replies to parked requests.

Handlers are pure functions ``(table, request, ctx) -> Outcome``. The runtime
(log_runtime.py) appends ``records`` to the owned offsets-topic partition (acks=all), waits
until its tail reader has read them back below the high watermark and applied them with
``GroupTable.apply``, and only then sends ``response`` (or, when ``wait`` is set, parks the
request under that key) and delivers ``replies`` to requests parked earlier (JoinGroup and
SyncGroup are long polls, and so is EndTxn). Parked keys: :class:`WaitKey`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.coordinator import records as rec


class Wait(enum.Enum):
    """What a parked request waits for."""

    JOIN = "JoinGroup"  # the join phase of its group's rebalance to complete
    SYNC = "SyncGroup"  # the leader's assignment
    END_TXN = "EndTxn"  # its transaction's markers to be written


@dataclass(frozen=True)
class WaitKey:
    """The key of a parked request: (what it waits for, group or transactional id, member)."""

    wait: Wait
    key: str
    member_id: str = ""


@dataclass
class Ctx:
    """The handler's view of the world: the time, the writer's epoch, an id generator."""

    now_ms: int
    epoch: int
    new_member_id: Callable[[str], str]
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


@dataclass
class Outcome:
    records: list[rec.Record] = field(default_factory=list)
    response: Any = None
    wait: WaitKey | None = None
    replies: list[tuple[WaitKey, Any]] = field(default_factory=list)
    #: (group_id, duration_ms) for every rebalance completed by this step (metrics)
    rebalances: list[tuple[str, int]] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.records.extend(other.records)
        self.replies.extend(other.replies)
        self.rebalances.extend(other.rebalances)
