"""The checker on hand-made histories: each anomaly is detected, and a clean history is clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault.harness.checker import BatchInfo, Read, check, compare_replicas
from tests.fault.harness.history import History, from_tuples, load

pytestmark = pytest.mark.fast


def reads(*rows: tuple[int, int, str], source: str = "consumer") -> list[Read]:
    return [Read(source, p, o, v) for p, o, v in rows]


CLEAN = from_tuples(
    [
        (0, "invoke", "w-0", 0, None),
        (0, "ok", "w-0", 0, 0),
        (1, "invoke", "w-1", 0, None),
        (0, "invoke", "w-2", 0, None),
        (1, "info", "w-1", 0, None, "REQUEST_TIMED_OUT"),
        (0, "ok", "w-2", 0, 2),
        (1, "invoke", "w-3", 1, None),
        (1, "fail", "w-3", 1, None, "NOT_ENOUGH_REPLICAS"),
    ]
)


def test_clean_history_is_valid() -> None:
    r = check(CLEAN, reads((0, 0, "w-0"), (0, 1, "w-1"), (0, 2, "w-2")))
    print(r.summary())
    assert r.valid
    assert r.summary().splitlines()[0] == "acknowledged records lost: 0 of 2"
    assert (r.attempted, r.acknowledged, r.failed, r.unknown, r.unknown_present) == (4, 2, 1, 1, 1)


def test_unknown_write_may_be_absent() -> None:
    r = check(CLEAN, reads((0, 0, "w-0"), (0, 2, "w-2")))
    assert r.valid and r.unknown_present == 0


def test_lost_acknowledged_write() -> None:
    r = check(CLEAN, reads((0, 0, "w-0"), (0, 1, "w-1")))
    assert r.lost == ["w-2"] and not r.valid
    assert r.summary().splitlines()[0] == "acknowledged records lost: 1 of 2"


def test_unexpected_and_failed_present() -> None:
    r = check(CLEAN, reads((0, 0, "w-0"), (0, 2, "w-2"), (0, 3, "x-9"), (1, 0, "w-3")))
    assert r.unexpected == ["x-9"]
    assert r.failed_present == ["w-3"]
    assert not r.valid


def test_duplicated_value() -> None:
    r = check(CLEAN, reads((0, 0, "w-0"), (0, 2, "w-2"), (0, 3, "w-0")))
    assert r.duplicated == {"w-0": [(0, 0), (0, 3)]}
    assert not r.valid


def test_reordered_read_offsets() -> None:
    # process 0 awaited w-0 before w-2, yet the log holds w-2 first
    r = check(CLEAN, reads((0, 0, "w-2"), (0, 1, "w-0")))
    kinds = {(x.view, x.first, x.second) for x in r.reordered}
    assert ("read", "w-0", "w-2") in kinds
    assert not r.valid


def test_reordered_acknowledged_offsets() -> None:
    h = from_tuples(
        [
            (0, "invoke", "w-0", 0, None),
            (0, "ok", "w-0", 0, 5),
            (0, "invoke", "w-1", 0, None),
            (0, "ok", "w-1", 0, 4),
        ]
    )
    r = check(h, [])
    assert [(x.view, x.first_offset, x.second_offset) for x in r.reordered] == [("ack", 5, 4)]
    assert r.lost == ["w-0", "w-1"]


def test_inconsistent_offsets_across_readers_and_acks() -> None:
    r = check(
        CLEAN,
        reads((0, 0, "w-0"), (0, 2, "w-2"))
        + reads((0, 0, "w-1"), source="broker-2")
        + reads((0, 0, "w-0"), (0, 2, "w-2"), source="broker-3"),
    )
    assert r.inconsistent == {(0, 0): ["w-0", "w-1"]}
    # w-2 was acknowledged at offset 2: a read finding another value there is inconsistent
    r2 = check(CLEAN, reads((0, 0, "w-0"), (0, 1, "w-2"), (0, 2, "w-1")))
    assert r2.inconsistent == {(0, 2): ["w-1", "w-2"]}


def test_divergent_replicas_below_hw_only() -> None:
    a = [BatchInfo(0, 9, 0, 111, 200), BatchInfo(10, 19, 0, 222, 200), BatchInfo(20, 29, 1, 3, 8)]
    b = [BatchInfo(0, 9, 0, 111, 200), BatchInfo(10, 19, 0, 222, 200), BatchInfo(20, 24, 2, 4, 8)]
    c = [BatchInfo(0, 9, 0, 111, 200)]
    div, lag = compare_replicas(0, {1: a, 2: b, 3: c}, hw=20)
    assert div == [] and lag == ["p0@broker-3 ends at 10 < hw 20"]
    div, _ = compare_replicas(0, {1: a, 2: b}, hw=30)
    assert len(div) == 1 and div[0].base_offset == 20
    d = [BatchInfo(0, 9, 1, 999, 200)]  # same offsets, other epoch and CRC: KIP-101 divergence
    div, _ = compare_replicas(0, {1: a, 4: d}, hw=10)
    assert [(x.replica_a, x.replica_b, x.base_offset) for x in div] == [(1, 4, 0)]
    r = check(CLEAN, [], replica_logs={0: {1: a, 4: d}}, high_watermarks={0: 10})
    assert len(r.divergent) == 1 and "divergent replicas: 1" in r.summary()


def test_open_invocation_counts_as_unknown(tmp_path: Path) -> None:
    h = History()
    inv = h.invoke(0, "produce", "w-0", 0)
    h.invoke(1, "produce", "w-1", 0)  # never completes (the run ended with it in flight)
    h.complete(inv, "ok", offset=0)
    h.nemesis("kill", "broker-1")
    path = tmp_path / "history.jsonl"
    h.dump(path)
    ops = load(path)
    assert [o.type for o in ops] == ["invoke", "invoke", "ok", "info"]
    r = check(ops, reads((0, 0, "w-0")))
    assert r.valid and (r.acknowledged, r.unknown) == (1, 1)
