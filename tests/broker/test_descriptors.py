"""The broker's open-file budget: the soft limit raised at start, and new partitions refused
(KAFKA_STORAGE_ERROR, counted) once the limit would leave too few descriptors free, while
hosted partitions keep being applied."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from headwater.v1.errors_pb2 import ErrorCode
from services.broker.descriptors import (
    FILES_PER_PARTITION,
    DescriptorBudget,
    index_files_bound,
    open_descriptors,
)
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.storage.fileio import LazyFile, OpenFiles
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, assignment, request


def _refused() -> float:
    value = REGISTRY.get_sample_value(
        "headwater_broker_partitions_refused_total", {"reason": "descriptors"}
    )
    return value or 0.0


@pytest.mark.fast
def test_new_partitions_past_the_limit_are_refused_and_hosted_ones_still_applied(
    tmp_path: Path,
) -> None:
    reserve = 64
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    before = _refused()

    async def scenario() -> None:
        # room for exactly two new partitions; the count is what is open now plus three per
        # hosted partition (counting for real would see other tests' logs closed by the
        # garbage collector at any moment)
        opened = open_descriptors()
        limit = opened + reserve + 2 * FILES_PER_PARTITION
        rm.descriptors = DescriptorBudget(
            limit,
            reserve,
            count=lambda: opened + FILES_PER_PARTITION * len(rm.partitions),
            index_files=OpenFiles(0),  # no index files' headroom in this count
        )
        resp = await rm.leader_and_isr(request(*(assignment("t", p, 0) for p in range(4))))
        assert [r.error_code for r in resp.partitions] == [
            ErrorCode.NONE,
            ErrorCode.NONE,
            ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.KAFKA_STORAGE_ERROR,
        ]
        assert "open-file limit" in resp.partitions[2].error_message
        assert sorted(rm.partitions) == [("t", 0), ("t", 1)]
        assert _refused() == before + 2
        # the hosted partitions take a new leader epoch even with no room left
        resp = await rm.leader_and_isr(request(assignment("t", 0, 1), assignment("t", 9, 0)))
        assert [r.error_code for r in resp.partitions] == [
            ErrorCode.NONE,
            ErrorCode.KAFKA_STORAGE_ERROR,
        ]
        assert rm.partitions[("t", 0)].leader_epoch == 1

    asyncio.run(scenario())


@pytest.mark.fast
def test_the_reserve_is_a_quarter_of_a_small_limit_so_a_1024_limit_still_hosts_partitions() -> None:
    small = DescriptorBudget(1024, count=lambda: 40, index_files=OpenFiles(index_files_bound(1024)))
    assert small.reserve == 256 and small.index_files.bound == 256
    assert small.room() == 1024 - 256 - 256 - 40
    assert DescriptorBudget(20_000, count=lambda: 40).reserve == 1024


@pytest.mark.fast
def test_index_files_open_now_count_once_and_the_rest_of_their_bound_is_kept_free(
    tmp_path: Path,
) -> None:
    """One descriptor per partition (its active log) plus the index files' bound: 10,000
    partitions at RF=3 on 3 brokers fit a limit of 20,000 (three per partition did not)."""
    files = OpenFiles(4)
    opened = [LazyFile(tmp_path / f"{i}.index", files) for i in range(3)]
    in_use = 3 + len(opened)  # the indexes open now are in the process' count
    budget = DescriptorBudget(1000, 100, count=lambda: in_use, index_files=files)
    assert len(files) == 3
    assert budget.room() == 1000 - 100 - (4 - 3) - in_use
    assert DescriptorBudget(20_000, count=lambda: 8).room() >= 10_000 * FILES_PER_PARTITION
    for f in opened:
        f.close()
    assert len(files) == 0


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    """In a child started with a lower soft limit (as a service manager may start the
    broker): raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, hard, 256)
    if lower == hard:
        pytest.fail(f"the hard limit {hard} leaves nothing to raise")
    code = (
        "import resource\n"
        "from services.broker.descriptors import raise_soft_limit\n"
        "print(*raise_soft_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))

    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lowered,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout.split()
    expected = (
        hard if hard != resource.RLIM_INFINITY else int(Path("/proc/sys/fs/nr_open").read_text())
    )
    assert [int(x) for x in out] == [lower, expected, expected]
