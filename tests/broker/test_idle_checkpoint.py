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
