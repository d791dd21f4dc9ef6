"""Controller election: two real controller processes, a real etcd, kill -9 failover."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import grpc

from headwater import errors
from headwater.dev.cluster import ServiceProcess
from headwater.v1 import controller_pb2, controller_pb2_grpc
from tests.helpers.wait import wait_for


def _describe(proc: ServiceProcess) -> controller_pb2.DescribeClusterResponse:
    with grpc.insecure_channel(proc.address) as ch:
        return controller_pb2_grpc.ControllerStub(ch).DescribeCluster(
            controller_pb2.DescribeClusterRequest(), timeout=2
        )


def _leader_in(
    proc: ServiceProcess, ids: tuple[int, ...]
) -> controller_pb2.DescribeClusterResponse | None:
    """The cluster description from ``proc`` once its active controller is one of ``ids``."""
    d = _describe(proc)
    return d if d.controller_id in ids else None


def _accepts_mutations(proc: ServiceProcess) -> bool:
    """True when ``proc`` handles CreateTopics itself (validate_only: writes nothing)."""
    req = controller_pb2.CreateTopicsRequest(
        topics=[controller_pb2.NewTopic(name="probe", partitions=1, replication_factor=1)],
        validate_only=True,
    )
    with grpc.insecure_channel(proc.address) as ch:
        try:
            controller_pb2_grpc.ControllerStub(ch).CreateTopics(req, timeout=5)
        except grpc.RpcError as rpc_err:
            exc = errors.from_rpc_error(rpc_err)
            assert isinstance(exc, errors.NotControllerError), exc
            return False
    return True


def _active_gauge(proc: ServiceProcess) -> float:
    with urllib.request.urlopen(proc.metrics_url, timeout=2) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("headwater_controller_active "):
                return float(line.split()[1])
    raise AssertionError("headwater_controller_active not exported")


def test_exactly_one_active_and_failover_on_kill9(
    start_controller: Callable[[int], ServiceProcess],
) -> None:
    procs = {1: start_controller(1), 2: start_controller(2)}
    first = wait_for(
        lambda: _leader_in(procs[1], (1, 2)),
        timeout=20,
        what="a controller elected",
    )
    active, standby = first.controller_id, 3 - first.controller_id
    assert first.controller_epoch >= 1
    # both agree, exactly one accepts mutations, and only it reports itself active
    assert _describe(procs[standby]).controller_id == active
    wait_for(lambda: _accepts_mutations(procs[active]), timeout=10, what="active serves")
    assert not _accepts_mutations(procs[standby])
    wait_for(lambda: _active_gauge(procs[active]) == 1.0, timeout=10, what="active gauge")
    assert _active_gauge(procs[standby]) == 0.0

    killed_at = time.monotonic()
    procs[active].kill9()
    after = wait_for(
        lambda: _leader_in(procs[standby], (standby,)),
        timeout=20,
        what="the standby to take over",
    )
    assert after.controller_epoch > first.controller_epoch
    assert after.cluster_id == first.cluster_id
    wait_for(lambda: _accepts_mutations(procs[standby]), timeout=10, what="new active serves")
    # lease TTL is 2 s: failover well within the bound
    assert time.monotonic() - killed_at < 20


def test_graceful_stop_hands_over_at_once(
    start_controller: Callable[[int], ServiceProcess],
) -> None:
    p1 = start_controller(1)
    wait_for(lambda: _describe(p1).controller_id == 1, timeout=20, what="controller 1 active")
    p2 = start_controller(2)
    epoch = _describe(p1).controller_epoch
    p1.stop(timeout=10)
    # SIGTERM revokes the lease: the standby wins without waiting for the TTL
    d = wait_for(lambda: _leader_in(p2, (2,)), timeout=10, what="handover")
    assert d.controller_epoch == epoch + 1
    assert p1.child is not None and p1.child.proc is not None
    assert p1.child.proc.returncode == 0
