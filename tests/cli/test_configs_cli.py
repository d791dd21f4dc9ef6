"""``headwater configs describe|alter`` (subprocesses) against a real one-broker cluster:
topics, brokers (<default>), clients, (user, client-id); bracketed values; errors exit 1 with
the code and change nothing; ``topics alter --config`` still works."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.dev.cluster import LocalCluster
from tests.helpers.cli import hw, ok


@pytest.fixture(scope="module")
def c1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("cfgcli")
    with LocalCluster(data_dir, brokers=1, controllers=1, etcd_unsafe_no_fsync=True) as c:
        yield c


def describe(c: LocalCluster, *args: str) -> dict[str, Any]:
    out = json.loads(ok(hw(c, "--output", "json", "configs", "describe", *args)))
    return {e["name"]: (e["value"], e["source"]) for e in out["configs"]}


def test_topic_configs_alter_and_describe(c1: LocalCluster) -> None:
    ok(hw(c1, "topics", "create", "cc", "--partitions", "1"))
    topic = ("--entity-type", "topics", "--entity-name", "cc")
    out = ok(
        hw(
            c1,
            "configs",
            "alter",
            *topic,
            "--add-config",
            "retention.ms=60000,cleanup.policy=[compact,delete]",
        )
    )
    assert "Completed updating config for topic 'cc'." in out
    assert describe(c1, *topic) == {
        "retention.ms": ("60000", "topic"),
        "cleanup.policy": ("compact,delete", "topic"),
    }
    text = ok(hw(c1, "configs", "describe", *topic))
    assert "  retention.ms=60000 (source: topic)" in text
    ok(hw(c1, "configs", "alter", *topic, "--delete-config", "cleanup.policy"))
    assert describe(c1, *topic) == {"retention.ms": ("60000", "topic")}
    full = describe(c1, *topic, "--all")
    assert full["segment.bytes"] == ("1073741824", "default")
    # the older command edits the same overrides
    ok(hw(c1, "topics", "alter", "cc", "--config", "retention.ms=70000"))
    assert describe(c1, *topic) == {"retention.ms": ("70000", "topic")}


def test_broker_default_and_quota_entities(c1: LocalCluster) -> None:
    dflt = ("--entity-type", "brokers", "--entity-default")
    ok(hw(c1, "configs", "alter", *dflt, "--add-config", "quota.window.num=5"))
    assert describe(c1, *dflt) == {"quota.window.num": ("5", "dynamic_default")}
    broker = describe(c1, "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert broker["quota.window.num"] == ("5", "dynamic_default")
    assert broker["broker.id"] == ("1", "static_broker")
    ok(hw(c1, "configs", "alter", *dflt, "--delete-config", "quota.window.num"))
    client = ("--entity-type", "clients", "--entity-name", "app")
    ok(hw(c1, "configs", "alter", *client, "--add-config", "producer_byte_rate=1024"))
    assert describe(c1, *client) == {"producer_byte_rate": ("1024", "entity")}
    pair = ("--entity-type", "users", "--entity-name", "alice", "--client-id", "app")
    ok(hw(c1, "configs", "alter", *pair, "--add-config", "consumer_byte_rate=2048"))
    assert describe(c1, *pair) == {"consumer_byte_rate": ("2048", "entity")}
    assert describe(c1, *pair, "--all") == {
        "consumer_byte_rate": ("2048", "entity"),
        "producer_byte_rate": ("1024", "dynamic_default"),
    }


def test_errors_exit_1_and_change_nothing(c1: LocalCluster) -> None:
    ok(hw(c1, "topics", "create", "ce", "--partitions", "1"))
    topic = ("--entity-type", "topics", "--entity-name", "ce")
    before = describe(c1, *topic, "--all")
    cases = [
        ((*topic, "--add-config", "nope=1"), "INVALID_CONFIG"),
        ((*topic, "--add-config", "retention.ms=abc"), "INVALID_CONFIG"),
        ((*topic, "--add-config", "min.insync.replicas=0"), "INVALID_CONFIG"),
        ((*topic, "--add-config", "retention.ms"), "INVALID_CONFIG"),
        (
            ("--entity-type", "topics", "--entity-name", "ghost", "--add-config", "retention.ms=1"),
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (
            ("--entity-type", "brokers", "--entity-name", "b1", "--add-config", "retention.ms=1"),
            "INVALID_REQUEST",
        ),
        (
            ("--entity-type", "brokers", "--entity-name", "1", "--add-config", "log.dirs=/x"),
            "INVALID_CONFIG",
        ),
        (
            (
                "--entity-type",
                "clients",
                "--entity-name",
                "x",
                "--client-id",
                "y",
                "--add-config",
                "producer_byte_rate=1",
            ),
            "INVALID_REQUEST",
        ),
        ((*topic,), "INVALID_REQUEST"),
    ]
    for args, code in cases:
        proc = hw(c1, "configs", "alter", *args)
        assert proc.returncode == 1, args
        assert f"error: {code}:" in proc.stderr.decode(), (args, proc.stderr)
    assert describe(c1, *topic, "--all") == before
    assert describe(c1, "--entity-type", "clients", "--entity-name", "x") == {}
