"""Headwater used as users use it, from inside the cluster (issue 16 item 4), against the
release ``hw`` in namespace ``headwater`` that ``make k8s-install`` puts on the test node:

- a Job produces 100,000 keyed records (acks=all) through the bootstrap Service
  ``hw-headwater-broker:9092`` to a 6-partition, RF 3 topic; another Job consumes them back as
  a consumer group; counts, distinct keys, per-partition counts and an order-independent
  SHA-256 of the (key, value) pairs match (the program: records_job.py, from a ConfigMap);
- ``kubectl apply`` of a Topic is reconciled by the operator's pod into a real topic with the
  requested partitions, replication factor and configs (checked through the admin API from a
  pod), a spec change adds partitions and changes configs, and deleting the resource deletes
  the topic;
- a ConsumerGroup resource shows the group's lag: what a group member committed against the
  end offsets, the same figures as the admin API's.

Every object the tests make carries the label ``headwater.dev/test=in-cluster-use`` and every
topic and group name starts with ``itest-incluster-``: leftovers of an interrupted run are removed
before the tests start, and each test removes its own in ``finally``. Pods request 20m CPU.
The produce/consume figures are printed (``pytest -s``) and recorded in docs/kubernetes.md.
"""

from __future__ import annotations

import shlex
from typing import Any

from tests.helpers.wait import wait_for
from tests.k8s_node.in_cluster import (
    BOOTSTRAP,
    CONFIGMAP,
    JOB_SCRIPT,
    NS,
    OPERATOR_TIMEOUT_S,
    PREFIX,
    RECORDS,
    InCluster,
    labels,
    unique_name,
)


# ---------------------------------------------------------------------------- records Jobs
def test_a_job_produces_100000_keyed_records_another_consumes_them_as_a_group(
    cluster: InCluster,
) -> None:
    topic, group = unique_name("records"), unique_name("records")
    try:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": NS, "labels": labels()},
                "data": {"records_job.py": JOB_SCRIPT.read_text()},
            }
        )
        cluster.headwater(
            "topics", "create", topic, "--partitions", "6", "--replication-factor", "3",
            "--config", "min.insync.replicas=2",
        )  # fmt: skip
        (desc,) = cluster.headwater("topics", "describe", topic)
        assert [len(p["replicas"]) for p in desc["partitions"]] == [3] * 6, desc

        produced = cluster.run_job(
            "itest-incluster-produce",
            ["produce", "--bootstrap", BOOTSTRAP, "--topic", topic, "--count", str(RECORDS)],
        )
        assert produced["count"] == RECORDS and produced["distinct_keys"] == RECORDS, produced
        assert sum(produced["partitions"].values()) == RECORDS
        assert len(produced["partitions"]) == 6, "keys spread over every partition"

        consumed = cluster.run_job(
            "itest-incluster-consume",
            [
                "consume", "--bootstrap", BOOTSTRAP, "--topic", topic, "--group", group,
                "--count", str(RECORDS), "--partitions", "6",
            ],
        )  # fmt: skip
        for field in ("count", "distinct_keys", "sha256", "partitions"):
            assert consumed[field] == produced[field], (field, produced, consumed)
        assert consumed["committed"] == RECORDS, consumed

        # the group as the admin API sees it: empty, everything committed, no lag
        described = cluster.headwater("groups", "describe", group)
        assert described["state"] == "Empty" and described["total_lag"] == 0, described
        committed = {p["partition"]: p["committed"] for p in described["partitions"]}
        assert committed == {int(p): n for p, n in produced["partitions"].items()}, described
    finally:
        cluster.kubectl(
            "delete", "job", "itest-incluster-produce", "itest-incluster-consume",
            "--ignore-not-found", "--cascade=foreground", "--wait=true", timeout=180,
        )  # fmt: skip
        cluster.kubectl("delete", "configmap", CONFIGMAP, "--ignore-not-found")
        cluster.delete_topics(topic)


# ---------------------------------------------------------------------------- Topic resource
def _ready_reason(resource: dict[str, Any]) -> str | None:
    conditions = resource["status"].get("conditions") or ()
    return next((c.get("reason") for c in conditions if c["type"] == "Ready"), None)


def _topic_resource(name: str, partitions: int, config: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS, "labels": labels()},
        "spec": {"partitions": partitions, "replicationFactor": 3, "config": config},
    }


def test_a_topic_resource_becomes_a_topic_follows_its_spec_and_is_deleted_with_it(
    cluster: InCluster,
) -> None:
    name = unique_name("topic")
    config = {"retention.ms": "3600000", "max.message.bytes": "262144"}
    try:
        cluster.apply(_topic_resource(name, 4, config))
        res = cluster.wait_ready("topic", name)
        assert res["status"]["partitions"] == 4 and res["status"]["topicId"], res["status"]
        # (the drift check, InSync, first runs a minute after the resource appeared)
        assert _ready_reason(res) == "Created", res["status"]
        assert "headwater.dev/finalizer" in res["metadata"]["finalizers"], res["metadata"]
        (desc,) = cluster.headwater("topics", "describe", name)
        assert desc["topic_id"] == res["status"]["topicId"]
        assert [len(p["replicas"]) for p in desc["partitions"]] == [3] * 4, desc
        assert {k: desc["configs"].get(k) for k in config} == config, desc["configs"]
        # the printer columns kubectl shows
        row = cluster.kubectl("get", "hwt", name, "--no-headers").split()
        assert row[:4] == [name, "4", "3", "True"], row

        # a spec change: more partitions, one config changed, one removed
        config2 = {"retention.ms": "7200000"}
        cluster.apply(_topic_resource(name, 6, config2))
        res = cluster.wait_ready("topic", name)
        assert res["status"]["partitions"] == 6, res["status"]
        (desc,) = cluster.headwater("topics", "describe", name)
        assert len(desc["partitions"]) == 6, desc
        assert desc["configs"].get("retention.ms") == "7200000", desc["configs"]
        assert "max.message.bytes" not in desc["configs"], desc["configs"]

        cluster.kubectl("delete", "topic", name, "--wait=true", "--timeout=180s", timeout=240)
        assert cluster.get("topic", name) is None
        wait_for(
            lambda: name not in cluster.topics(),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"topic {name} deleted from Headwater",
            interval=2,
        )
        # by the operator's finalizer
        deleted = wait_for(
            lambda: cluster.events(name).get("Deleted"),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"the operator's Deleted event of {name}",
            interval=2,
        )
        assert deleted == f"topic {name} deleted", deleted
    finally:
        cluster.kubectl(
            "delete", "topic", name, "--ignore-not-found", "--timeout=180s", timeout=240
        )
        cluster.delete_topics(name)


# ---------------------------------------------------------------------------- ConsumerGroup
def test_a_consumergroup_resource_shows_the_groups_lag(cluster: InCluster) -> None:
    topic, group = unique_name("lag"), unique_name("lag")
    resource = f"{PREFIX}lag"
    total, consumed = 1000, 600
    try:
        cluster.headwater(
            "topics", "create", topic, "--partitions", "3", "--replication-factor", "3"
        )
        cluster.sh(
            f"seq 1 {total} | sed 's/^/k/;s/$/:v/' | "
            f"headwater produce {shlex.quote(topic)} --acks all --key-separator :"
        )
        # the resource first: the group does not exist yet
        cluster.apply(
            {
                "apiVersion": "headwater.dev/v1alpha1",
                "kind": "ConsumerGroup",
                "metadata": {"name": resource, "namespace": NS, "labels": labels()},
                "spec": {"groupId": group},
            }
        )
        res = cluster.wait_ready("consumergroup", resource)
        assert res["status"]["totalLag"] == 0 and res["status"]["partitions"] == [], res

        # a member reads 600 of the 1000 records, commits and leaves
        out = cluster.sh(
            f"headwater consume {shlex.quote(topic)} --group {shlex.quote(group)} "
            f"--from-beginning --max-messages {consumed} --timeout-ms 60000"
        )
        assert len(out.splitlines()) == consumed, out[-500:]

        def lag_is(expected: int) -> dict[str, Any] | None:
            r = cluster.get("consumergroup", resource)
            st = (r or {}).get("status") or {}
            return st if st.get("totalLag") == expected and st.get("state") == "Empty" else None

        status = wait_for(
            lambda: lag_is(total - consumed),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"ConsumerGroup {resource} lag {total - consumed}",
            interval=2,
        )
        described = cluster.headwater("groups", "describe", group)
        by_partition = {
            p["partition"]: (p["committed"], p["end"], p["lag"]) for p in status["partitions"]
        }
        assert by_partition == {
            p["partition"]: (p["committed"], p["end"], p["lag"]) for p in described["partitions"]
        }, (status, described)
        assert sum(end for _, end, _ in by_partition.values()) == total, by_partition
        assert sum(c for c, _, _ in by_partition.values()) == consumed, by_partition
        assert status["members"] == 0
        row = cluster.kubectl("get", "hwcg", resource, "--no-headers").split()
        assert row[1:5] == [group, "Empty", "0", str(total - consumed)], row

        # the rest read: the status follows down to 0
        cluster.sh(
            f"headwater consume {shlex.quote(topic)} --group {shlex.quote(group)} "
            f"--max-messages {total - consumed} --timeout-ms 60000"
        )
        wait_for(
            lambda: lag_is(0),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"ConsumerGroup {resource} lag 0",
            interval=2,
        )
    finally:
        cluster.kubectl("delete", "consumergroup", resource, "--ignore-not-found")
        cluster.delete_topics(topic)
