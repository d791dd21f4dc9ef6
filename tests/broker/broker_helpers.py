"""Helpers for broker tests: a real broker process against the real etcd, and the test in
the controller's role (it sends LeaderAndIsr / UpdateMetadata / StopReplica over gRPC itself,
stamped with the broker epoch read from etcd; no controller process is needed). Like a
controller it speaks with the cluster's internal identity (tests/helpers/internal.py) and
publishes its controller epoch in etcd, where brokers confirm a new epoch before adopting it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from headwater.client.grpc_options import channel_options
from headwater.dev.procs import ChildProcess, python_env, wait_until
from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.platform.cluster_layout import EPOCH_KEY
from headwater.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.internal import cluster_key, internal_channel

REPO = Path(__file__).resolve().parents[2]


def record_topic(endpoint: str, name: str, partitions: int, replicas: list[int]) -> None:
    """Write ``name``'s record in etcd as the real controller would (``ActingController``
    does not): a broker starting up keeps only the logs the cluster's topics assign to it."""
    topic = cluster_layout.Topic(
        name, f"id-{name}", {p: list(replicas) for p in range(partitions)}, {}
    )

    async def run() -> None:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            await client.put(cluster_layout.topic_key(name), topic.encode())
        finally:
            await client.close()

    asyncio.run(run())


def read_registration(endpoint: str, broker_id: int) -> tuple[dict[str, object], int] | None:
    """The broker's registration value and epoch (create revision), or None."""

    async def run() -> tuple[dict[str, object], int] | None:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            got = await client.get(f"/headwater/brokers/ids/{broker_id}")
        finally:
            await client.close()
        if got is None:
            return None
        return json.loads(got[0]), got[1].create_revision

    return asyncio.run(run())


@dataclass
class BrokerProc:
    """One ``python -m services.broker`` child process (started and stopped by PID)."""

    broker_id: int
    data_dir: Path
    etcd: str
    log_path: Path
    port: int = 0
    metrics_port: int = 0
    child: ChildProcess | None = field(default=None, repr=False)
    extra_args: list[str] = field(default_factory=list)
    #: the cluster token key the broker loaded (read from etcd once it is ready)
    token_key: bytes = b""

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ready_file(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.ready"

    def start(self, timeout: float = 30.0) -> None:
        self.ready_file.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "services.broker",
            "--broker-id", str(self.broker_id),
            "--host", "127.0.0.1",
            "--port", "0",
            "--data-dirs", str(self.data_dir),
            "--etcd", self.etcd,
            "--metrics-port", "0",
            "--ready-file", str(self.ready_file),
            *self.extra_args,
        ]  # fmt: skip
        self.child = ChildProcess(f"broker-{self.broker_id}", argv, self.log_path, python_env())
        self.child.start()
        wait_until(
            self.ready_file.exists, timeout=timeout, what="broker ready file", watch=[self.child]
        )
        ready = json.loads(self.ready_file.read_text())
        self.port, self.metrics_port = ready["port"], ready["metrics_port"]
        self.token_key = cluster_key(self.etcd)

    def stop(self) -> int | None:
        return self.child.stop() if self.child is not None else None

    def epoch(self) -> int:
        reg = read_registration(self.etcd, self.broker_id)
        assert reg is not None, "broker is not registered"
        return reg[1]


class ActingController:
    """The test as the active controller of a one-broker cluster."""

    def __init__(self, broker: BrokerProc, controller_epoch: int = 1) -> None:
        self.broker = broker
        self._controller_epoch = 0
        self.controller_epoch = controller_epoch
        self.topics: dict[str, metadata_pb2.TopicMetadata] = {}
        self.configs: dict[str, dict[str, str]] = {}
        #: topic ids sent for a topic name (default ``id-<name>``): another id for a known
        #: name plays a topic deleted and created again
        self.topic_ids: dict[str, str] = {}
        self.connect()

    def topic_id(self, topic: str) -> str:
        return self.topic_ids.get(topic, f"id-{topic}")

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    @controller_epoch.setter
    def controller_epoch(self, epoch: int) -> None:
        """Take the controller epoch ``epoch`` as an election would: etcd holds it first."""

        async def publish() -> None:
            client = await hetcd.Etcd.connect(self.broker.etcd)
            try:
                got = await client.get(EPOCH_KEY)
                if got is None or int(got[0]) < epoch:
                    await client.put(EPOCH_KEY, str(epoch))
            finally:
                await client.close()

        asyncio.run(publish())
        self._controller_epoch = epoch

    def connect(self) -> None:
        self.channel = internal_channel(
            self.broker.addr, self.broker.token_key, options=channel_options()
        )
        self.stub = broker_pb2_grpc.BrokerStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def leader_and_isr(
        self,
        topic: str,
        states: list[metadata_pb2.PartitionState],
        configs: Mapping[str, str] | None = None,
        *,
        controller_epoch: int | None = None,
        broker_epoch: int | None = None,
    ) -> broker_pb2.LeaderAndIsrResponse:
        req = broker_pb2.LeaderAndIsrRequest(
            controller_id=1000,
            controller_epoch=self.controller_epoch
            if controller_epoch is None
            else controller_epoch,
            broker_epoch=self.broker.epoch() if broker_epoch is None else broker_epoch,
        )
        for s in states:
            req.partitions.append(
                broker_pb2.PartitionAssignment(
                    topic=topic, topic_id=self.topic_id(topic), state=s, configs=dict(configs or {})
                )
            )
        return self.stub.LeaderAndIsr(req, timeout=30)

    def update_metadata(
        self, *, controller_epoch: int | None = None, broker_epoch: int | None = None
    ) -> broker_pb2.UpdateMetadataResponse:
        b = self.broker
        req = broker_pb2.UpdateMetadataRequest(
            controller_id=1000,
            controller_epoch=self.controller_epoch
            if controller_epoch is None
            else controller_epoch,
            broker_epoch=b.epoch() if broker_epoch is None else broker_epoch,
            cluster_id="test-cluster",
            brokers=[
                metadata_pb2.BrokerInfo(
                    broker_id=b.broker_id, host="127.0.0.1", port=b.port, broker_epoch=b.epoch()
                )
            ],
            topics=list(self.topics.values()),
            controller=metadata_pb2.BrokerInfo(broker_id=1000, host="127.0.0.1", port=1),
        )
        return self.stub.UpdateMetadata(req, timeout=30)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        leader: int | None = None,
        replicas: list[int] | None = None,
        isr: list[int] | None = None,
        leader_epoch: int = 0,
    ) -> None:
        """Assign every partition of ``name`` (this broker leads by default) and publish the
        metadata snapshot; asserts the broker accepted both."""
        me = self.broker.broker_id
        states = [
            metadata_pb2.PartitionState(
                partition=p,
                leader=me if leader is None else leader,
                leader_epoch=leader_epoch,
                replicas=replicas or [me],
                isr=isr or [me],
                partition_epoch=leader_epoch,
                controller_epoch=self.controller_epoch,
            )
            for p in range(partitions)
        ]
        self.topics[name] = metadata_pb2.TopicMetadata(
            name=name,
            topic_id=self.topic_id(name),
            partitions=states,
            configs=dict(configs or {}),
        )
        self.configs[name] = dict(configs or {})
        resp = self.leader_and_isr(name, states, configs)
        assert resp.error_code == ErrorCode.NONE, resp
        assert all(p.error_code == ErrorCode.NONE for p in resp.partitions), resp
        assert self.update_metadata().error_code == ErrorCode.NONE


def produce(
    c: ActingController, topic: str, partition: int, buf: bytes, acks: int = broker_pb2.ACKS_LEADER
) -> broker_pb2.PartitionProduceResult:
    resp = c.stub.Produce(
        broker_pb2.ProduceRequest(
            acks=cast("broker_pb2.Acks", acks),
            timeout_ms=5000,
            partitions=[broker_pb2.PartitionRecords(topic=topic, partition=partition, records=buf)],
        ),
        timeout=30,
    )
    assert len(resp.partitions) == 1
    return resp.partitions[0]


def list_offset(
    c: ActingController, topic: str, partition: int, ts: int
) -> broker_pb2.ListOffsetsResult:
    resp = c.stub.ListOffsets(
        broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=ts)
            ]
        ),
        timeout=30,
    )
    return resp.partitions[0]


def fetch_once(
    c: ActingController, topic: str, partition: int, offset: int, **kw: int
) -> broker_pb2.FetchResponse:
    req = broker_pb2.FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        max_wait_ms=kw.get("max_wait_ms", 100),
        max_bytes=kw.get("max_bytes", 1 << 20),
        min_bytes=kw.get("min_bytes", 1),
        replica_id=-1,
        current_leader_epoch=kw.get("current_leader_epoch", -1),
    )
    stream = c.stub.Fetch(req, timeout=30)
    try:
        return next(stream)
    finally:
        stream.cancel()
