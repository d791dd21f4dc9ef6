"""A LocalCluster for fault tests: process faults, proxied broker links, etcd views.

:class:`FaultCluster` is a :class:`headwater.dev.cluster.LocalCluster` (real etcd, controller
and broker processes on 127.0.0.1) plus:

* **process faults** — ``kill_broker`` (SIGKILL, inherited), ``pause_broker`` /
  ``resume_broker`` (SIGSTOP / SIGCONT on the PID: the process keeps its sockets and its etcd
  lease keeps running out while it is frozen), ``pause_controller`` / ``resume_controller``;
  ``stop()`` resumes paused processes first so they can be stopped by SIGTERM;
* **link faults** (``peer_proxies=True``) — one :class:`LinkProxy` per ordered broker pair:
  broker ``i`` starts with ``--peer-override j=<proxy i->j>`` for every other broker ``j``,
  so its replication traffic to ``j`` crosses ``links[(i, j)]`` (the proxy resolves ``j``'s
  current port per connection, so restarts are followed). Client traffic is not proxied:
  brokers advertise their own address (there is no advertised-address flag), so client-side
  partitions are made with SIGSTOP;
* **per-broker arguments** (``broker_extra``), appended after the shared ``broker_args``;
* **etcd views** — the authoritative partition state (leader, leader epoch, ISR) is read from
  ``/headwater/partitions/<topic>/<p>``, not from a broker's possibly stale metadata cache.

Ownership: the test thread drives the cluster; the proxies run on their hub's thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from headwater.dev.cluster import LocalCluster, ServiceProcess
from headwater.platform import etcd as hetcd
from tests.fault.harness.history import History
from tests.fault.harness.proxy import LinkProxy, ProxyHub


class FaultCluster(LocalCluster):
    """See the module doc. Extra keyword arguments go to LocalCluster."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        peer_proxies: bool = False,
        broker_extra: Mapping[int, Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_dir, **kwargs)
        self.history: History | None = None
        self.hub: ProxyHub | None = None
        self.links: dict[tuple[int, int], LinkProxy] = {}
        self.paused: set[str] = set()
        self._extra = {b: list(a) for b, a in (broker_extra or {}).items()}
        if peer_proxies:
            self.hub = ProxyHub()
            ids = range(1, self._n_brokers + 1)
            for i in ids:
                for j in ids:
                    if i != j:
                        self.links[(i, j)] = self.hub.link(f"{i}->{j}", self._resolver(j))
                        self._extra.setdefault(i, []).extend(
                            ["--peer-override", f"{j}={self.links[(i, j)].address}"]
                        )

    def _resolver(self, bid: int) -> Callable[[], tuple[str, int] | None]:
        def target() -> tuple[str, int] | None:
            proc = self.brokers.get(bid)
            if proc is None or not proc.port:
                return None
            return ("127.0.0.1", proc.port)

        return target

    def _broker(self, bid: int) -> ServiceProcess:
        proc = super()._broker(bid)
        proc.argv += self._extra.get(bid, [])
        return proc

    def __enter__(self) -> FaultCluster:
        self.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        for proc in [*self.brokers.values(), *self.controllers.values()]:
            if proc.name in self.paused and proc.alive():
                os.kill(proc.pid, signal.SIGCONT)
        self.paused.clear()
        try:
            super().stop(timeout)
        finally:
            if self.hub is not None:
                self.hub.close()
                self.hub = None

    # ---- faults (each recorded in ``history`` when one is attached)

    def _note(self, action: str, detail: str) -> None:
        if self.history is not None:
            self.history.nemesis(action, detail)

    def kill_broker(self, bid: int) -> None:
        self._note("kill", f"broker-{bid}")
        self.paused.discard(f"broker-{bid}")
        super().kill_broker(bid)

    def restart_broker(self, bid: int, *, wait: bool = True) -> None:
        self._note("restart", f"broker-{bid}")
        super().restart_broker(bid, wait=wait)

    def kill_controller(self, cid: int) -> None:
        self._note("kill", f"controller-{cid}")
        super().kill_controller(cid)

    def restart_controller(self, cid: int, *, wait: bool = True) -> None:
        self._note("restart", f"controller-{cid}")
        super().restart_controller(cid, wait=wait)

    def _signal(self, proc: ServiceProcess, sig: signal.Signals, action: str) -> None:
        self._note(action, proc.name)
        os.kill(proc.pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(proc.name)
        else:
            self.paused.discard(proc.name)

    def pause_broker(self, bid: int) -> None:
        self._signal(self.brokers[bid], signal.SIGSTOP, "pause")

    def resume_broker(self, bid: int) -> None:
        self._signal(self.brokers[bid], signal.SIGCONT, "resume")

    def pause_controller(self, cid: int) -> None:
        self._signal(self.controllers[cid], signal.SIGSTOP, "pause")

    def resume_controller(self, cid: int) -> None:
        self._signal(self.controllers[cid], signal.SIGCONT, "resume")

    def cut_link(self, src: int, dst: int) -> None:
        self._note("cut", f"{src}->{dst}")
        self.links[(src, dst)].cut()

    def hang_link(self, src: int, dst: int) -> None:
        self._note("hang", f"{src}->{dst}")
        self.links[(src, dst)].hang()

    def isolate_broker(self, bid: int, *, mode: str = "cut") -> None:
        """Cut (or hang) every replication link into and out of ``bid``."""
        self._note(f"isolate-{mode}", f"broker-{bid}")
        for (i, j), link in self.links.items():
            if bid in (i, j):
                link.cut() if mode == "cut" else link.hang()

    def heal_links(self) -> None:
        self._note("heal", "all links")
        for link in self.links.values():
            link.heal()

    # ---- views

    @property
    def live_brokers(self) -> list[int]:
        return [
            b for b, p in self.brokers.items() if p.alive() and p.port and p.name not in self.paused
        ]

    def live_bootstrap(self) -> str:
        """Addresses of the brokers that are running and not paused."""
        return ",".join(self.brokers[b].address for b in self.live_brokers)


async def partition_state(
    etcd_endpoint: str, topic: str, partition: int, **etcd_kwargs: Any
) -> dict[str, Any] | None:
    """The controller's record of a partition (leader, leader_epoch, isr, ...) from etcd
    (``etcd_kwargs``: ``ca``/``cert``/``key`` of a TLS etcd)."""
    client = await hetcd.Etcd.connect(etcd_endpoint, **etcd_kwargs)
    try:
        got = await client.get(f"/headwater/partitions/{topic}/{partition}")
    finally:
        await client.close()
    return None if got is None else dict(json.loads(got[0]))


async def wait_partition(
    etcd_endpoint: str,
    topic: str,
    partition: int,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Poll the partition's etcd state until ``predicate`` holds (bounded)."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while True:
        last = await partition_state(etcd_endpoint, topic, partition)
        if last is not None and predicate(last):
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last {last}")
        await asyncio.sleep(0.1)


async def active_controller(etcd_endpoint: str) -> int | None:
    """The id of the controller holding ``/headwater/controller/leader`` (None: none yet)."""
    client = await hetcd.Etcd.connect(etcd_endpoint)
    try:
        got = await client.get("/headwater/controller/leader")
    finally:
        await client.close()
    return None if got is None else int(json.loads(got[0])["controller_id"])


async def topic_states(etcd_endpoint: str, topic: str) -> dict[int, dict[str, Any]]:
    """partition -> its etcd state, for every partition key of ``topic`` present."""
    client = await hetcd.Etcd.connect(etcd_endpoint)
    try:
        snap = await client.get_prefix(f"/headwater/partitions/{topic}/")
    finally:
        await client.close()
    out: dict[int, dict[str, Any]] = {}
    for kv in snap.items:
        out[int(kv.key.rsplit("/", 1)[1])] = dict(json.loads(kv.value))
    return out
