"""``headwater groups ...`` and ``headwater consume --group`` as a user runs them: subprocesses
against a real cluster with 2 group coordinators (one module-scoped cluster)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AsyncConsumer
from headwater.dev.cluster import LocalCluster
from tests.helpers.cli import hw, ok
from tests.helpers.wait import async_wait_for, wait_for

TOPIC, GROUP, PARTS, PER = "gcli", "gcli-group", 3, 10


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("groups-cli")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        coordinator_args=["--offsets-topic-partitions", "3", "--lease-ttl", "2"],
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


def describe(c: LocalCluster) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(ok(hw(c, "groups", "describe", GROUP, "--output", "json")))
    return out


def test_groups_cli_consume_describe_reset_delete(gcluster: LocalCluster) -> None:
    c = gcluster
    ok(hw(c, "topics", "create", TOPIC, "--partitions", str(PARTS)))
    lines = b"".join(b"%d\n" % i for i in range(PARTS * PER))
    ok(hw(c, "produce", TOPIC, stdin=lines))
    # consume as a group member; it commits what it printed
    out = ok(
        hw(c, "consume", TOPIC, "--group", GROUP, "--from-beginning",
           "--max-messages", str(PARTS * PER))
    )  # fmt: skip
    assert sorted(int(x) for x in out.split()) == list(range(PARTS * PER))
    listed = json.loads(ok(hw(c, "groups", "list", "--output", "json")))
    assert GROUP in [g["group"] for g in listed], listed
    desc = wait_for(
        lambda: (d := describe(c))["partitions"] and not d["members"] and d,
        timeout=30,
        what="the consumer to leave",
    )
    parts = desc["partitions"]
    assert sorted((p["topic"], p["partition"]) for p in parts) == [(TOPIC, p) for p in range(PARTS)]
    assert sum(p["end"] for p in parts) == PARTS * PER
    for p in parts:
        assert p["committed"] == p["end"] and p["lag"] == 0, p

    async def with_active_member() -> None:
        async with AsyncConsumer(
            c.bootstrap, group_id=GROUP, session_timeout_ms=6000, heartbeat_interval_ms=500
        ) as m:
            m.subscribe([TOPIC])

            async def assigned() -> dict[str, Any] | None:
                await m.poll(timeout_ms=100)
                d = await asyncio.to_thread(describe, c)
                return d if d["members"] and d["members"][0]["assignment"] else None

            d = await async_wait_for(assigned, timeout=60, what="an active member")
            (member,) = d["members"]
            assert member["member_id"] == m.member_id
            got = sorted((a["topic"], a["partition"]) for a in member["assignment"])
            assert got == [(TOPIC, p) for p in range(PARTS)]
            refused = await asyncio.to_thread(
                hw, c, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest"
            )
            assert refused.returncode == 1
            assert b"active member" in refused.stderr, refused.stderr
            for p in (await asyncio.to_thread(describe, c))["partitions"]:
                assert p["committed"] == p["end"], p  # nothing changed

    asyncio.run(with_active_member())
    reset = json.loads(
        ok(hw(c, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest",
              "--output", "json"))
    )  # fmt: skip
    assert sorted((r["partition"], r["offset"]) for r in reset) == [(p, 0) for p in range(PARTS)]
    for p in describe(c)["partitions"]:
        assert p["committed"] == 0 and p["lag"] == p["end"], p
    ok(hw(c, "groups", "delete", GROUP))
    listed = json.loads(ok(hw(c, "groups", "list", "--output", "json")))
    assert GROUP not in [g["group"] for g in listed], listed
