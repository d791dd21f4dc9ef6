"""Operations through the ``headwater`` CLI (subprocesses) against a real two-broker cluster:
cluster describe, topics describe JSON, partitions reassign (+ --list, JSON file, errors) and
elect-leaders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.dev.cluster import LocalCluster
from tests.helpers.cli import hw, ok
from tests.helpers.wait import wait_for


@pytest.fixture(scope="module")
def c2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("c2")
    with LocalCluster(data_dir, brokers=2, controllers=1, etcd_unsafe_no_fsync=True) as c:
        yield c


def describe(c: LocalCluster, topic: str) -> dict[str, Any]:
    (d,) = json.loads(ok(hw(c, "topics", "describe", topic, "--output", "json")))
    return dict(d)


def test_cluster_describe_text_and_json(c2: LocalCluster) -> None:
    d = json.loads(ok(hw(c2, "cluster", "describe", "--output", "json")))
    assert d["controller_id"] == 1 and d["controller_epoch"] >= 1 and d["cluster_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in d["brokers"]] == [
        (1, "127.0.0.1", c2.brokers[1].port),
        (2, "127.0.0.1", c2.brokers[2].port),
    ]
    assert all(b["rack"] is None for b in d["brokers"])
    text = ok(hw(c2, "cluster", "describe"))
    assert f"Controller: 1\tEpoch: {d['controller_epoch']}" in text
    assert f"Broker: 2\tHost: 127.0.0.1:{c2.brokers[2].port}\tRack: -" in text


def test_topics_describe_json_partitions(c2: LocalCluster) -> None:
    ok(hw(c2, "topics", "create", "dj", "--partitions", "2", "--replication-factor", "2"))
    d = wait_for(
        lambda: (d := describe(c2, "dj"))
        and all(len(p["isr"]) == 2 for p in d["partitions"])
        and d,
        timeout=30,
        what="full ISRs",
    )
    assert [p["partition"] for p in d["partitions"]] == [0, 1]
    for p in d["partitions"]:
        assert sorted(p["replicas"]) == [1, 2] and p["leader"] in (1, 2)
        assert sorted(p["isr"]) == [1, 2]


def test_partitions_reassign_list_and_elect_leaders(c2: LocalCluster, tmp_path: Path) -> None:
    ok(hw(c2, "topics", "create", "rs", "--partitions", "1"))
    wait_for(lambda: describe(c2, "rs")["partitions"][0]["leader"] >= 1, timeout=30, what="rs")
    src = describe(c2, "rs")["partitions"][0]["replicas"][0]
    dst = 3 - src
    out = ok(
        hw(
            c2,
            "partitions",
            "reassign",
            "--topic",
            "rs",
            "--partition",
            "0",
            "--replicas",
            f"{dst}",
        )
    )
    assert f"reassignment of rs-0 started -> replicas {dst}" in out

    def moved() -> bool:
        p = describe(c2, "rs")["partitions"][0]
        return bool(p["replicas"] == [dst] and p["isr"] == [dst] and p["leader"] == dst)

    wait_for(moved, timeout=60, what="rs-0 moved")
    assert json.loads(ok(hw(c2, "partitions", "reassign", "--list", "--output", "json"))) == []
    assert "no reassignments in progress" in ok(hw(c2, "partitions", "reassign", "--list"))

    # a kafka-reassign-partitions style file: back to [src, dst] (RF 1 -> 2)
    plan = tmp_path / "plan.json"
    item = {"topic": "rs", "partition": 0, "replicas": [src, dst]}
    plan.write_text(json.dumps({"version": 1, "partitions": [item]}))
    ok(hw(c2, "partitions", "reassign", "--reassignment-json-file", str(plan)))

    def grown() -> bool:
        p = describe(c2, "rs")["partitions"][0]
        return bool(p["replicas"] == [src, dst] and sorted(p["isr"]) == sorted([src, dst]))

    wait_for(grown, timeout=60, what="rs-0 on both brokers")
    # leader is dst (it stayed); a preferred election moves it to src
    res = json.loads(ok(hw(c2, "partitions", "elect-leaders", "--topic", "rs", "--output", "json")))
    assert res == [{"topic": "rs", "partition": 0, "leader": src, "error": None, "message": ""}]
    again = ok(hw(c2, "partitions", "elect-leaders", "--topic", "rs", "--partition", "0"))
    assert "rs-0: ELECTION_NOT_NEEDED" in again
    assert "rs-0: ELECTION_NOT_NEEDED" in ok(
        hw(c2, "partitions", "elect-leaders", "--type", "unclean", "--topic", "rs")
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("partitions", "reassign", "--topic", "rs", "--partition", "0", "--replicas", "9"),
         "INVALID_REPLICA_ASSIGNMENT"),
        (("partitions", "reassign", "--topic", "nope", "--partition", "0", "--replicas", "1"),
         "UNKNOWN_TOPIC_OR_PARTITION"),
        (("partitions", "reassign", "--topic", "rs", "--partition", "0", "--cancel"),
         "NO_REASSIGNMENT_IN_PROGRESS"),
        (("partitions", "reassign", "--topic", "rs", "--partition", "0", "--replicas", "x"),
         "INVALID_REQUEST"),
        (("partitions", "reassign", "--topic", "rs"), "INVALID_REQUEST"),
        (("partitions", "elect-leaders", "--partition", "0"), "INVALID_REQUEST"),
    ],
)  # fmt: skip
def test_operation_errors_are_one_line(c2: LocalCluster, args: tuple[str, ...], code: str) -> None:
    ok(hw(c2, "topics", "create", "rs", "--partitions", "1", "--if-not-exists"))
    proc = hw(c2, *args)
    assert proc.returncode == 1, proc.stdout
    err = proc.stderr.decode()
    assert err.startswith(f"error: {code}: ") and err.count("\n") == 1, err
