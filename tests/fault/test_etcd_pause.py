"""etcd paused (SIGSTOP) past the coordinators' and the controller's lease TTL under load.

Real processes: etcd, two controllers, one broker, two coordinators; the coordinator and
controller leases are 2 s (``--lease-ttl 2``; the broker's is 10 s and may expire too). A
thread commits rising offsets round-robin over 8 groups (``Committer``) and another runs
transactions (one record each, committed) while etcd is stopped until the active controller
stepped down and every coordinator lost its lease and failed a first re-registration
attempt (etcd's 5 s RPC deadline: the outage outlasts the leases); meanwhile the processes
keep running and a group's former owner answers NOT_COORDINATOR. Then etcd is resumed.
Afterwards:

* the coordinator, controller and broker processes are the same PIDs, still running (a lost
  lease no longer stops a coordinator);
* each coordinator's registration key is under a new lease, and a controller was elected
  again (a higher controller epoch);
* every group gets commits acknowledged again, and every last acknowledged commit is what
  OffsetFetch returns (only a commit sent but unanswered may show instead);
* transactions commit again, and every acknowledged one is readable (read_committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from headwater import errors
from headwater.client import Consumer, Producer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.platform import etcd as hetcd
from headwater.platform.cluster_layout import LEADER_KEY
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator.registration import IDS_PREFIX
from tests.coordinator.service_helpers import (
    Committer,
    create_topics,
    fetched,
    find,
    owner,
    stub,
)
from tests.helpers.wait import wait_for

GROUPS = [f"pause-{i}" for i in range(8)]
TXN_TOPIC = "pause-txn-out"


class TxnLoop:
    """One transactional producer committing one-record transactions in a loop; ``acked``
    holds the values of the transactions whose commit was acknowledged, ``acked_after``
    those acknowledged after ``after`` was set. A failed transaction is aborted, or, when
    that fails too, the producer is replaced (InitProducerId completes what was pending)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: list[int] = []
        self.acked_after: list[int] = []
        self.after = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-loop", daemon=True)

    def _producer(self) -> Producer:
        while not self._stop.is_set():
            p = Producer(self.bootstrap, transactional_id="pause-txn", request_timeout_ms=5_000)
            try:
                p.init_transactions(timeout=30)
                return p
            except (errors.HeadwaterError, TimeoutError):
                with contextlib.suppress(Exception):
                    p.close(5)
        raise InterruptedError

    def _run(self) -> None:
        n = 0
        try:
            p = self._producer()
        except InterruptedError:
            return
        try:
            while not self._stop.is_set():
                n += 1
                try:
                    p.begin_transaction()
                    p.send(TXN_TOPIC, str(n).encode(), partition=0)
                    p.commit_transaction(timeout=30)
                except (errors.HeadwaterError, TimeoutError):
                    try:
                        p.abort_transaction(timeout=30)
                    except (errors.HeadwaterError, TimeoutError):
                        with contextlib.suppress(Exception):
                            p.close(5)
                        p = self._producer()
                    continue
                self.acked.append(n)
                if self.after.is_set():
                    self.acked_after.append(n)
        except InterruptedError:
            return
        finally:
            with contextlib.suppress(Exception):
                p.close(5)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self._thread.is_alive()


def committed_values(bootstrap: str, want: set[int]) -> set[int]:
    """The values of TXN_TOPIC visible to a read_committed consumer (until ``want`` is seen
    or the end is reached)."""
    tp = TopicPartition(TXN_TOPIC, 0)
    seen: set[int] = set()
    with Consumer(bootstrap, isolation_level="read_committed", enable_auto_commit=False) as c:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]

        def done() -> bool:
            seen.update(int(r.value) for r in c.poll(timeout_ms=500) if r.value is not None)
            return want <= seen or c.position(tp) >= end

        wait_for(done, timeout=60, what="the committed transactions read back")
    return seen


async def _registrations(endpoint: str) -> dict[str, int]:
    """Lease id of each coordinator's ids key; the active controller's epoch and id
    (``controller``, ``controller_id``) from the leader key."""
    client = await hetcd.Etcd.connect(endpoint)
    try:
        snap = await client.get_prefix(IDS_PREFIX)
        out = {f"coordinator-{kv.key[len(IDS_PREFIX) :]}": kv.meta.lease_id for kv in snap.items}
        leader = await client.get(LEADER_KEY)
        if leader is not None:
            info = json.loads(leader[0])
            out["controller"] = int(info["epoch"])
            out["controller_id"] = int(info["controller_id"])
        return out
    finally:
        await client.close()


def registered(c: LocalCluster, check: Callable[[dict[str, int]], bool]) -> dict[str, int] | None:
    """The registrations (:func:`_registrations`) when ``check`` accepts them, else None."""
    r = asyncio.run(_registrations(c.etcd.endpoint))
    return r if check(r) else None


def _logged(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False


def test_coordinators_and_controller_survive_an_etcd_pause(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path,
        brokers=1,
        controllers=2,
        coordinators=2,
        controller_lease_ttl=2,
        coordinator_args=[
            "--offsets-topic-partitions",
            "4",
            "--transaction-state-partitions",
            "2",
            "--lease-ttl",
            "2",
        ],
        etcd_unsafe_no_fsync=True,
    ) as c:
        create_topics(c, "t", TXN_TOPIC)
        for g in GROUPS:
            owner(c, g)
        services = {
            **{p.name: p for p in c.coordinators.values()},
            **{p.name: p for p in c.controllers.values()},
            "broker-1": c.brokers[1],
        }
        pids = {name: p.pid for name, p in services.items()}
        before = wait_for(
            lambda: registered(c, lambda r: len(r) == 4),
            timeout=30,
            what="both coordinators and the controller registered",
        )
        committer = Committer(c, GROUPS)
        txns = TxnLoop(c.bootstrap)
        committer.start()
        txns.start()
        try:
            wait_for(lambda: len(committer.acked) == len(GROUPS), timeout=60, what="commits")
            wait_for(lambda: len(txns.acked) >= 3, timeout=60, what="committed transactions")

            was = find(c, GROUPS[0])
            assert was is not None
            was_owner = stub(f"{was.coordinator.host}:{was.coordinator.port}")
            active = c.controllers[before["controller_id"]]
            os.kill(c.etcd.pid, signal.SIGSTOP)
            try:
                # the leases are lost, and the outage goes on: the coordinators' first
                # re-registration attempts fail (etcd's RPC deadline) while they keep running
                wait_for(
                    lambda: all(
                        _logged(p.log_path, "re-registration failed")
                        for p in c.coordinators.values()
                    )
                    and _logged(active.log_path, "stepping down"),
                    timeout=60,
                    what="the coordinators and the controller to notice their leases lost",
                )
                assert all(p.alive() for p in services.values())
                # the owner gave the group's partition up: NOT_COORDINATOR, not a stale answer
                assert fetched(was_owner, GROUPS[0]).error_code == ErrorCode.NOT_COORDINATOR
            finally:
                os.kill(c.etcd.pid, signal.SIGCONT)
            committer.after_kill.set()
            txns.after.set()

            def renewed(r: dict[str, int]) -> bool:
                coordinators = [n for n in before if n.startswith("coordinator")]
                return (
                    set(r) == set(before)
                    and r["controller"] > before["controller"]
                    and all(r[n] != before[n] for n in coordinators)
                )

            wait_for(
                lambda: registered(c, renewed),
                timeout=60,
                what="the coordinators re-registered and a controller elected",
            )
            wait_for(
                lambda: committer.acks_after_kill >= set(GROUPS),
                timeout=90,
                what="commits of every group acknowledged after the pause",
            )
            wait_for(lambda: txns.acked_after, timeout=90, what="a transaction after the pause")
        finally:
            committer.stop()
            txns.stop()

        assert {name: p.pid for name, p in services.items() if p.alive()} == pids
        assert committer.mismatches() == []
        visible = committed_values(c.bootstrap, set(txns.acked))
        assert set(txns.acked) <= visible, sorted(set(txns.acked) - visible)[:10]
