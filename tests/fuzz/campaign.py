"""A bounded fuzzing campaign over every RPC of a running cluster.

:func:`start_cluster` starts the *dedicated* fuzz cluster (etcd, 1 controller, 1 broker,
1 coordinator) and seeds names for the generator to hit: a topic with records, a consumer
group, a transactional id. The campaign sends destructive control RPCs too (LeaderAndIsr,
StopReplica, DeleteTopics, ControlledShutdown, ...), which can leave that cluster's data in
any state — that is why it is its own cluster, and why those RPCs run last
(:data:`tests.fuzz.rpcs.DESTRUCTIVE`). What is asserted is only robustness: acceptable
answers, no hang, every process alive and SERVING after each RPC's budget, and no traceback
in any process log.

:func:`run_campaign` gives each RPC an equal share of ``seconds`` (and at most
``max_examples`` examples); hypothesis generates the requests (generation phase only: a bad
answer is recorded with its request instead of being shrunk, so the budget holds).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from headwater.dev.cluster import LocalCluster
from headwater.v1 import controller_pb2, controller_pb2_grpc
from tests.fuzz import guard, protogen, rpcs

TOPIC = "fuzz-a"
NAMES = (
    TOPIC, "__consumer_offsets", "__transaction_state", "fuzz-g", "fuzz-t", "", ".", "..",
    "a" * 250, "no-such", "fuzz-new", "User:ANONYMOUS", "SCRAM-SHA-256", "range",
)  # fmt: skip
_ROUND = 10  # examples per hypothesis run
#: Lines in a process log that mean a handler raised something unexpected.
_BENIGN = "ExecuteBatchError raised in core"
LOG_ALARMS = ("Traceback (most recent call last)", "unexpected error in handler")


def start_cluster(
    data_dir: Path,
    *,
    brokers: int = 1,
    launch_prefix: Callable[[str], Sequence[str]] | None = None,
) -> LocalCluster:
    """Start and seed the dedicated fuzz cluster (the caller stops it); ``launch_prefix``
    e.g. :meth:`tests.fuzz.memcap.MemoryCap.prefix` (every service under a memory cap)."""
    cluster = LocalCluster(
        data_dir,
        brokers=brokers,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
        launch_prefix=launch_prefix,
        tls=False,  # a default cluster, as a new user gets it (the fuzzers' clients are plain)
        authorizer=False,
    ).start()
    try:
        with grpc.insecure_channel(cluster.controller_addresses[0]) as ch:
            resp = controller_pb2_grpc.ControllerStub(ch).CreateTopics(
                controller_pb2.CreateTopicsRequest(
                    topics=[controller_pb2.NewTopic(name=TOPIC, partitions=2, replication_factor=1)]
                ),
                timeout=30,
            )
        assert resp.topics[0].error_code == 0, resp
        guard.produce_acked(cluster, 0, [b"a", b"b"], topic=TOPIC)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def addresses(cluster: LocalCluster) -> dict[str, list[str]]:
    return {
        "broker": [p.address for p in cluster.brokers.values()],
        "controller": list(cluster.controller_addresses),
        "coordinator": list(cluster.coordinator_addresses),
    }


def log_alarms(cluster: LocalCluster) -> list[str]:
    """The first line of every alarming log record (with its file) in the service logs.

    A record is a line starting with a timestamp plus its continuation lines. Benign: grpc's
    own "ExecuteBatchError raised in core" record, logged when a client cancels a stream
    while the server is writing to it (the peer went away; no handler failed)."""
    found = []
    for path in sorted(cluster.logs_dir.glob("*.log")):
        if path.name == "etcd.log":
            continue
        record: list[str] = []
        for line in [*path.read_text(errors="replace").splitlines(), "0000-end"]:
            if line[:4].isdigit() and record:
                text = "\n".join(record)
                if any(a in text for a in LOG_ALARMS) and _BENIGN not in record[0]:
                    found.append(f"{path.name}: {record[0].strip()}")
                record = []
            record.append(line)
    return found


def _fuzz_one(
    rpc: rpcs.Rpc,
    targets: list[str],
    channels: dict[str, grpc.Channel],
    seconds: float,
    max_examples: int,
    tally: rpcs.Tally,
) -> None:
    strategy: st.SearchStrategy[Any] = protogen.messages(rpc.method.input_type, NAMES)
    if rpc.method.client_streaming:
        strategy = st.lists(strategy, min_size=1, max_size=3)
    stop_at = time.monotonic() + seconds
    done = [0]

    @settings(
        max_examples=_ROUND,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy, st.sampled_from(targets))
    def one(request: Any, address: str) -> None:
        if time.monotonic() > stop_at or done[0] >= max_examples:
            return
        done[0] += 1
        try:
            outcome = rpcs.run_queue_with_timeout(
                lambda: rpcs.call(channels[address], rpc, request), rpcs.CALL_DEADLINE + 10
            )
        except TimeoutError as exc:
            outcome = rpcs.Outcome("bad", f"client-side hang: {exc}")
        tally.record(rpc, address, request, outcome)

    # hypothesis cannot be stopped on a clock: rounds of _ROUND examples (fresh random seed
    # each, no example database) until the time share or the example cap is used up
    while time.monotonic() < stop_at and done[0] < max_examples:
        one()


def run_campaign(
    cluster: LocalCluster, seconds: float, *, max_examples: int = 1_000_000, verbose: bool = False
) -> rpcs.Tally:
    """Fuzz every RPC for ``seconds`` in total; the tally holds every bad answer found."""
    tally = rpcs.Tally()
    started = time.monotonic()
    by_kind = addresses(cluster)
    all_rpcs = rpcs.all_rpcs()
    channels = {a: rpcs.open_channel(a) for addrs in by_kind.values() for a in addrs}
    try:
        for i, rpc in enumerate(all_rpcs):
            targets = [a for k in rpc.kinds for a in by_kind[k]]
            left = seconds - (time.monotonic() - started)
            share = max(0.5, left / (len(all_rpcs) - i))
            _fuzz_one(rpc, targets, channels, share, max_examples, tally)
            if verbose:
                print(f"{rpc.name}: {tally.calls[rpc.name]} calls", file=sys.stderr, flush=True)
            for kind, addrs in by_kind.items():
                for a in addrs:
                    if not rpcs.healthy(a):
                        tally.bad.append(f"{kind} {a} not SERVING after fuzzing {rpc.name}")
    finally:
        for ch in channels.values():
            ch.close()
    procs = [*cluster.brokers.values(), *cluster.controllers.values()]
    procs += list(cluster.coordinators.values())
    tally.bad += [f"{p.name} exited" for p in procs if not p.alive()]
    tally.bad += log_alarms(cluster)
    tally.seconds = time.monotonic() - started
    return tally


def report(tally: rpcs.Tally) -> str:
    """A human summary: calls and outcomes per RPC, then every bad answer."""
    lines = [f"{sum(tally.calls.values())} calls over {len(tally.calls)} RPCs "
             f"in {tally.seconds:.1f}s; bad answers: {len(tally.bad)}"]  # fmt: skip
    for name in sorted(tally.calls):
        kinds = {k: n for (r, k), n in tally.outcomes.items() if r == name}
        lines.append(f"  {name}: {tally.calls[name]} {dict(sorted(kinds.items()))}")
    lines += ["BAD: " + b for b in tally.bad]
    return "\n".join(lines)
