"""Bounded fuzzing of every RPC handler of every service on a dedicated real cluster.

CI budget: ``HEADWATER_RPC_FUZZ_SECONDS`` (default 75 s) shared equally by all RPCs; the
longer campaign is ``make fuzz-long`` (``python -m tests.fuzz.run --seconds N``). What counts
as an acceptable answer is in :mod:`tests.fuzz.rpcs`; why destructive control RPCs are
fuzzed on their own cluster, last, is in :mod:`tests.fuzz.campaign`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.dev.cluster import LocalCluster
from tests.fuzz import campaign, rpcs

_V1 = Path(__file__).resolve().parents[2] / "headwater" / "v1"
SECONDS = float(os.environ.get("HEADWATER_RPC_FUZZ_SECONDS", "75"))


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = campaign.start_cluster(tmp_path_factory.mktemp("fuzz"))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_every_service_rpc_is_enumerated() -> None:
    """The fuzzed list is the descriptors' list: every RPC of every service, none twice."""
    names = [r.name for r in rpcs.all_rpcs()]
    assert len(names) == len(set(names))
    mods = [importlib.import_module(f"headwater.v1.{p.stem}") for p in _V1.glob("*_pb2.py")]
    expected = {
        f"{svc.name}.{m.name}"
        for mod in mods
        for svc in mod.DESCRIPTOR.services_by_name.values()
        for m in svc.methods
    }
    assert set(names) == expected
    assert set(names) >= rpcs.DESTRUCTIVE and set(names) >= rpcs.LONG_POLL


def test_fuzz_every_rpc(fuzz_cluster: LocalCluster) -> None:
    tally = campaign.run_campaign(fuzz_cluster, SECONDS)
    print(campaign.report(tally))
    assert set(tally.calls) == {r.name for r in rpcs.all_rpcs()}, "an RPC was never called"
    assert not tally.bad, campaign.report(tally)
