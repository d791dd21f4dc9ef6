"""The high-watermark checkpoint of an idle broker (issue 17 item 4: idle CPU): a log
directory whose high watermarks did not change since this process last wrote them is not
written (and fsynced) again; any change is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.broker import replica_manager
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.storage import hw_checkpoint
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, assignment, request

pytestmark = pytest.mark.fast


def test_an_unchanged_checkpoint_is_not_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    writes: list[dict[Any, int]] = []
    real = hw_checkpoint.write_high_watermarks

    def counted(d: Path, hws: Any) -> None:
        writes.append(dict(hws))
        real(d, hws)

    monkeypatch.setattr(replica_manager.hw_checkpoint, "write_high_watermarks", counted)

    async def scenario() -> None:
        await rm.leader_and_isr(request(assignment("t", 0, 0), assignment("t", 1, 0)))
        await rm.checkpoint_high_watermarks()
        await rm.checkpoint_high_watermarks()  # nothing changed: not written again
        assert writes == [{("t", 0): 0, ("t", 1): 0}]
        rm.partitions[("t", 1)].high_watermark = 5
        await rm.checkpoint_high_watermarks()
        await rm.checkpoint_high_watermarks()
        assert writes[1:] == [{("t", 0): 0, ("t", 1): 5}]
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 0, ("t", 1): 5}

    asyncio.run(scenario())


def test_an_idle_pass_does_not_walk_the_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no high watermark changed and no partition added or removed, the pass does not
    even look the partitions up (10,000 of them cost an idle broker ~1 % of a core)."""
    lm = LogManager([tmp_path])
    rm = ReplicaManager(ME, lm, MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    lookups: list[tuple[str, int]] = []
    real = lm.log_dir_of
    monkeypatch.setattr(lm, "log_dir_of", lambda t, p: (lookups.append((t, p)), real(t, p))[1])

    async def scenario() -> None:
        await rm.leader_and_isr(request(assignment("t", 0, 0)))
        await rm.checkpoint_high_watermarks()
        assert lookups == [("t", 0)]
        await rm.checkpoint_high_watermarks()
        assert lookups == [("t", 0)]  # idle: not visited
        rm.partitions[("t", 0)].high_watermark = 3
        await rm.checkpoint_high_watermarks()
        assert lookups == [("t", 0)] * 2
        await rm.leader_and_isr(request(assignment("t", 1, 0)))  # a new partition, HW 0
        await rm.checkpoint_high_watermarks()
        assert hw_checkpoint.read_high_watermarks(tmp_path) == {("t", 0): 3, ("t", 1): 0}

    asyncio.run(scenario())
