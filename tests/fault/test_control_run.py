"""The control run: a configuration that *does* lose acknowledged writes, so the checker must
say so. Without it, "lost: 0" could mean the checker cannot see loss.

unclean.leader.election.enable=true, acks=1, RF=2, min.insync.replicas=1: the follower is
paused (SIGSTOP) until it leaves the ISR; the leader alone acknowledges more writes; the
leader is killed and the lagging follower resumed; being the only live replica it is elected
uncleanly; when the old leader returns it truncates to the new leader's log, erasing the
writes only it had. The checker must report lost > 0 — and no other anomaly that would mean
it miscounted (no unexpected or duplicated records).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fault.harness.cluster import FaultCluster, partition_state, wait_partition
from tests.fault.harness.history import History
from tests.fault.harness.workload import ProducerWorkload
from tests.fault.scenario import create_topic, final_check, wait_full_isr, wait_ok

TOPIC = "control"


def test_control_run_unclean_election_acks1_loses_acknowledged_writes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data: Path = tmp_path_factory.mktemp("control")
    with FaultCluster(
        data,
        brokers=2,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as fc:

        async def run() -> None:
            await create_topic(
                fc,
                TOPIC,
                rf=2,
                configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
            )
            state = await partition_state(fc.etcd.endpoint, TOPIC, 0)
            assert state is not None
            leader = int(state["leader"])
            follower = 3 - leader
            history = History()
            fc.history = history
            wl = ProducerWorkload(
                history, fc.live_bootstrap(), TOPIC, partitions=[0], acks=1, delay_s=0.01
            )
            stop = asyncio.Event()
            task = asyncio.create_task(wl.run(stop, max_writes=20_000))
            try:
                await wait_ok(wl, 200, timeout=60, what="replicated writes")
                fc.pause_broker(follower)
                await wait_partition(
                    fc.etcd.endpoint,
                    TOPIC,
                    0,
                    lambda s: s["isr"] == [leader],
                    timeout=30,
                    what="the paused follower to leave the ISR",
                )
                await wait_ok(wl, 200, timeout=60, what="writes acknowledged by the leader alone")
                fc.kill_broker(leader)
                fc.resume_broker(follower)
                await wait_partition(
                    fc.etcd.endpoint,
                    TOPIC,
                    0,
                    lambda s: s["leader"] == follower,
                    timeout=40,
                    what="the lagging follower to be elected uncleanly",
                )
                await wait_ok(wl, 100, timeout=60, what="writes to the unclean leader")
            finally:
                stop.set()
                await asyncio.wait_for(task, 60)
            await asyncio.to_thread(fc.restart_broker, leader)
            await wait_full_isr(fc, TOPIC, [0], 2)
            report = await final_check(fc, history, TOPIC, [0])
            headline = report.summary().splitlines()[0]
            assert (
                headline
                == f"acknowledged records lost: {len(report.lost)} of {report.acknowledged}"
            )
            assert len(report.lost) > 0, "the checker missed the loss of the control run"
            assert not report.unexpected and not report.duplicated, report.summary()
            assert not report.valid

        asyncio.run(run())
