"""The Kafka path of bench/partitions.py: the same measurements on Apache Kafka.

What each figure is, the cluster and the command line: bench/partitions.py's docstring. The
cluster comes from :func:`bench.peers.kafka.running_cluster` (three combined broker+controller
KRaft nodes); the client is confluent-kafka (librdkafka), synchronous, in this process.
"""

from __future__ import annotations

import argparse
import re
import resource
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from partitions import TOPIC, cpu_pct_since, cpu_s

from bench.peers.kafka import KafkaCluster, ensure_libs, running_cluster

# The KRaft controller refuses an operation of more than 10,000 metadata records
# (QuorumController.MAX_RECORDS_PER_USER_OP in 4.3.1: POLICY_VIOLATION "Unable to perform
# excessively large batch operation"): a topic's creation writes a record per partition plus
# the topic's and its config's (measured with validate_only: 9,997 partitions with
# min.insync.replicas accepted, 9,998 refused). Larger topics are created in steps of this many.
CREATE_STEP = 5_000
# a node's log line when it becomes the active KRaft controller
ACTIVE = re.compile(r"\[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)")


class ProduceFailed(RuntimeError):
    """Delivery reports with errors, or missing when the flush timed out."""


def raise_nofile(pids: list[int], limit: int) -> int:
    """Set RLIMIT_NOFILE of running processes to ``limit`` (soft and hard); without the
    privilege to raise the hard limit, the soft one up to the hard one. Returns the smallest
    soft limit now in effect."""
    effective = []
    for pid in pids:
        hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, max(limit, hard)))
        except (PermissionError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (min(limit, hard), hard))
        effective.append(resource.prlimit(pid, resource.RLIMIT_NOFILE)[0])
    return min(effective)


def _state(admin: AdminClient) -> dict[int, tuple[int, int]]:
    """Partition -> (leader, ISR size) from one Metadata request; empty while the topic is not
    in the answering broker's metadata."""
    try:
        md = admin.list_topics(TOPIC, timeout=10)
    except KafkaException:
        return {}
    topic = md.topics.get(TOPIC)
    if topic is None or topic.error is not None:
        return {}
    return {p.id: (p.leader, len(p.isrs)) for p in topic.partitions.values()}


def _active_controller(cluster: KafkaCluster) -> int | None:
    """The KRaft controller in charge now: the node that logged becoming it at the highest
    epoch (a kill of that node adds a controller election to the failover)."""
    best: tuple[int, int] | None = None
    for proc in cluster.procs:
        with open(proc.log_path, errors="replace") as log:
            for line in log:
                if m := ACTIVE.search(line):
                    epoch, node = int(m[2]), int(m[1])
                    best = max(best or (epoch, node), (epoch, node))
    return None if best is None else best[1]


def _until(what: str, check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - start


def _create(admin: AdminClient, partitions: int, timeout: float) -> str | None:
    """CreateTopics with ``partitions`` at RF=3, min.insync.replicas=2; if the controller
    refuses it as too large, the topic with :data:`CREATE_STEP` partitions and CreatePartitions
    requests adding as many until ``partitions``. Returns a note saying so, or None."""

    def topic(n: int) -> None:
        new = NewTopic(TOPIC, n, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([new], request_timeout=timeout)[TOPIC].result(timeout)

    try:
        topic(partitions)
        return None
    except KafkaException as exc:
        err = exc.args[0]
        if not isinstance(err, KafkaError) or err.code() != KafkaError.POLICY_VIOLATION:
            raise RuntimeError(f"CreateTopics failed: {exc}") from exc
        refused = err.str()
    try:
        topic(CREATE_STEP)
        total = CREATE_STEP
        while total < partitions:
            total = min(partitions, total + CREATE_STEP)
            fs = admin.create_partitions([NewPartitions(TOPIC, total)], request_timeout=timeout)
            fs[TOPIC].result(timeout)
    except KafkaException as exc:
        raise RuntimeError(f"creating the topic in steps failed: {exc}") from exc
    return (
        f"CreateTopics of {partitions} refused ({refused}): created with {CREATE_STEP}, then "
        f"CreatePartitions up to {partitions} in steps of {CREATE_STEP}"
    )


def _send(producer: Producer, partitions: list[int], value: bytes, errors: list[str]) -> None:
    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"partition {msg.partition()}: {err.str()}")

    for p in partitions:
        producer.produce(TOPIC, value, partition=p, on_delivery=delivered)


def _delivered(producer: Producer, count: int, errors: list[str], timeout: float) -> None:
    """Flush until every delivery report of the last ``count`` sends arrived, error-free."""
    left = producer.flush(timeout)
    if errors:
        raise ProduceFailed(f"{len(errors)} of {count} delivery reports failed, first: {errors[0]}")
    if left:
        raise ProduceFailed(f"{left} of {count} records not acknowledged within {timeout:.0f} s")


def _produce_round(producer: Producer, partitions: list[int], timeout: float) -> float:
    errors: list[str] = []
    start = time.monotonic()
    _send(producer, partitions, b"x" * 100, errors)
    _delivered(producer, len(partitions), errors, timeout)
    return time.monotonic() - start


def run(cluster: KafkaCluster, partitions: int, args: argparse.Namespace) -> dict:
    """One size on a started cluster: the row bench/partitions.py prints."""
    pids = {i + 1: proc.pid for i, proc in enumerate(cluster.procs)}  # node.id -> JVM
    row: dict[str, object] = {
        "system": "kafka",
        "partitions": partitions,
        "heap": args.kafka_heap,
        "nofile": raise_nofile(list(pids.values()), args.kafka_nofile),
        "max_map_count": int(Path("/proc/sys/vm/max_map_count").read_text()),
    }
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    t0 = time.monotonic()
    note = _create(admin, partitions, args.timeout)
    if note is not None:
        row["create"] = note
        print(f"  {partitions}: {note}", flush=True)

    def settled() -> bool:
        state = _state(admin)
        return len(state) == partitions and all(
            leader >= 0 and isr == 3 for leader, isr in state.values()
        )

    _until("leaders and full ISRs", settled, args.timeout)
    settle_s = time.monotonic() - t0
    row["settle_s"] = round(settle_s, 1)
    print(f"  {partitions}: settled in {settle_s:.1f} s", flush=True)

    before = {node: cpu_s(pid) for node, pid in pids.items()}
    time.sleep(args.idle_s)
    idle = cpu_pct_since(pids, before, args.idle_s)
    row["idle_cpu_pct"] = idle
    print(f"  {partitions}: idle CPU % per node {idle}", flush=True)
    time.sleep(max(0.0, args.steady_after_s - args.idle_s))
    before = {node: cpu_s(pid) for node, pid in pids.items()}
    time.sleep(args.idle_s)
    steady = cpu_pct_since(pids, before, args.idle_s)
    row["steady_idle_cpu_pct"] = steady
    print(f"  {partitions}: steady idle CPU % per node {steady}", flush=True)

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    try:
        rounds = [
            _produce_round(producer, list(range(partitions)), args.timeout)
            for _ in range(args.rounds)
        ]
    except ProduceFailed as exc:  # recorded as the result, as on Headwater
        row["produce_error"] = str(exc)
        return row
    row["produce_round_s"] = round(max(rounds), 2)
    print(f"  {partitions}: produce rounds {[round(r, 2) for r in rounds]}", flush=True)

    # the leaders now (not at settle time: Kafka may have moved some since, e.g. its preferred
    # leader election every leader.imbalance.check.interval.seconds)
    leaders = {p: leader for p, (leader, _) in _state(admin).items()}
    counts: dict[int, int] = {}
    for leader in leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    victim = max(counts, key=lambda n: counts[n])
    led = [p for p, leader in leaders.items() if leader == victim]
    survivors = AdminClient(
        {
            "bootstrap.servers": ",".join(
                f"127.0.0.1:{port}"
                for i, port in enumerate(cluster.broker_ports)
                if i + 1 != victim
            )
        }
    )
    row["active_controller"] = _active_controller(cluster)
    errors: list[str] = []
    t_kill = time.monotonic()
    cluster.procs[victim - 1].kill9()
    _send(producer, led, b"y" * 100, errors)

    def moved() -> bool:
        producer.poll(0)  # serve the delivery reports meanwhile
        now = _state(survivors)
        return bool(now) and all(now[p][0] not in (-1, victim) for p in led)

    _until("new leaders", moved, args.timeout)
    failover_s = time.monotonic() - t_kill
    row.update(killed_broker=victim, partitions_led=len(led), failover_s=round(failover_s, 2))
    try:
        _delivered(producer, len(led), errors, args.timeout)
        row["failover_acked_s"] = round(time.monotonic() - t_kill, 2)
    except ProduceFailed as exc:
        row["failover_error"] = str(exc)
    return row


def measure(partitions: int, args: argparse.Namespace, root: Path | None) -> dict:
    """A fresh three-node cluster (data under ``root``, kept; or a temporary folder), one
    size measured on it, the nodes stopped by PID; a wait that timed out is the row."""
    heap = [f"-Xms{args.kafka_heap}", f"-Xmx{args.kafka_heap}"]
    with running_cluster(ensure_libs(), 3, heap=heap, root=root) as cluster:
        try:
            return run(cluster, partitions, args)
        except RuntimeError as exc:
            print(f"  {partitions}: {exc}", flush=True)
            return {"system": "kafka", "partitions": partitions, "failed": str(exc)}
