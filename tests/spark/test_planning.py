"""Pure logic of the Spark source: option parsing, range splitting and grouping, rate limiting,
offset JSON."""

from __future__ import annotations

import itertools

import pytest
from headwater_spark.options import (
    DEFAULT_MIN_RECORDS_PER_TASK,
    parse_sink_options,
    parse_source_options,
)
from headwater_spark.partition import plan
from headwater_spark.planning import (
    OffsetRange,
    coalesce_ranges,
    from_json,
    ranges_between,
    rate_limit,
    split_ranges,
    to_json,
)

from headwater.client.types import TopicPartition
from headwater.errors import InvalidConfigError

pytestmark = pytest.mark.fast

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_options_parse_like_spark_kafka() -> None:
    o = parse_source_options(
        {
            "Kafka.Bootstrap.Servers": "h:1",
            "subscribe": "a, b",
            "startingOffsets": '{"a": {"0": -2, "1": 7}}',
            "endingTimestamp": "1000",
            "minPartitions": "4",
            "includeHeaders": "TRUE",
        },
        streaming=False,
    )
    assert o.bootstrap == "h:1" and o.subscribe == ("a", "b")
    assert o.starting == {A0: -2, A1: 7} and o.ending == "latest" and o.ending_ts == 1000
    assert o.min_partitions == 4 and o.include_headers and o.fail_on_data_loss
    s = parse_source_options(
        {"bootstrap.servers": "h:1", "assign": '{"a": [0, 1]}'}, streaming=True
    )
    assert s.bootstrap == "h:1" and s.assign == (A0, A1) and s.starting == "latest"


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "bootstrap"),
        ({"bootstrap.servers": "h:1"}, False, "exactly one"),
        ({"bootstrap.servers": "h:1", "subscribe": "a", "assign": "{}"}, False, "exactly one"),
        (
            {"bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "latest"},
            False,
            "batch",
        ),
        ({"bootstrap.servers": "h:1", "subscribe": "a", "endingOffsets": "latest"}, True, "stream"),
        ({"bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "> 0"),
        ({"bootstrap.servers": "h:1", "subscribe": "a", "failOnDataLoss": "yes"}, True, "true or"),
        ({"bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "{x"}, True, "JSON"),
        ({"bootstrap.servers": "h:1", "subscribePattern": "(", "x": "1"}, True, "unknown"),
        ({"bootstrap.servers": "h:1", "assign": '{"a": ["0"]}'}, True, "list of partitions"),
    ],
)
def test_bad_options_raise_invalid_config(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        parse_source_options(options, streaming=streaming)


def test_sink_options() -> None:
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t"}).acks == "all"
    with pytest.raises(InvalidConfigError, match="acks"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "acks": "2"})


def test_offset_json_round_trip() -> None:
    offsets = {A1: 5, A0: 3, B0: 0}
    doc = to_json(offsets)
    assert doc == {"a": {"0": 3, "1": 5}, "b": {"0": 0}}
    assert from_json(doc) == offsets
    with pytest.raises(InvalidConfigError):
        from_json({"a": {"x": 1}})


def test_split_ranges_cover_exactly() -> None:
    ranges = ranges_between({A0: 0, A1: 10}, {A0: 100, A1: 10, B0: 5})
    assert ranges == [OffsetRange("a", 0, 0, 100), OffsetRange("b", 0, 0, 5)]
    pieces = split_ranges(ranges, min_partitions=None, max_records=30)
    assert [(p.start, p.end) for p in pieces if p.topic == "a"] == [
        (0, 25),
        (25, 50),
        (50, 75),
        (75, 100),
    ]
    by_min = split_ranges(ranges, min_partitions=6, max_records=None)
    assert len(by_min) >= 6 and sum(p.size for p in by_min) == 105
    for tp in (A0, B0):
        mine = [p for p in by_min if p.tp == tp]
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))


def test_rate_limit_shares_by_backlog_and_always_progresses() -> None:
    start = {A0: 0, A1: 0, B0: 50}
    latest = {A0: 900, A1: 100, B0: 51}
    end = rate_limit(start, latest, 100)
    assert end[A0] == 89 and end[A1] == 9 and end[B0] == 51
    assert sum(end[tp] - start[tp] for tp in end) <= 100
    assert rate_limit(start, latest, 10_000) == latest


def _flat(tasks: list[tuple[OffsetRange, ...]]) -> list[OffsetRange]:
    return [r for t in tasks for r in t]


def test_coalesce_groups_small_ranges_and_keeps_each_range_exactly_once() -> None:
    ranges = [OffsetRange("a", p, 0, 30) for p in range(8)] + [
        OffsetRange("b", 0, 0, 500),
        OffsetRange("b", 1, 10, 20),
    ]
    tasks = coalesce_ranges(ranges, min_records=100, max_records=None, min_tasks=None)
    # 30-offset ranges packed until a task holds >= 100; the 500-offset range alone
    assert [[r.size for r in t] for t in tasks] == [
        [30, 30, 30, 30],
        [30, 30, 30, 30],
        [500],
        [10],
    ]
    assert _flat(tasks) == ranges  # every range once, in order: nothing read twice or lost
    assert coalesce_ranges(ranges, min_records=None, max_records=None, min_tasks=None) == [
        (r,) for r in ranges
    ]


def test_coalesce_respects_max_records_and_min_partitions() -> None:
    ranges = [OffsetRange("a", p, 0, 30) for p in range(8)]
    capped = coalesce_ranges(ranges, min_records=100, max_records=70, min_tasks=None)
    assert [sum(r.size for r in t) for t in capped] == [60, 60, 60, 60]
    assert _flat(capped) == ranges
    # grouping would leave 2 tasks, fewer than minPartitions=5: every range stays alone
    kept = coalesce_ranges(ranges, min_records=100, max_records=None, min_tasks=5)
    assert kept == [(r,) for r in ranges]
    assert len(coalesce_ranges(ranges, min_records=100, max_records=None, min_tasks=2)) == 2


def test_plan_groups_by_min_records_per_task_option() -> None:
    base = {"bootstrap.servers": "h:1", "subscribe": "a"}
    ranges = [OffsetRange("a", p, 0, 6_250) for p in range(16)]
    default = parse_source_options(base, streaming=True)
    assert default.min_records_per_task == DEFAULT_MIN_RECORDS_PER_TASK == 50_000
    tasks = plan(ranges, default)
    assert [len(t.ranges) for t in tasks] == [8, 8]
    assert [r for t in tasks for r in t.ranges] == ranges
    off = parse_source_options({**base, "minRecordsPerTask": "0"}, streaming=True)
    assert off.min_records_per_task is None and len(plan(ranges, off)) == 16
    small = parse_source_options({**base, "minrecordspertask": "20000"}, streaming=False)
    assert [len(t.ranges) for t in plan(ranges, small)] == [4, 4, 4, 4]
    with pytest.raises(InvalidConfigError, match="minRecordsPerTask"):
        parse_source_options({**base, "minRecordsPerTask": "-3"}, streaming=False)
