"""The operator's pure decisions (operator/headwater_operator/model.py): spec parsing, the
plan from observed to desired, refusals, Ready reasons, conditions, offset-reset specs."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from headwater_operator import model
from headwater_operator.config import OperatorConfig

pytestmark = pytest.mark.fast


def observed(partitions: int = 3, rf: int = 1, **config: str) -> model.ObservedTopic:
    return model.ObservedTopic("id-1", partitions, rf, 0, config)


def spec(partitions: int = 3, rf: int = 1, **config: str) -> model.TopicSpec:
    return model.TopicSpec("t", partitions, rf, config)


def test_spec_defaults_and_topic_name_override() -> None:
    s = model.TopicSpec.from_resource({"partitions": 2, "replicationFactor": 3}, "orders")
    assert (s.name, s.partitions, s.replication_factor, s.deletion_policy) == (
        "orders",
        2,
        3,
        "Delete",
    )
    s = model.TopicSpec.from_resource(
        {"topicName": "Orders_V2", "config": {"retention.ms": 1000, "x": True}}, "orders-v2"
    )
    assert s.name == "Orders_V2"
    assert s.config == {"retention.ms": "1000", "x": "true"}


@pytest.mark.parametrize(
    ("spec_", "reason"),
    [
        ({"partitions": 0}, "InvalidSpec"),
        ({"replicationFactor": "2"}, "InvalidSpec"),
        ({"deletionPolicy": "Orphan"}, "InvalidSpec"),
        ({"topicName": "a/b"}, "InvalidTopicName"),
        ({"config": ["x"]}, "InvalidSpec"),
    ],
)
def test_invalid_specs_are_refused_with_a_reason(spec_: dict, reason: str) -> None:
    with pytest.raises(model.SpecError) as info:
        model.TopicSpec.from_resource(spec_, "t")
    assert info.value.reason == reason


def test_absent_topic_is_created() -> None:
    plan = model.plan_topic(spec(), None)
    assert plan.create and plan.changes
    assert model.topic_ready(plan, drift=False) == (True, "Created", "the topic was created")


def test_in_sync_topic_needs_nothing() -> None:
    plan = model.plan_topic(spec(**{"retention.ms": "5"}), observed(**{"retention.ms": "5"}))
    assert not plan.changes and not plan.refusals
    assert model.topic_ready(plan, drift=True)[:2] == (True, "InSync")


def test_partitions_only_grow() -> None:
    assert model.plan_topic(spec(5), observed(3)).partitions_to == 5
    plan = model.plan_topic(spec(2), observed(3))
    assert plan.partitions_to is None
    assert [r.reason for r in plan.refusals] == ["PartitionDecreaseRefused"]
    ready = model.topic_ready(plan, drift=False)
    assert ready[:2] == (False, "PartitionDecreaseRefused")
    assert "cannot be removed" in ready[2]


def test_out_of_band_partitions_are_the_same_refusal() -> None:
    # the drift timer and the change handlers may race: same inputs, same status
    plan = model.plan_topic(spec(3), observed(4))
    assert [r.reason for r in plan.refusals] == ["PartitionDecreaseRefused"]
    assert "set spec.partitions to 4" in plan.refusals[0].message


def test_replication_factor_change_is_refused_but_configs_still_apply() -> None:
    plan = model.plan_topic(spec(3, 3, a="1"), observed(3, 1))
    assert [r.reason for r in plan.refusals] == ["ReplicationFactorChangeRefused"]
    assert plan.set_config == {"a": "1"}


def test_config_drift_is_reverted_both_ways() -> None:
    plan = model.plan_topic(
        spec(**{"retention.ms": "1000"}),
        observed(**{"retention.ms": "5", "cleanup.policy": "compact"}),
    )
    assert plan.set_config == {"retention.ms": "1000"}
    assert plan.delete_config == ("cleanup.policy",)
    status, reason, message = model.topic_ready(plan, drift=True)
    assert (status, reason) == (True, "DriftReverted")
    assert "retention.ms=1000" in message and "removed cleanup.policy" in message
    assert model.topic_ready(plan, drift=False)[1] == "Updated"


def test_condition_transition_time_moves_only_with_status() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1 = datetime(2026, 1, 2, tzinfo=UTC)
    c = model.set_condition([], "Ready", True, "Created", "m", now=t0)
    c = model.set_condition(c, "Ready", True, "InSync", "m2", now=t1)
    assert c == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "InSync",
            "message": "m2",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]
    c = model.set_condition(c, "OffsetReset", False, "GroupActive", "x", now=t1)
    c = model.set_condition(c, "Ready", False, "PartitionDecreaseRefused", "no", now=t1)
    assert [(x["type"], x["status"], x["lastTransitionTime"]) for x in c] == [
        ("OffsetReset", "False", "2026-01-02T00:00:00Z"),
        ("Ready", "False", "2026-01-02T00:00:00Z"),
    ]


def test_reset_spec_parsing_and_pending() -> None:
    assert model.ResetSpec.from_resource(None) is None
    r = model.ResetSpec.from_resource({"to": "earliest", "id": "r1"})
    assert r is not None and r.key == "r1"
    assert model.reset_pending(r, {})
    assert not model.reset_pending(r, {"lastResetId": "r1"})
    # no id: a digest of the reset, so a different reset is applied again
    a = model.ResetSpec.from_resource({"to": "latest"})
    b = model.ResetSpec.from_resource({"to": "earliest"})
    assert a is not None and b is not None and a.key != b.key and a.key.startswith("sha256:")
    r = model.ResetSpec.from_resource(
        {"to": "offsets", "offsets": [{"topic": "t", "partition": 1, "offset": 7}]}
    )
    assert r is not None and r.offsets == (("t", 1, 7),)
    r = model.ResetSpec.from_resource({"to": "timestamp", "timestamp": "2026-01-01T00:00:01Z"})
    assert r is not None and r.timestamp_ms == 1767225601000
    r = model.ResetSpec.from_resource({"to": "timestamp", "timestamp": 1234})
    assert r is not None and r.timestamp_ms == 1234


@pytest.mark.parametrize(
    "reset",
    [
        {"to": "yesterday"},
        {"to": "timestamp"},
        {"to": "timestamp", "timestamp": "not a date"},
        {"to": "offsets"},
        {"to": "offsets", "offsets": [{"topic": "t", "partition": -1, "offset": 0}]},
        {"to": "offsets", "offsets": [{"topic": "t"}]},
    ],
)
def test_invalid_resets(reset: dict) -> None:
    with pytest.raises(model.SpecError) as info:
        model.ResetSpec.from_resource(reset)
    assert info.value.reason == "InvalidReset"


def test_group_status_from_a_description() -> None:
    assert model.group_status(None)["state"] == "Dead"
    desc = SimpleNamespace(
        state="Stable",
        members=(object(), object()),
        total_lag=5,
        partitions=(SimpleNamespace(topic="t", partition=0, committed=3, end=8, lag=5),),
    )
    assert model.group_status(desc) == {
        "state": "Stable",
        "members": 2,
        "totalLag": 5,
        "partitions": [{"topic": "t", "partition": 0, "committed": 3, "end": 8, "lag": 5}],
    }


def test_backoff_is_exponential_and_capped() -> None:
    c = OperatorConfig(bootstrap="x:1", max_backoff_s=10)
    assert [c.backoff(r) for r in range(6)] == [1, 2, 4, 8, 10, 10]
    assert c.backoff(10_000) == 10


def test_errors_are_temporary_or_permanent() -> None:
    import kopf
    from headwater_operator import failures

    from headwater import errors

    c = OperatorConfig(bootstrap="x:1")
    t = failures.to_kopf(errors.NetworkError("down"), c, retry=2)
    assert isinstance(t, kopf.TemporaryError) and t.delay == 4
    assert isinstance(failures.to_kopf(errors.NotControllerError(), c, 0), kopf.TemporaryError)
    p = failures.to_kopf(errors.InvalidConfigError("bad key"), c, 0)
    assert isinstance(p, kopf.PermanentError)
    assert failures.reason_of(errors.InvalidReplicationFactorError()) == (
        "InvalidReplicationFactor"
    )


def test_command_line() -> None:
    from headwater_operator.__main__ import parse_args

    c = parse_args(["--bootstrap", "b:9092", "--namespace", "a", "--namespace", "b"])
    assert (c.bootstrap, c.namespaces, c.all_namespaces) == ("b:9092", ("a", "b"), False)
    c = parse_args(["--bootstrap", "b:9092", "--all-namespaces", "--drift-interval", "5"])
    assert c.all_namespaces and c.namespaces == () and c.drift_interval_s == 5
    for bad in (
        ["--namespace", "a"],
        ["--bootstrap", "b:1", "--namespace", "a", "--all-namespaces"],
    ):
        with pytest.raises(SystemExit):
            parse_args(bad)
