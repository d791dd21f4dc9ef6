"""The operator end to end: a real kube-apiserver (tests/k8s/conftest.py), the chart's CRDs
(charts/headwater/crds/), ``python -m headwater_operator`` as a child process and a real
local Headwater cluster (controller, broker, coordinator).

Every expectation is read back from both sides: the resource's status through kubectl and the
topic/group through the Headwater AdminClient. Timers run every second here (--drift-interval
1 --group-interval 1) so drift and lag show within a few seconds.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client.admin_configs import ConfigResource
from headwater.client.sync import AdminClient, Consumer, Producer
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.dev.procs import free_port
from tests.k8s.apiserver import tools_env
from tests.k8s.operator_helpers import (
    CRDS,
    Kube,
    condition,
    consumer_group,
    eventually,
    running_operator,
    topic,
)

pytestmark = pytest.mark.slow
WAIT = 30.0  # bound of every wait for the operator (it acts within ~1-2 s)


@pytest.fixture(scope="module")
def hw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("hw"),
        brokers=1,
        controllers=1,
        coordinators=1,
        coordinator_args=["--offsets-topic-partitions", "1"],
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def admin(hw: LocalCluster) -> Iterator[AdminClient]:
    with AdminClient(hw.bootstrap) as a:
        yield a


@pytest.fixture(scope="module")
def kenv(k8s_tools: Path, kube_apiserver: Path) -> dict[str, str]:
    """kubectl's environment, with the chart's CRDs installed and established."""
    env = tools_env(k8s_tools, kube_apiserver)
    subprocess.run(
        ["kubectl", "apply", "--server-side", "-f", str(CRDS)], check=True, env=env, timeout=60
    )
    subprocess.run(
        [
            "kubectl",
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/topics.headwater.dev",
            "crd/consumergroups.headwater.dev",
        ],
        check=True,
        env=env,
        timeout=90,
    )
    return env


def _namespace(env: dict[str, str], name: str) -> Kube:
    kube = Kube(env, name)
    if kube.get("namespace", name) is None:
        kube.run("create", "namespace", name)
    return kube


@pytest.fixture(scope="module")
def kube(
    kenv: dict[str, str], hw: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kube]:
    """The namespace ``hw-operator`` watched by an operator connected to ``hw``."""
    k = _namespace(kenv, "hw-operator")
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with running_operator(
        kenv,
        log,
        hw.bootstrap,
        "--namespace",
        k.namespace,
        "--drift-interval",
        "1",
        "--group-interval",
        "1",
        "--max-backoff",
        "2",
    ) as proc:
        k.diagnose = lambda: "operator log:\n" + proc.log_tail(60)
        yield k


def ready(kube: Kube, name: str, **status: Any) -> dict[str, Any] | None:
    """The Topic once Ready=True for its current generation with ``status`` fields."""
    obj = kube.get("topic", name)
    if obj is None or condition(obj).get("status") != "True":
        return None
    st = obj.get("status") or {}
    if st.get("observedGeneration") != obj["metadata"]["generation"]:
        return None
    if any(st.get(k) != v for k, v in status.items()):
        return None
    return obj


def wait(kube: Kube, fn: Any, what: str) -> Any:
    return eventually(fn, timeout=WAIT, what=what, diagnose=kube.diagnose)


def overrides(admin: AdminClient, name: str) -> dict[str, str]:
    res = ConfigResource("topic", name)
    return {e.name: e.value for e in admin.describe_configs([res])[res] if e.source == "topic"}


def partitions(admin: AdminClient, name: str) -> int:
    if name not in admin.list_topics():
        return 0
    return len(admin.describe_topics([name])[0].partitions)


def reasons(kube: Kube, name: str) -> set[str]:
    return {e.get("reason", "") for e in kube.events(name)}


def test_topic_created_grown_and_decrease_refused(kube: Kube, admin: AdminClient) -> None:
    kube.apply(
        topic("orders", partitions=2, replicationFactor=1, config={"retention.ms": "3600000"})
    )
    obj = wait(kube, lambda: ready(kube, "orders", partitions=2), "orders Ready")
    assert condition(obj)["reason"] in ("Created", "InSync")  # InSync: the drift timer ran
    wait(kube, lambda: "Created" in reasons(kube, "orders"), "Created event")
    assert obj["status"]["topicId"]
    assert obj["status"]["underReplicated"] == 0
    assert "headwater.dev/finalizer" in obj["metadata"]["finalizers"]
    wait(kube, lambda: partitions(admin, "orders") == 2, "orders in Headwater")
    assert admin.describe_topics(["orders"])[0].topic_id == obj["status"]["topicId"]
    assert overrides(admin, "orders") == {"retention.ms": "3600000"}

    kube.apply(
        topic("orders", partitions=4, replicationFactor=1, config={"retention.ms": "3600000"})
    )
    wait(kube, lambda: ready(kube, "orders", partitions=4), "orders at 4 partitions")
    wait(kube, lambda: partitions(admin, "orders") == 4, "4 partitions in Headwater")

    kube.apply(
        topic("orders", partitions=3, replicationFactor=1, config={"retention.ms": "3600000"})
    )

    def refused() -> dict[str, Any] | None:
        c = condition(kube.get("topic", "orders"))
        return c if c.get("reason") == "PartitionDecreaseRefused" else None

    c = wait(kube, refused, "decrease refused in status")
    assert c["status"] == "False" and "cannot be removed" in c["message"]
    assert partitions(admin, "orders") == 4
    wait(kube, lambda: "PartitionDecreaseRefused" in reasons(kube, "orders"), "warning event")

    kube.apply(
        topic("orders", partitions=4, replicationFactor=1, config={"retention.ms": "3600000"})
    )
    wait(kube, lambda: ready(kube, "orders", partitions=4), "Ready again at 4")

    # a name Kubernetes cannot hold, through spec.topicName
    kube.apply(topic("mixed-case", topicName="Mixed_Case.V2", partitions=1))
    wait(kube, lambda: ready(kube, "mixed-case", partitions=1), "mixed-case Ready")
    wait(kube, lambda: partitions(admin, "Mixed_Case.V2") == 1, "Mixed_Case.V2 in Headwater")


def test_out_of_band_changes_reverted_or_reported(kube: Kube, admin: AdminClient) -> None:
    kube.apply(topic("drift", partitions=1, config={"retention.ms": "3600000"}))
    wait(kube, lambda: ready(kube, "drift", partitions=1), "drift Ready")
    wait(kube, lambda: partitions(admin, "drift") == 1, "drift in Headwater")

    admin.alter_topic_configs("drift", {"retention.ms": "1000", "segment.ms": "60000"})
    wait(
        kube,
        lambda: overrides(admin, "drift") == {"retention.ms": "3600000"},
        "config drift reverted by the timer",
    )
    wait(kube, lambda: "DriftReverted" in reasons(kube, "drift"), "DriftReverted event")

    admin.create_partitions("drift", 3)

    def conflict() -> dict[str, Any] | None:
        obj = kube.get("topic", "drift")
        c = condition(obj)
        ok = c.get("reason") == "PartitionDecreaseRefused"
        if ok and obj and obj["status"]["partitions"] == 3:
            return c
        return None

    c = wait(kube, conflict, "partition conflict reported")
    assert c["status"] == "False" and "set spec.partitions to 3" in c["message"]
    kube.apply(topic("drift", partitions=3, config={"retention.ms": "3600000"}))
    wait(kube, lambda: ready(kube, "drift", partitions=3), "conflict resolved by the spec")


def test_invalid_config_is_a_permanent_failure_in_status(kube: Kube, admin: AdminClient) -> None:
    kube.apply(topic("badconf", partitions=1, config={"no.such.key": "1"}))

    def failed() -> dict[str, Any] | None:
        c = condition(kube.get("topic", "badconf"))
        return c if c.get("reason") == "InvalidConfig" else None

    c = wait(kube, failed, "InvalidConfig in status")
    assert c["status"] == "False" and "no.such.key" in c["message"]
    assert "badconf" not in admin.list_topics()
    # fixing the spec re-runs the handler
    kube.apply(topic("badconf", partitions=1, config={}))
    wait(kube, lambda: ready(kube, "badconf", partitions=1), "badconf Ready after the fix")


def test_deletion_policies(kube: Kube, admin: AdminClient) -> None:
    kube.apply(topic("gone", partitions=1))
    kube.apply(topic("kept", partitions=1, deletionPolicy="Keep"))
    for name in ("gone", "kept"):
        wait(kube, lambda n=name: ready(kube, n), f"{name} Ready")
        wait(kube, lambda n=name: partitions(admin, n) == 1, f"{name} in Headwater")
    kube.run("delete", "topic", "gone", "kept", "--wait=false")
    for name in ("gone", "kept"):
        wait(kube, lambda n=name: kube.get("topic", n) is None, f"{name} resource removed")
    wait(kube, lambda: "gone" not in admin.list_topics(), "Delete policy deleted the topic")
    assert "kept" in admin.list_topics()


def _produce(bootstrap: str, name: str, n: int) -> None:
    p = Producer(bootstrap)
    try:
        for i in range(n):
            p.send(name, f"v{i}".encode())
        p.flush(timeout=30)
    finally:
        p.close()


def _consume(consumer: Consumer, n: int) -> None:
    """Poll until ``n`` records arrived (bounded), then commit."""
    deadline = time.monotonic() + WAIT
    got = 0
    while got < n:
        assert time.monotonic() < deadline, f"consumed {got} of {n} records"
        got += len(consumer.poll(timeout_ms=500))
    consumer.commit()


def _group_consumer(bootstrap: str, group: str, name: str) -> Consumer:
    c = Consumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    c.subscribe([name])
    return c


def test_consumer_group_lag_and_offset_reset(
    kube: Kube, admin: AdminClient, hw: LocalCluster
) -> None:
    kube.apply(topic("events", partitions=1))
    wait(kube, lambda: ready(kube, "events"), "events Ready")
    wait(kube, lambda: partitions(admin, "events") == 1, "events in Headwater")
    _produce(hw.bootstrap, "events", 10)
    c = _group_consumer(hw.bootstrap, "billing", "events")
    try:
        _consume(c, 10)
    finally:
        c.close()

    kube.apply(consumer_group("billing", groupId="billing"))

    def group(**want: Any) -> dict[str, Any] | None:
        obj = kube.get("consumergroup", "billing")
        st = (obj or {}).get("status") or {}
        if condition(obj).get("status") != "True":
            return None
        return obj if all(st.get(k) == v for k, v in want.items()) else None

    obj = wait(kube, lambda: group(totalLag=0, members=0), "group status, no lag")
    assert obj["status"]["partitions"] == [
        {"topic": "events", "partition": 0, "committed": 10, "end": 10, "lag": 0}
    ]
    # produce while no consumer runs: the lag grows in status
    _produce(hw.bootstrap, "events", 5)
    wait(kube, lambda: group(totalLag=5), "lag 5 in status")

    c = _group_consumer(hw.bootstrap, "billing", "events")
    try:
        _consume(c, 5)
        obj = wait(kube, lambda: group(totalLag=0, members=1), "lag back to 0, one member")
        assert obj["status"]["state"] == "Stable"

        # a reset while the group is active is refused, the reason in status
        kube.apply(
            consumer_group("billing", groupId="billing", reset={"to": "earliest", "id": "r1"})
        )

        def refused() -> dict[str, Any] | None:
            obj = kube.get("consumergroup", "billing")
            c = condition(obj, "OffsetReset")
            return c if c.get("reason") == "GroupActive" else None

        r = wait(kube, refused, "reset refused while active")
        assert r["status"] == "False" and "active member" in r["message"]
        assert admin.list_consumer_group_offsets("billing") == {TopicPartition("events", 0): 15}
        assert "lastResetId" not in (kube.get("consumergroup", "billing") or {})["status"]
    finally:
        c.close()

    # once the group is empty the pending reset is applied
    obj = wait(kube, lambda: group(lastResetId="r1", totalLag=15), "reset r1 applied")
    assert condition(obj, "OffsetReset")["reason"] == "Applied"
    assert admin.list_consumer_group_offsets("billing") == {TopicPartition("events", 0): 0}

    # explicit offsets, applied once for the new id
    kube.apply(
        consumer_group(
            "billing",
            groupId="billing",
            reset={
                "to": "offsets",
                "id": "r2",
                "offsets": [{"topic": "events", "partition": 0, "offset": 12}],
            },
        )
    )
    wait(kube, lambda: group(lastResetId="r2", totalLag=3), "reset r2 applied")
    assert admin.list_consumer_group_offsets("billing") == {TopicPartition("events", 0): 12}
    wait(kube, lambda: "OffsetsReset" in reasons(kube, "billing"), "OffsetsReset event")


def test_cluster_gone_never_blocks_deletion(
    kenv: dict[str, str],
    kube: Kube,
    admin: AdminClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """An operator whose Headwater cluster is unreachable: Ready=False ClusterUnavailable
    (temporary, retried), and deletion still completes — after --delete-attempts, or at once
    with the force-delete annotation. Meanwhile the operator of ``kube`` (connected to the
    live cluster, watching only its own namespace) leaves this namespace alone."""
    k = _namespace(kenv, "hw-gone")
    log = tmp_path_factory.mktemp("operator-gone") / "operator.log"
    with running_operator(
        kenv,
        log,
        f"127.0.0.1:{free_port()}",
        "--namespace",
        k.namespace,
        "--delete-attempts",
        "2",
        "--max-backoff",
        "1",
        "--request-timeout-ms",
        "1000",
    ) as proc:
        k.diagnose = lambda: "operator log:\n" + proc.log_tail(60)
        k.apply(topic("orphan", partitions=1))
        k.apply(topic("forced", partitions=1))

        def unavailable(name: str) -> dict[str, Any] | None:
            c = condition(k.get("topic", name))
            return c if c.get("reason") == "ClusterUnavailable" else None

        for name in ("orphan", "forced"):
            wait(k, lambda n=name: unavailable(n), f"{name} ClusterUnavailable")

        k.run("annotate", "topic", "forced", "headwater.dev/force-delete=true")
        k.run("delete", "topic", "orphan", "forced", "--wait=false")
        for name in ("orphan", "forced"):
            wait(k, lambda n=name: k.get("topic", n) is None, f"{name} finalizer released")
        assert "DeleteAbandoned" in reasons(k, "orphan")
        assert "FinalizerForced" in reasons(k, "forced")
    assert not {"orphan", "forced"} & set(admin.list_topics())
