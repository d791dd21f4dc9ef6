"""Idempotence under faults: two producers with 5 requests in flight, while the client<->leader
link is reset and hung and the leader is kill -9'd.

Every client connection to a broker crosses a per-broker TCP proxy (the producers dial through
``address_resolver``), so the test can reset (RST) or hang the link between the producers and
one broker while replication between brokers is untouched. Faults, in order: reset the link to
the leader of partition 0 deaf (requests land, their answers are lost, so the producers retry
batches the leader already has), reset it, hang it (longer than the request timeout), kill -9
that leader.

Checked: every send succeeds, every record is in the log exactly once (0 duplicates of N), for
each producer and partition the offsets follow the send order, and the brokers did answer
retried batches as duplicates (the faults really caused retries of landed writes). A separate
test shows a sequence gap surfacing as a fatal error instead of a silent reset.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from headwater.batch import encode_batch
from headwater.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    NewTopic,
    RecordMetadata,
    TopicPartition,
)
from headwater.errors import OutOfOrderSequenceNumberError
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.fault.harness.cluster import FaultCluster
from tests.fault.harness.proxy import LinkProxy, ProxyHub
from tests.helpers.wait import async_wait_for, wait_for

pytestmark = pytest.mark.slow

TOPIC = "idem"
REQUEST_TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def fcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    with FaultCluster(
        tmp_path_factory.mktemp("idem-faults"),
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "4000"],
    ) as c:
        yield c


def _counter(metrics_port: int, name: str, *labels: str) -> float:
    """The sum of a broker counter's samples carrying every one of ``labels`` (k="v")."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(label in line for label in labels)
    )


def duplicates_answered(metrics_port: int, topic: str = TOPIC) -> float:
    """The broker's count of produce batches answered as duplicates for ``topic``."""
    return _counter(metrics_port, "headwater_broker_produce_duplicates_total", f'topic="{topic}"')


def produce_errors(metrics_port: int, topic: str, error: str) -> float:
    """The broker's count of produce entries for ``topic`` answered with ``error``."""
    return _counter(
        metrics_port,
        "headwater_broker_produce_errors_total",
        f'topic="{topic}"',
        f'error="{error}"',
    )


class ClientLinks:
    """One proxy per broker for client traffic, and the resolver the producers dial with."""

    def __init__(self, cluster: FaultCluster) -> None:
        self.cluster = cluster
        self.hub = ProxyHub()
        self.links: dict[int, LinkProxy] = {
            b: self.hub.link(f"client->{b}", self._target(b)) for b in cluster.brokers
        }

    def _target(self, bid: int) -> Callable[[], tuple[str, int] | None]:
        def target() -> tuple[str, int] | None:
            proc = self.cluster.brokers.get(bid)
            return ("127.0.0.1", proc.port) if proc is not None and proc.port else None

        return target

    def resolve(self, address: str) -> str:
        """Advertised broker address -> its proxy (anything else is dialled as it is)."""
        for bid, proc in self.cluster.brokers.items():
            if proc.port and address == f"127.0.0.1:{proc.port}":
                return self.links[bid].address
        return address

    def close(self) -> None:
        self.hub.close()


class Workload:
    """Two idempotent producers on a background loop, each sending records round-robin over
    the partitions until ``stop`` is set, with up to WINDOW sends outstanding (so traffic
    flows during every fault); records ``(producer, i) -> (partition, offset)``."""

    WINDOW = 400

    def __init__(
        self,
        bootstrap: str,
        resolve: Callable[[str], str],
        partitions: int,
        topic: str = TOPIC,
    ) -> None:
        self.bootstrap = bootstrap
        self.resolve = resolve
        self.partitions = partitions
        self.topic = topic
        #: most batches of one partition outstanding at once (sequenced since the oldest
        #: unacknowledged one): > 1 shows several were in flight together
        self.max_window = 0
        self.acked: dict[tuple[int, int], tuple[int, int]] = {}
        self.sent = [0, 0]
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self.stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the producers did not finish in time"

    async def _settle(self, pid: int, i: int, fut: asyncio.Future[RecordMetadata]) -> None:
        try:
            md = await fut
        except BaseException as exc:
            self.errors.append(exc)
            return
        self.acked[(pid, i)] = (md.partition, md.offset)

    async def _produce(self, pid: int) -> None:
        async with AsyncProducer(
            self.bootstrap,
            acks="all",
            max_in_flight=5,
            linger_ms=1,
            batch_size=2048,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=180_000,
            retry_backoff_ms=50,
            address_resolver=self.resolve,
        ) as p:
            pending: deque[tuple[int, asyncio.Future[RecordMetadata]]] = deque()
            i = 0
            while not self.stop.is_set():
                fut = await p.send(
                    self.topic, f"{pid}-{i:06d}".encode(), partition=i % self.partitions
                )
                pending.append((i, fut))
                if p._seq is not None:
                    for st in p._seq.parts.values():
                        self.max_window = max(self.max_window, len(st.window))
                i += 1
                self.sent[pid] = i
                while len(pending) > self.WINDOW:
                    await self._settle(pid, *pending.popleft())
            while pending:
                await self._settle(pid, *pending.popleft())

    async def _run(self) -> None:
        try:
            await asyncio.gather(self._produce(0), self._produce(1))
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.done.set()


async def _read_log(
    bootstrap: str, partitions: int, topic: str = TOPIC
) -> dict[bytes, list[tuple[int, int]]]:
    """value -> [(partition, offset)] for every record in the topic."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        while any([await c.position(tp) < ends[tp] for tp in tps]):
            for r in await c.poll(timeout_ms=300, max_records=10_000):
                assert r.value is not None
                where[r.value].append((r.partition, r.offset))
        return where


def _leader_of(bootstrap: str, partition: int, topic: str = TOPIC) -> int:
    """The partition's leader, waiting until metadata knows the topic and a leader."""

    async def leader() -> int | None:
        async with AsyncAdminClient(bootstrap) as admin:
            (desc,) = await admin.describe_topics([topic])
            lead = int(desc.partitions[partition].leader)
            return lead if lead > 0 else None

    return asyncio.run(async_wait_for(leader, timeout=60, what=f"a leader of {topic}-{partition}"))


def _isr_of(bootstrap: str, partition: int, topic: str) -> set[int]:
    async def isr() -> set[int]:
        async with AsyncAdminClient(bootstrap) as admin:
            (desc,) = await admin.describe_topics([topic])
            return {int(b) for b in desc.partitions[partition].isr}

    return asyncio.run(isr())


def check_exactly_once_in_order(work: Workload, bootstrap: str) -> None:
    """Every send acknowledged, every record in the log once, each producer's records of a
    partition in send order, and each acknowledged offset the record's offset in the log."""
    partitions = work.partitions
    assert work.errors == [], f"sends failed: {work.errors[:3]}"
    assert len(work.acked) == sum(work.sent), "a send was neither acknowledged nor failed"

    where = asyncio.run(_read_log(bootstrap, partitions, work.topic))
    expected = {f"{p}-{i:06d}".encode() for p in (0, 1) for i in range(work.sent[p])}
    dupes = {v: w for v, w in where.items() if len(w) > 1}
    assert dupes == {}, f"{len(dupes)} duplicated records, e.g. {list(dupes.items())[:3]}"
    assert set(where) == expected, f"{len(expected - set(where))} records missing"

    for pid in (0, 1):
        for part in range(partitions):
            sent = [i for i in range(work.sent[pid]) if i % partitions == part]
            offsets = [where[f"{pid}-{i:06d}".encode()][0][1] for i in sent]
            assert offsets == sorted(offsets), f"producer {pid} partition {part} reordered"
            wrong = [
                (i, work.acked[(pid, i)][1], off)
                for i, off in zip(sent, offsets, strict=True)
                if work.acked[(pid, i)][1] != off
            ]
            assert wrong == [], f"acked != log offset (record, acked, log): {wrong[:5]}"


def test_no_duplicates_and_send_order_kept_under_link_faults_and_leader_kill(
    fcluster: FaultCluster, tmp_path: Path
) -> None:
    partitions = 2

    async def create() -> None:
        async with AsyncAdminClient(fcluster.bootstrap) as admin:
            await admin.create_topics(
                [NewTopic(TOPIC, partitions, 3, {"min.insync.replicas": "2"})]
            )

    asyncio.run(create())
    links = ClientLinks(fcluster)
    work = Workload(fcluster.bootstrap, links.resolve, partitions)
    try:
        leader = _leader_of(fcluster.bootstrap, 0)
        work.start()
        link = links.links[leader]

        def acked_more(n: int) -> Callable[[], bool]:
            target = len(work.acked) + n
            return lambda: len(work.acked) >= target or work.done.is_set()

        wait_for(acked_more(2000), timeout=120, what="2000 records acknowledged")
        link.deafen()  # requests land, answers are lost: retries are duplicates
        # Deaf for two request timeouts (the fault's duration: requests time out and are
        # retried while their originals have landed; ended early if the workload died).
        work.done.wait(2 * REQUEST_TIMEOUT_MS / 1000)
        link.heal()
        wait_for(acked_more(2000), timeout=120, what="progress after the deaf link")
        accepted = link.accepted
        link.cut()  # reset: every connection gets an RST
        wait_for(
            lambda: link.accepted > accepted or work.done.is_set(),
            timeout=30,
            what="a producer to reconnect into the cut link",
        )
        link.heal()
        wait_for(acked_more(2000), timeout=120, what="progress after the reset")
        link.hang()  # no RST: requests time out and are retried behind the held ones
        work.done.wait(2 * REQUEST_TIMEOUT_MS / 1000)
        link.heal()
        wait_for(acked_more(2000), timeout=120, what="progress after the hang")
        # counted before the kill: the leader's counters restart from 0 with it
        dup_before_kill = sum(
            duplicates_answered(p.metrics_port) for p in fcluster.brokers.values()
        )
        fcluster.kill_broker(leader)  # kill -9 the leader
        wait_for(acked_more(2000), timeout=120, what="progress after the leader's kill")
        work.join(timeout=240)
    finally:
        links.close()
    fcluster.restart_broker(leader)

    check_exactly_once_in_order(work, fcluster.bootstrap)
    assert work.max_window > 1, "never more than one batch of a partition in flight"
    dup_after_kill = sum(
        duplicates_answered(proc.metrics_port) for proc in fcluster.brokers.values() if proc.alive()
    )
    print(f"duplicate answers: {dup_before_kill} before the leader's kill, {dup_after_kill} after")
    assert max(dup_before_kill, dup_after_kill) > 0, (
        "no retry hit a batch that had landed: the faults proved nothing"
    )


def test_not_enough_replicas_with_five_in_flight_is_retried_in_order_exactly_once(
    fcluster: FaultCluster,
) -> None:
    """A broker error with batches in flight: min.insync.replicas=3 and a follower killed, so
    the leader answers NOT_ENOUGH_REPLICAS (and requests waiting for the lost follower time
    out) while each producer has several batches of a partition in flight; once the follower
    is back, the retries go out in sequence order and every record lands once (a retry of a
    batch that had landed is answered as a duplicate)."""
    topic = "idem-ner"
    partitions = 2

    async def create() -> None:
        async with AsyncAdminClient(fcluster.bootstrap) as admin:
            await admin.create_topics(
                [NewTopic(topic, partitions, 3, {"min.insync.replicas": "3"})]
            )

    asyncio.run(create())
    leader = _leader_of(fcluster.bootstrap, 0, topic)
    work = Workload(fcluster.bootstrap, lambda address: address, partitions, topic)
    follower = next(b for b in _isr_of(fcluster.bootstrap, 0, topic) if b != leader)
    work.start()

    def acked_more(n: int) -> Callable[[], bool]:
        target = len(work.acked) + n
        return lambda: len(work.acked) >= target or work.done.is_set()

    wait_for(acked_more(2000), timeout=120, what="2000 records acknowledged")
    fcluster.kill_broker(follower)
    wait_for(
        lambda: follower not in _isr_of(fcluster.bootstrap, 0, topic) or work.done.is_set(),
        timeout=60,
        what="the killed follower to leave the ISR (writes refused: ISR < min.insync)",
    )
    # the leader refuses the batches in flight: the fault reaches the producers
    wait_for(
        lambda: produce_errors(fcluster.brokers[leader].metrics_port, topic, "NOT_ENOUGH_REPLICAS")
        > 0
        or work.done.is_set(),
        timeout=60,
        what="the leader answering NOT_ENOUGH_REPLICAS",
    )
    refused = produce_errors(fcluster.brokers[leader].metrics_port, topic, "NOT_ENOUGH_REPLICAS")
    stalled_at = len(work.acked)
    fcluster.restart_broker(follower)
    wait_for(
        lambda: len(_isr_of(fcluster.bootstrap, 0, topic)) == 3 or work.done.is_set(),
        timeout=120,
        what="the follower back in the ISR",
    )
    wait_for(acked_more(2000), timeout=120, what="progress after the follower's return")
    work.join(timeout=240)

    check_exactly_once_in_order(work, fcluster.bootstrap)
    assert work.max_window > 1, "never more than one batch of a partition in flight"
    dups = sum(duplicates_answered(p.metrics_port, topic) for p in fcluster.brokers.values())
    print(
        f"acked {stalled_at} before the stall, {len(work.acked)} in all; {refused:.0f} entries"
        f" refused with NOT_ENOUGH_REPLICAS and retried; {dups:.0f} retries answered as duplicates"
    )
    # retried, in order, exactly once (checked above) after refusals with batches in flight;
    # whether a retry also met a batch that had landed (a duplicate answer) depends on timing
    assert refused > 0


def test_a_sequence_gap_is_fatal_for_the_producer_not_silently_reset(
    fcluster: FaultCluster,
) -> None:
    """Another writer takes sequences 1..3 of the producer's id (as lost records would leave a
    gap the other way round): the producer's next batch (sequence 1) no longer follows the
    partition's last sequence, its predecessor was acknowledged, so the send fails with
    OutOfOrderSequenceNumberError, and so does every later send — nothing is reset."""
    topic = "idem-gap"

    async def run() -> None:
        async with AsyncAdminClient(fcluster.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1, 3, {"min.insync.replicas": "2"})])
        async with AsyncProducer(fcluster.bootstrap, acks="all", linger_ms=0) as p:
            first = await (await p.send(topic, b"first", partition=0))
            seq = p._seq
            assert seq is not None and seq.has_pid
            stolen = encode_batch(
                [b"x", b"y", b"z"],
                producer_id=seq.producer_id,
                producer_epoch=seq.epoch,
                base_sequence=1,
            )
            md = await admin_free_produce(fcluster.bootstrap, topic, stolen)
            assert md == ErrorCode.NONE
            with pytest.raises(OutOfOrderSequenceNumberError):
                await (await p.send(topic, b"second", partition=0))
            with pytest.raises(OutOfOrderSequenceNumberError):
                await (await p.send(topic, b"third", partition=0))
        where = await _read_values(fcluster.bootstrap, topic)
        assert where == [b"first", b"x", b"y", b"z"], "a send after the gap was appended"
        assert first.offset == 0

    asyncio.run(run())


async def admin_free_produce(bootstrap: str, topic: str, batch: bytes) -> int:
    """One raw Produce of ``batch`` to partition 0 of ``topic`` at its leader."""
    async with AsyncAdminClient(bootstrap) as admin:
        (desc,) = await admin.describe_topics([topic])
        leader = desc.partitions[0].leader
        (broker,) = [b for b in (await admin.describe_cluster()).brokers if b.broker_id == leader]
    async with grpc.aio.insecure_channel(f"{broker.host}:{broker.port}") as ch:
        resp = await broker_pb2_grpc.BrokerStub(ch).Produce(
            broker_pb2.ProduceRequest(
                acks=broker_pb2.ACKS_ALL,
                timeout_ms=10_000,
                partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=batch)],
            )
        )
    return int(resp.partitions[0].error_code)


async def _read_values(bootstrap: str, topic: str) -> list[bytes | None]:
    tp = TopicPartition(topic, 0)
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        end = (await c.end_offsets([tp]))[tp]
        got: list[bytes | None] = []
        while await c.position(tp) < end:
            got += [r.value for r in await c.poll(timeout_ms=300)]
        return got
