"""Bounded fuzzing of every RPC handler of every service on a dedicated real cluster.

CI budget: ``HEADWATER_RPC_FUZZ_SECONDS`` (default 60 s) shared equally by all RPCs; the
longer run is ``make fuzz-long`` (``python -m tests.fuzz.run --seconds N``). What counts
as an acceptable answer is in :mod:`tests.fuzz.rpcs`; why destructive control RPCs are
fuzzed on their own cluster, last, is in :mod:`tests.fuzz.campaign`. The cluster is the
hostile suite's (:func:`tests.fuzz.suite.start`): every service under a memory cap, and
acknowledged guard records that must survive the campaign.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fuzz import campaign, rpcs, suite

SECONDS = float(os.environ.get("HEADWATER_RPC_FUZZ_SECONDS", "60"))


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[suite.HostileRun]:
    run = suite.start(tmp_path_factory.mktemp("fuzz"))
    try:
        yield run
    finally:
        suite.stop(run)


def test_every_service_rpc_is_enumerated() -> None:
    """The fuzzed list is the descriptors' list: every RPC of every service, none twice."""
    names = [r.name for r in rpcs.all_rpcs()]
    assert len(names) == len(set(names))
    assert set(names) == rpcs.descriptor_rpc_names()
    assert set(names) >= rpcs.DESTRUCTIVE and set(names) >= rpcs.LONG_POLL


def test_fuzz_every_rpc(fuzz_run: suite.HostileRun) -> None:
    """Acceptable answers only, every process alive and SERVING; then no process killed by
    or reaching the memory cap, no acknowledged record lost, produce and fetch still work."""
    tally = campaign.run_campaign(fuzz_run.cluster, SECONDS)
    print(campaign.report(tally))
    assert set(tally.calls) == {r.name for r in rpcs.all_rpcs()}, "an RPC was never called"
    assert not tally.bad, campaign.report(tally)
    problems = fuzz_run.final_problems()
    print(fuzz_run.summary())
    assert not problems, "\n".join(problems)
