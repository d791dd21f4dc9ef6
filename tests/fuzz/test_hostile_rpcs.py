"""The hostile-input suite (issue 15 item 3; tests/fuzz/suite.py, tests/fuzz/cases.py).

Every RPC of every service, enumerated from the descriptors, gets every deterministic
hostile case (garbage bytes, truncated requests, each repeated field inflated to 10^6
entries, huge, negative and minimum numbers, unknown enums, requests naming things that do
not exist) on a real cluster whose every service process runs under a memory cap. One test
per RPC: every answer OK or typed, no process exits, every process SERVING afterwards. Then:
memory stayed under the cap, no acknowledged record was lost, produce and fetch still work,
no traceback in any log. The same suite at a larger scale, followed by the hypothesis
campaign, is ``make fuzz-long``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.protobuf import message_factory

from tests.fuzz import campaign, cases, guard, rpcs, suite

ALL = rpcs.all_rpcs()


def test_cases_cover_every_descriptor_method_and_repeated_field() -> None:
    """Every method of every service in headwater/v1 gets every kind of case; every repeated
    field (at any depth) is inflated to at least 10^6 entries, packed where packable; the
    well-formed kinds parse as the method's request type."""
    assert {r.name for r in ALL} == rpcs.descriptor_rpc_names()
    for rpc in ALL:
        got = cases.cases(rpc)
        kinds = {c.kind for c in got}
        expected = set(cases.KINDS) - {"inflated", "unknown-enum", "truncated"}
        assert kinds >= expected, (rpc.name, expected - kinds)
        desc = rpc.method.input_type
        if desc.fields:
            assert "truncated" in kinds, rpc.name
        inflated = {c.label.split(" ")[0]: c for c in got if c.kind == "inflated"}
        for path in cases.repeated_paths(desc):
            name = cases.path_name(path)
            assert name in inflated, f"{rpc.name}: {name} is never inflated"
            label = inflated[name].label
            count = int(label.split(" x")[1].split(" ")[0])
            assert count >= 1_000_000, label
            assert label.endswith(" packed") == path[-1].is_packed, label
        cls = message_factory.GetMessageClass(desc)
        for case in got:
            if case.kind in ("absent", "empty", "negative", "minimum", "unknown-enum"):
                cls.FromString(case.payload())


def test_an_inflated_packed_field_holds_distinct_entries() -> None:
    """The inflation is real: OffsetFetch's packed partition numbers parse back as 10^6
    distinct numbers, next to the well-formed rest of the request."""
    rpc = next(r for r in ALL if r.name == "GroupCoordinator.OffsetFetch")
    case = next(c for c in cases.cases(rpc) if c.label.startswith("partitions.partitions "))
    data = case.payload()
    assert 2 << 20 < len(data) < 64 << 20
    req = message_factory.GetMessageClass(rpc.method.input_type).FromString(data)
    inflated = req.partitions[-1].partitions  # the absent element's [7] and 10^6 more
    assert len(inflated) == len(set(inflated)) == 1_000_001
    assert req.group_id.startswith(cases.ABSENT)


def test_no_generator_can_name_the_guard_topic() -> None:
    """The guard topic is out of reach: not in the campaign's names, longer than any text
    protogen draws (30 characters) or any ``x`` run it draws, not a name the cases use."""
    assert guard.TOPIC not in campaign.NAMES
    assert len(guard.TOPIC) > 30 and set(guard.TOPIC) != {"x"}
    assert not guard.TOPIC.startswith(cases.ABSENT) and guard.TOPIC != campaign.TOPIC


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[suite.HostileRun]:
    run = suite.start(tmp_path_factory.mktemp("hostile-rpcs"))
    try:
        yield run
    finally:
        print(run.summary())
        suite.stop(run)


@pytest.mark.parametrize("name", [r.name for r in ALL])
def test_hostile_cases(hostile: suite.HostileRun, name: str) -> None:
    rpc = next(r for r in ALL if r.name == name)
    bad = hostile.run_rpc(rpc)
    assert not bad, "\n".join(bad)


def test_after_the_hostile_cases_memory_records_and_service_are_intact(
    hostile: suite.HostileRun,
) -> None:
    """Runs after every RPC's cases (pytest keeps definition order): no process was killed
    by or reached the memory cap, every acknowledged guard record is still there, fresh
    records are produced and fetched, and no log has a traceback."""
    problems = hostile.final_problems()
    print(hostile.summary())
    assert hostile.calls > 0
    assert not problems, "\n".join(problems)
