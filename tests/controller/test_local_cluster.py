"""LocalCluster with real etcd, controller and broker processes: start, describe, faults."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import grpc

from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from tests.helpers.internal import registration_epoch
from tests.helpers.wait import wait_for


def _describe(cluster: LocalCluster) -> controller_pb2.DescribeClusterResponse:
    with grpc.insecure_channel(cluster.controller_addresses[0]) as ch:
        return controller_pb2_grpc.ControllerStub(ch).DescribeCluster(
            controller_pb2.DescribeClusterRequest(), timeout=5
        )


def _metadata(address: str) -> Any:
    with grpc.insecure_channel(address) as ch:
        return broker_pb2_grpc.BrokerStub(ch).Metadata(metadata_pb2.MetadataRequest(), timeout=5)


def _registration_epoch(cluster: LocalCluster) -> int:
    return registration_epoch(cluster.etcd.endpoint, 1)


def test_cluster_starts_and_reports_addresses(cluster: LocalCluster) -> None:
    host, _, port = cluster.bootstrap.partition(":")
    assert host == "127.0.0.1" and int(port) == cluster.brokers[1].port
    d = _describe(cluster)
    assert d.controller_id == 1 and d.controller_epoch >= 1 and d.cluster_id
    assert [(b.broker_id, b.port) for b in d.brokers] == [(1, cluster.brokers[1].port)]
    assert d.brokers[0].broker_epoch == 0 and _registration_epoch(cluster) > 0
    md = _metadata(cluster.bootstrap)
    assert [b.broker_id for b in md.brokers] == [1]
    assert md.brokers[0].broker_epoch == 0  # fencing values are not for clients
    urls = cluster.metrics_urls()
    assert set(urls) == {"controller-1", "broker-1"}
    for url in urls.values():
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert b"headwater_" in resp.read()
    ready = json.loads((cluster.run_dir / "broker-1.ready").read_text())
    assert ready["port"] == cluster.brokers[1].port
    assert (cluster.logs_dir / "etcd.log").exists()


def test_controller_restart_bumps_epoch_and_reaches_broker(cluster: LocalCluster) -> None:
    before = _describe(cluster).controller_epoch
    cluster.kill_controller(1)
    cluster.restart_controller(1)

    def reelected() -> controller_pb2.DescribeClusterResponse | None:
        d = _describe(cluster)
        return d if d.controller_id == 1 and d.controller_epoch > before else None

    wait_for(reelected, timeout=30, what="controller re-elected with a higher epoch")
    new_port = cluster.controllers[1].port
    # the new controller pushes UpdateMetadata: the broker learns its endpoint
    wait_for(
        lambda: _metadata(cluster.bootstrap).controller.port == new_port,
        timeout=30,
        what="broker metadata names the restarted controller",
    )


def test_broker_kill9_and_restart_reregisters(cluster: LocalCluster) -> None:
    old_epoch = _registration_epoch(cluster)
    cluster.kill_broker(1)
    cluster.restart_broker(1)  # waits until the broker lists itself (controller pushed it)

    def reregistered() -> controller_pb2.DescribeClusterResponse | None:
        d = _describe(cluster)
        fresh = _registration_epoch(cluster) not in (-1, old_epoch)
        return d if d.brokers and fresh else None

    d = wait_for(reregistered, timeout=30, what="new broker registration")
    assert d.brokers[0].port == cluster.brokers[1].port
