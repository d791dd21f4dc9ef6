"""The side-by-side report's pure logic (bench/side_by_side.py): ratios and target verdicts.

The measurements themselves are benchmarks (docs/benchmarks.md), never asserted here; this
checks that the table divides by the right Kafka row and judges each target the right way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "peers"))

import side_by_side  # noqa: E402
from common import WORKLOADS, Row, Workload, append_row, read_rows, selected  # noqa: E402


def _row(system: str, client: str, w: Workload, mb_s: float, p99: float | None = None) -> Row:
    records = 1_000_000
    seconds = records * w.record_size / 1e6 / mb_s
    lat = {"p50": 1.0, "p99": p99, "p999": p99 + 1, "max": p99 + 2} if p99 is not None else None
    return Row.of(system, client, w, records, seconds, latency_ms=lat)


def test_every_consume_row_reads_a_topic_produced_before_it() -> None:
    produced: set[tuple[int, int, int]] = set()
    for w in WORKLOADS:
        if w.kind == "produce-max" and w.acks == "1":
            produced.add((w.partitions, w.record_size, w.rf))
        if w.kind == "consume":
            assert (w.partitions, w.record_size, w.rf) in produced, w.key


def test_only_selects_by_any_part_of_a_comma_separated_list() -> None:
    keys = [w.key for w in WORKLOADS]
    both = [k for k in keys if selected("produce-max,consume", k)]
    assert both and all(k.startswith(("produce-max", "consume")) for k in both)
    assert any(k.startswith("consume") for k in both)
    assert not any(k.startswith(("e2e", "produce-fixed")) for k in both)
    assert [k for k in keys if selected("", k)] == keys
    assert [k for k in keys if selected("consume", k)] == [k for k in keys if "consume" in k]


def test_targets_compare_headwater_with_kafkas_fastest_client(
    tmp_path: Path,
) -> None:
    p1k = Workload("produce-max", 1, 1024)
    p100 = Workload("produce-max", 1, 100)
    c1k = Workload("consume", 1, 1024)
    e2e = Workload("e2e", 1, 1024, rate_mb_s=10)
    rows = [
        _row("kafka", "java perf-test", p1k, 400.0),
        _row("kafka", "python confluent-kafka", p1k, 100.0),
        _row("headwater", "headwater bench", p1k, 300.0),
        _row("kafka", "java perf-test", p100, 100.0),
        _row("headwater", "headwater bench", p100, 60.0),
        _row("kafka", "java perf-test", c1k, 500.0),
        _row("kafka", "python confluent-kafka", c1k, 650.0),  # the faster Kafka client
        _row("headwater", "headwater bench", c1k, 600.0),
        # the blocking Consumer iterated per record (issue 17): 520 < 650 of confluent-kafka
        Row.of("headwater", "headwater bench", c1k, 520_000, 1.0, extra={"mode": "records"}),
        _row("headwater", "python headwater", e2e, 10.0, p99=12.5),
    ]
    path = tmp_path / "rows.jsonl"
    for r in rows:
        append_row(path, r)
    back = read_rows(path)
    assert back == rows
    verdicts = {what: met for what, _, met in side_by_side.targets(back)}
    assert verdicts == {
        "produce 1 KiB, acks=1, one producer: Headwater ≥ Kafka MB/s": False,  # 300 < 400
        "produce 100 B, acks=1, one producer: Headwater ≥ 50% of Kafka MB/s": True,  # 60 ≥ 50
        "consumer 1 KiB: Headwater ≥ Kafka MB/s": False,  # 600 < 650 (librdkafka)
        "consumer 100 B: Headwater ≥ Kafka MB/s": None,  # not measured
        "p99 end-to-end latency ≤ 10 ms at 10 MB/s (1 KiB)": False,
        # the per-record targets (issue 17) have no rows here: not measured
        "produce-max p=1 1024B acks=1 rf=1: Producer.send() ≥ confluent-kafka produce() "
        "records/s": None,
        "produce-max p=1 1024B acks=1 rf=1: produce() ≥ confluent-kafka produce() records/s": None,
        "consume p=1 1024B acks=1 rf=1: blocking Consumer per record ≥ confluent-kafka consumer "
        "records/s": False,  # 520,000 < 650,000 records/s
    }
    text = side_by_side.report(back, {"page_cache_write_growing_mb_s": 1000.0}, "test machine")
    line = next(
        x for x in text.splitlines() if "| headwater | headwater bench" in x and "1024B" in x
    )
    assert "0.75x" in line and "30%" in line  # 300/400 of Kafka, 300/1000 of the page cache


def test_interleave_units_keep_a_consume_row_with_the_rows_that_produce_its_topic() -> None:
    units = side_by_side.interleave_units(WORKLOADS)
    assert [w for unit in units for w in unit] == list(WORKLOADS)  # every row once, in order
    for unit in units:
        if unit[0].kind in ("produce-max", "consume"):
            shapes = {(w.partitions, w.record_size, w.rf) for w in unit}
            assert len(shapes) == 1, [w.key for w in unit]
            kinds = [w.kind for w in unit]
            assert kinds[0] == "produce-max"
            if "consume" in kinds:
                assert kinds.index("consume") > kinds.index("produce-max")
        else:
            assert len(unit) == 1
    p1_100 = next(u for u in units if u[0].key == "produce-max p=1 100B acks=1 rf=1")
    assert [w.key for w in p1_100] == [
        "produce-max p=1 100B acks=1 rf=1",
        "produce-max p=1 100B acks=all rf=1",
        "consume p=1 100B acks=1 rf=1",
    ]
    # an exact key selects only its own workload, so a unit's --only runs exactly the unit
    for unit in units:
        only = ",".join(w.key for w in unit)
        assert [w for w in WORKLOADS if selected(only, w.key)] == unit


def test_interleaved_steps_alternate_which_system_goes_first() -> None:
    units = side_by_side.interleave_units(
        [w for w in WORKLOADS if w.kind in ("produce-max", "consume") and w.rf == 1]
    )
    steps = side_by_side.interleaved_steps(units, ["headwater", "kafka"])
    assert len(steps) == 2 * len(units) == 8
    assert {r for r, _, _, _ in steps} == {0}
    assert [(i, s) for _, i, s, _ in steps] == [
        (0, "headwater"),
        (0, "kafka"),
        (1, "kafka"),
        (1, "headwater"),
        (2, "headwater"),
        (2, "kafka"),
        (3, "kafka"),
        (3, "headwater"),
    ]
    assert all(unit is units[i] for _, i, _, unit in steps)


def test_rounds_repeat_the_sequence_with_the_first_system_flipped() -> None:
    units = side_by_side.interleave_units(
        [w for w in WORKLOADS if w.kind in ("produce-max", "consume") and w.rf == 1]
    )
    steps = side_by_side.interleaved_steps(units, ["headwater", "kafka"], rounds=3)
    assert len(steps) == 3 * 2 * len(units)
    firsts = [(r, i, s) for r, i, s, _ in steps[::2]]
    assert firsts[: len(units)] == [(0, i, ("headwater", "kafka")[i % 2]) for i in range(4)]
    assert firsts[len(units) : 2 * len(units)] == [
        (1, i, ("kafka", "headwater")[i % 2]) for i in range(4)
    ]
    assert [r for r, _, _, _ in steps] == sorted(r for r, _, _, _ in steps)


def test_rows_of_several_rounds_are_tagged_and_reduced_to_their_medians(tmp_path: Path) -> None:
    w = Workload("produce-max", 1, 1024)
    path = tmp_path / "rows.jsonl"
    untagged = _row("headwater", "headwater bench", Workload("e2e", 1, 1024, rate_mb_s=10), 10.0)
    append_row(path, untagged)
    side_by_side.tag_rows(path, 1, 0)  # nothing from line 1 on yet
    assert read_rows(path) == [untagged]
    for round_, (hw, ck) in enumerate(((300.0, 350.0), (500.0, 200.0), (400.0, 390.0))):
        first = len(read_rows(path))
        append_row(path, _row("headwater", "headwater bench", w, hw))
        append_row(path, _row("kafka", "python confluent-kafka", w, ck))
        side_by_side.tag_rows(path, first, round_)
    rows = read_rows(path)
    assert [r.extra.get("round") for r in rows] == [None, 0, 0, 1, 1, 2, 2]
    medians = side_by_side.median_rows(rows)
    assert medians[0] == untagged  # untagged rows pass through, in place
    hw_row, ck_row = medians[1], medians[2]
    assert (hw_row.system, ck_row.system) == ("headwater", "kafka")
    assert hw_row.mb_per_sec == pytest.approx(400.0) and ck_row.mb_per_sec == pytest.approx(350.0)
    assert [round(x) for x in hw_row.extra["rounds_records_per_sec"]] == [
        round(300e6 / 1024),
        round(500e6 / 1024),
        round(400e6 / 1024),
    ]
    # an even count keeps the lower middle row
    two = side_by_side.median_rows(rows[1:5])
    assert [r.mb_per_sec for r in two] == [pytest.approx(300.0), pytest.approx(200.0)]
    text = side_by_side.report(rows, {}, "test machine")
    assert "Medians of 3 rounds" in text
    line = next(x for x in text.splitlines() if "| headwater | headwater bench" in x)
    assert "1.14x" in line  # 400 / 350: the medians' ratio
    assert f"({300e6 / 1024:,.0f} to {500e6 / 1024:,.0f})" in line


def test_warm_page_cache_writes_the_asked_mib_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import common

    monkeypatch.setenv(common.WARM_MIB_ENV, "3")
    assert common.warm_page_cache(tmp_path) > 0
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(common.WARM_MIB_ENV, "0")
    assert common.warm_page_cache(tmp_path) == 0.0
    assert list(tmp_path.iterdir()) == []
