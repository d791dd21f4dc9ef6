"""DescribeConfigs / AlterConfigs: validation tables (pure), the quota precedence chain
(pure), and against a real cluster: invalid alterations are rejected with the right code and
change nothing (describe before == after), sources are reported, quota entities round-trip,
and AlterTopicConfigs still works (same code path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater import config as hconfig
from headwater import config_entities as ce
from headwater import errors
from headwater.client import AdminClient, ConfigResource
from headwater.dev.cluster import LocalCluster
from headwater.platform.dynamic_config import effective, parse_static

# ----------------------------------------------------------------------------- pure


def test_broker_and_quota_validation() -> None:
    assert hconfig.validate_broker_configs({"retention.ms": "5", "quota.window.num": "3"}) == {
        "retention.ms": "5",
        "quota.window.num": "3",
    }
    with pytest.raises(errors.InvalidConfigError, match="read-only"):
        hconfig.validate_broker_configs({"broker.id": "2"})
    with pytest.raises(errors.InvalidConfigError, match="unknown broker config"):
        hconfig.validate_broker_configs({"no.such": "1"})
    with pytest.raises(errors.InvalidConfigError, match=r"1 \.\. 1000"):
        hconfig.validate_broker_configs({"quota.window.num": "0"})
    assert hconfig.validate_quota_configs({"request_percentage": "12.5"}) == {
        "request_percentage": "12.5"
    }
    with pytest.raises(errors.InvalidConfigError, match="> 0"):
        hconfig.validate_quota_configs({"consumer_byte_rate": "0"})
    with pytest.raises(errors.InvalidConfigError):
        hconfig.validate_quota_configs({"producer_byte_rate": "fast"})
    with pytest.raises(errors.InvalidConfigError, match="unknown quota config"):
        hconfig.validate_quota_configs({"retention.ms": "1"})


def test_entity_names_and_keys() -> None:
    assert ce.entity("broker", "3").key == "/headwater/configs/brokers/3"
    assert ce.entity("user", "alice", "<default>").key == (
        "/headwater/configs/users/alice/clients/<default>"
    )
    for kind, name in [("broker", "x"), ("broker", "-1"), ("broker", "01"), ("client", "")]:
        with pytest.raises(errors.InvalidRequestError):
            ce.entity(kind, name)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidRequestError):
        ce.entity("client", "a/b")
    with pytest.raises(errors.InvalidRequestError):
        ce.entity("user", "u", "bad/client")
    for ent in [ce.Entity("client", "c"), ce.Entity("user", "u"), ce.Entity("user", "u", "c")]:
        assert ce.entity_of_key(ent.key) == ent
    assert ce.entity_of_key("/headwater/configs/users/u/other/c") is None


def test_quota_chain_precedence_each_key_separately() -> None:
    d = ce.DEFAULT
    stored = {
        ce.Entity("client", d): {"producer_byte_rate": "1", "consumer_byte_rate": "1"},
        ce.Entity("client", "c"): {"producer_byte_rate": "2"},
        ce.Entity("user", d): {"producer_byte_rate": "3"},
        ce.Entity("user", "u", "c"): {"request_percentage": "4"},
    }
    got = ce.resolve_quotas(stored, "u", "c")
    assert got["request_percentage"] == ("4", ce.Entity("user", "u", "c"))
    assert got["producer_byte_rate"] == ("3", ce.Entity("user", d))
    assert got["consumer_byte_rate"] == ("1", ce.Entity("client", d))
    assert [str(e) for e in ce.quota_chain("u", "c")][:3] == [
        "user 'u' client 'c'",
        "user 'u' client '<default>'",
        "user 'u'",
    ]


def test_broker_precedence_and_static_flags() -> None:
    static = parse_static(["retention.ms=10", "segment.bytes=2048"])
    got = effective(
        static, {"retention.ms": "20", "min.insync.replicas": "2"}, {"retention.ms": "30"}
    )
    assert got == {"retention.ms": "30", "segment.bytes": "2048", "min.insync.replicas": "2"}
    assert hconfig.resolve_topic_config({"retention.ms": "40"}, got).retention_ms == 40
    with pytest.raises(ValueError, match="read-only"):
        parse_static(["broker.id=3"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_static(["retention.ms"])


# ----------------------------------------------------------------------------- cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("configs")
    with LocalCluster(
        base,
        brokers=1,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--config", "retention.bytes=123456"],
    ) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[AdminClient]:
    a = AdminClient(cluster.bootstrap)
    yield a
    a.close()


RESOURCES = [
    ConfigResource("topic", "cfg-t"),
    ConfigResource("broker", "1"),
    ConfigResource("broker", "<default>"),
    ConfigResource("client", "c1"),
    ConfigResource("user", "alice"),
    ConfigResource("user", "alice", "c1"),
]


def snapshot(admin: AdminClient) -> dict[ConfigResource, list[tuple[str, str, str]]]:
    got = admin.describe_configs(RESOURCES, include_defaults=True)
    return {r: [(e.name, e.value, e.source) for e in entries] for r, entries in got.items()}


INVALID = [
    (ConfigResource("topic", "cfg-t"), {"no.such.key": "1"}, (), errors.InvalidConfigError),
    (ConfigResource("topic", "cfg-t"), {"retention.ms": "soon"}, (), errors.InvalidConfigError),
    (ConfigResource("topic", "cfg-t"), {"segment.bytes": "10"}, (), errors.InvalidConfigError),
    (
        ConfigResource("topic", "cfg-t"),
        {"retention.ms": "5"},
        ("retention.ms",),
        errors.InvalidRequestError,
    ),
    (ConfigResource("topic", "cfg-t"), {}, ("no.such.key",), errors.InvalidConfigError),
    (
        ConfigResource("topic", "absent"),
        {"retention.ms": "5"},
        (),
        errors.UnknownTopicOrPartitionError,
    ),
    (ConfigResource("broker", "1"), {"broker.id": "7"}, (), errors.InvalidConfigError),
    (ConfigResource("broker", "1"), {}, ("log.dirs",), errors.InvalidConfigError),
    (ConfigResource("broker", "one"), {"retention.ms": "5"}, (), errors.InvalidRequestError),
    (
        ConfigResource("broker", "<default>"),
        {"quota.window.num": "0"},
        (),
        errors.InvalidConfigError,
    ),
    # one good key with one bad key: all or nothing
    (
        ConfigResource("broker", "<default>"),
        {"retention.ms": "5", "min.insync.replicas": "0"},
        (),
        errors.InvalidConfigError,
    ),
    (ConfigResource("client", "c1"), {"producer_byte_rate": "-5"}, (), errors.InvalidConfigError),
    (ConfigResource("client", "c1"), {"retention.ms": "5"}, (), errors.InvalidConfigError),
    (ConfigResource("client", "a/b"), {"producer_byte_rate": "5"}, (), errors.InvalidRequestError),
    (ConfigResource("user", ""), {"producer_byte_rate": "5"}, (), errors.InvalidRequestError),
    (
        ConfigResource("client", "c1", "x"),
        {"producer_byte_rate": "5"},
        (),
        errors.InvalidRequestError,
    ),
]


def test_invalid_alterations_change_nothing(admin: AdminClient) -> None:
    admin.create_topic("cfg-t", 1, 1, {"retention.ms": "100000"})
    admin.alter_configs(ConfigResource("client", "c1"), {"producer_byte_rate": "1000"})
    admin.alter_configs(ConfigResource("broker", "1"), {"segment.ms": "60000"})
    before = snapshot(admin)
    for resource, to_set, to_delete, exc_type in INVALID:
        with pytest.raises(exc_type) as info:
            admin.alter_configs(resource, to_set, to_delete)
        assert info.value.message, resource
    assert snapshot(admin) == before


def test_validate_only_writes_nothing(admin: AdminClient) -> None:
    res = ConfigResource("client", "vo")
    admin.alter_configs(res, {"consumer_byte_rate": "5"}, validate_only=True)
    assert admin.describe_configs([res]) == {res: []}


def test_describe_sources(admin: AdminClient) -> None:
    admin.create_topic("cfg-src", 1, 1, {"segment.bytes": "4096"})
    admin.alter_configs(ConfigResource("broker", "<default>"), {"retention.ms": "3600000"})
    admin.alter_configs(ConfigResource("broker", "1"), {"min.insync.replicas": "1"})
    try:
        t = ConfigResource("topic", "cfg-src")
        b = ConfigResource("broker", "1")
        got = admin.describe_configs([t, b], include_defaults=True)
        topic = {e.name: (e.value, e.source) for e in got[t]}
        assert topic["segment.bytes"] == ("4096", "topic")
        assert topic["retention.ms"] == ("3600000", "dynamic_default")
        assert topic["cleanup.policy"] == ("delete", "default")
        broker = {e.name: (e.value, e.source, e.read_only) for e in got[b]}
        assert broker["min.insync.replicas"] == ("1", "dynamic_broker", False)
        assert broker["retention.ms"] == ("3600000", "dynamic_default", False)
        assert broker["retention.bytes"] == ("123456", "static_broker", False)
        assert broker["broker.id"] == ("1", "static_broker", True)
        assert broker["quota.window.num"] == ("11", "default", False)
        only_set = admin.describe_configs([t])[t]
        assert [(e.name, e.source) for e in only_set] == [("segment.bytes", "topic")]
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            admin.describe_configs([ConfigResource("topic", "nope")])
    finally:
        admin.alter_configs(ConfigResource("broker", "<default>"), delete=["retention.ms"])
        admin.alter_configs(ConfigResource("broker", "1"), delete=["min.insync.replicas"])


def test_quota_entities_round_trip(admin: AdminClient) -> None:
    admin.alter_configs(ConfigResource("client", "<default>"), {"consumer_byte_rate": "100"})
    admin.alter_configs(ConfigResource("user", "bob", "app"), {"producer_byte_rate": "2000"})
    admin.alter_configs(ConfigResource("user", "bob"), {"request_percentage": "50"})
    pair = ConfigResource("user", "bob", "app")
    got = admin.describe_configs([pair], include_defaults=True)[pair]
    assert {e.name: (e.value, e.source) for e in got} == {
        "producer_byte_rate": ("2000", "entity"),
        "request_percentage": ("50.0", "dynamic_default"),
        "consumer_byte_rate": ("100", "dynamic_default"),
    }
    admin.alter_configs(pair, delete=["producer_byte_rate"])
    assert admin.describe_configs([pair]) == {pair: []}


def test_alter_topic_configs_still_works(admin: AdminClient) -> None:
    admin.create_topic("cfg-old", 1, 1)
    admin.alter_topic_configs("cfg-old", {"retention.ms": "7000"})
    t = ConfigResource("topic", "cfg-old")
    assert [(e.name, e.value) for e in admin.describe_configs([t])[t]] == [("retention.ms", "7000")]
    with pytest.raises(errors.InvalidConfigError):
        admin.alter_topic_configs("cfg-old", {"retention.ms": "x"})
    admin.alter_topic_configs("cfg-old", delete=["retention.ms"])
    assert admin.describe_configs([t]) == {t: []}
