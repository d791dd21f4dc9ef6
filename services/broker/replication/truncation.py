"""Where a follower truncates its log before fetching from a (new) leader: KIP-101 / KIP-279.

Pure logic (no I/O). The follower asks the leader (OffsetForLeaderEpoch) for the end offset of
the follower's latest epoch ``E``; the leader answers ``(L, end)`` with ``L`` the largest epoch
<= ``E`` it has and ``end`` where ``L`` ends on the leader. Then, exactly as Kafka's
``AbstractFetcherThread.getOffsetTruncationState``:

* the follower also has epoch ``L``: truncate to ``min(end, follower LEO)``; done;
* the follower has no epoch ``L`` (its largest epoch below ``L`` is ``F < L``): truncate to
  where ``F`` ends on the follower (everything written in epochs the leader does not share
  goes) and ask again with the follower's new latest epoch (KIP-279's multi-round case);
* the leader knows no epoch at all (``L == -1``, ``end`` set): ``min(end, LEO)``.

An undefined answer (``end == -1``) gives no target: the follower retries later. It **never**
falls back to its own high watermark, whose truncation loses committed records (KIP-101).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    offset: int
    completed: bool


def truncation_target(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_for: Callable[[int], tuple[int, int]],
    follower_leo: int,
) -> Target | None:
    """The follower's truncation offset given the leader's answer (None: retry later)."""
    if leader_end_offset < 0:
        return None
    if leader_epoch < 0:
        return Target(min(leader_end_offset, follower_leo), True)
    epoch, end = follower_end_for(leader_epoch)
    if epoch < 0:
        return Target(min(leader_end_offset, follower_leo), True)
    if epoch != leader_epoch:
        return Target(min(end, follower_leo), False)
    return Target(min(leader_end_offset, follower_leo), True)
