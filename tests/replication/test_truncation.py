"""Where a follower truncates (KIP-101 / KIP-279), with real leader-epoch caches on both sides.

Each case writes the leader's and the follower's epoch histories as (epoch, start offset)
entries plus a log end offset, runs the OffsetForLeaderEpoch exchange round by round the way
the fetcher does, and checks the final truncation point and that it never depends on the
follower's high watermark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.broker.replication.truncation import Target, truncation_target
from services.broker.storage.leader_epoch import LeaderEpochCache

pytestmark = pytest.mark.fast


def _cache(tmp: Path, name: str, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    d = tmp / name
    d.mkdir()
    cache = LeaderEpochCache(d)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def _exchange(
    leader: LeaderEpochCache, leader_leo: int, follower: LeaderEpochCache, follower_leo: int
) -> tuple[int, int]:
    """Rounds of OffsetForLeaderEpoch until done; returns (offset, rounds)."""
    rounds = 0
    while True:
        rounds += 1
        asked = follower.latest_epoch
        l_epoch, l_end = leader.end_offset_for(asked, leader_leo)
        target = truncation_target(
            l_epoch,
            l_end,
            lambda e, leo=follower_leo: follower.end_offset_for(e, leo),
            follower_leo,
        )
        assert target is not None
        follower.truncate_from_end(target.offset)
        follower_leo = target.offset
        if target.completed:
            return target.offset, rounds
        assert rounds < 10


def test_kip101_follower_keeps_what_the_new_leader_has(tmp_path: Path) -> None:
    # Both wrote offsets 0..9 in epoch 0; the follower's HW was only 5 when it restarted.
    # Truncating to its HW (the pre-KIP-101 rule) would drop 5..9, committed on the leader.
    leader = _cache(tmp_path, "l", [(0, 0), (1, 10)])
    follower = _cache(tmp_path, "f", [(0, 0)])
    offset, rounds = _exchange(leader, 12, follower, 10)
    assert (offset, rounds) == (10, 1)


def test_kip101_uncommitted_tail_of_an_old_leader_is_removed(tmp_path: Path) -> None:
    # The old leader wrote 10..14 in epoch 1 that never reached the new leader (epoch 2 from 10).
    leader = _cache(tmp_path, "l", [(0, 0), (2, 10)])
    follower = _cache(tmp_path, "f", [(0, 0), (1, 10)])
    offset, _ = _exchange(leader, 20, follower, 15)
    assert offset == 10


def test_divergence_several_epochs_deep_resolved_where_an_epoch_is_shared(tmp_path: Path) -> None:
    # Leader: epoch 0 [0,5), epoch 3 [5,30). The follower led epochs 1 and 2 (offsets 5..11),
    # which the leader never saw. Asked for epoch 2, the leader answers (0, 5): the follower
    # has epoch 0 too, so it cuts at 5 in one round.
    leader = _cache(tmp_path, "l", [(0, 0), (3, 5)])
    follower = _cache(tmp_path, "f", [(0, 0), (1, 5), (2, 8)])
    assert _exchange(leader, 30, follower, 12) == (5, 1)
    assert follower.latest_epoch == 0


def test_kip279_epoch_only_the_leader_has_takes_a_second_round(tmp_path: Path) -> None:
    # Follower: epochs 0 [0,5), 1 [5,8), 3 [8,12). Leader: 0 [0,5), 2 [5,10), 4 [10,..).
    # Round 1, asked for 3: the leader's largest epoch <= 3 is 2, ending at 10. The follower
    # has no epoch 2; its largest below is 1, ending at 8 -> truncate to 8, not done.
    # Round 2, asked for 1: the leader's largest <= 1 is 0, ending at 5; the follower has
    # epoch 0 -> truncate to 5. Its epoch-1 records at 5..7 differ from the leader's epoch 2.
    leader = _cache(tmp_path, "l", [(0, 0), (2, 5), (4, 10)])
    follower = _cache(tmp_path, "f", [(0, 0), (1, 5), (3, 8)])
    first = truncation_target(
        *leader.end_offset_for(3, 25), lambda e: follower.end_offset_for(e, 12), 12
    )
    assert first == Target(8, False)
    assert _exchange(leader, 25, follower, 12) == (5, 2)


def test_undefined_answer_gives_no_target_and_never_the_high_watermark() -> None:
    assert truncation_target(-1, -1, lambda e: (e, 0), 50) is None
    # the leader has no epochs at all: its end offset bounds the follower
    assert truncation_target(-1, 7, lambda e: (-1, -1), 50) == Target(7, True)
