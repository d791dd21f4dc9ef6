"""AsyncAdminClient: topic management (Controller service) and cluster/topic description
(Broker.Metadata, ListOffsets).

Finding the controller, in order:

1. the ``controller=`` argument, else the ``HEADWATER_CONTROLLER`` environment variable;
2. the ``controller`` endpoint in a broker's Metadata response (any broker knows it);
3. the bootstrap addresses themselves (a deployment may serve Controller there too).

A NOT_CONTROLLER answer (a standby controller) triggers one rediscovery through step 2.
Per-topic failures come back as typed exceptions from :mod:`headwater.errors`.

Operations (issue 3): :meth:`AsyncAdminClient.elect_leaders` returns one
:class:`ElectionResult` per partition (ELECTION_NOT_NEEDED is a normal outcome, so errors are
reported per partition, not raised); :meth:`AsyncAdminClient.alter_partition_reassignments`
raises the first partition's error; :meth:`AsyncAdminClient.list_partition_reassignments`
shows progress.

Consumer groups (issue 4): ``list_groups``, ``describe_groups`` (members, assignments,
per-partition lag), ``delete_groups``, ``list_consumer_group_offsets``,
``alter_consumer_group_offsets`` — see :mod:`headwater.client.admin_groups`.

Dynamic configuration (issue 6): ``describe_configs``, ``alter_configs`` for topics, brokers,
clients and users — see :mod:`headwater.client.admin_configs`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from headwater import errors
from headwater.client.admin_configs import ConfigAdminMixin
from headwater.client.admin_groups import GroupAdminMixin
from headwater.client.admin_security import SecurityAdminMixin
from headwater.client.admin_txns import TransactionAdminMixin
from headwater.client.connection import ConnectionPool, parse_bootstrap
from headwater.client.metadata import ClusterView, Metadata
from headwater.client.offsets import EARLIEST, LATEST, list_offsets
from headwater.client.security import ClientSecurity
from headwater.client.types import OffsetAndTimestamp, TopicPartition
from headwater.v1 import controller_pb2


@dataclass(frozen=True)
class NewTopic:
    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                }
                for p in self.partitions
            ],
            "configs": self.configs,
        }


@dataclass(frozen=True)
class BrokerDescription:
    broker_id: int
    host: str
    port: int
    rack: str


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: tuple[BrokerDescription, ...]


@dataclass(frozen=True)
class ElectionResult:
    """One partition's election outcome: the leader now, and the error (None: elected)."""

    topic: str
    partition: int
    leader: int
    error: errors.HeadwaterError | None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "error": self.error.code_name() if self.error else None,
            "message": self.error.message if self.error else "",
        }


@dataclass(frozen=True)
class Reassignment:
    """An ongoing reassignment: ``replicas`` is target + original while it runs."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": list(self.replicas),
            "adding_replicas": list(self.adding_replicas),
            "removing_replicas": list(self.removing_replicas),
            "isr": list(self.isr),
        }


def _raise_result(result: controller_pb2.TopicResult) -> None:
    errors.raise_for_code(result.error_code, result.error_message or result.name)


class AsyncAdminClient(
    GroupAdminMixin, ConfigAdminMixin, TransactionAdminMixin, SecurityAdminMixin
):
    """See the module docstring. Lives on one event loop."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        controller: str | None = None,
        request_timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self._bootstrap = parse_bootstrap(
            bootstrap if isinstance(bootstrap, str) else list(bootstrap)
        )
        self._explicit = controller or os.environ.get("HEADWATER_CONTROLLER") or None
        if self._explicit:
            parse_bootstrap(self._explicit)
        self.timeout_s = request_timeout_ms / 1000
        self._pool = ConnectionPool(security=security)
        self._metadata = Metadata(
            self._pool, self._bootstrap, request_timeout_ms=request_timeout_ms
        )
        self._controller: str | None = self._explicit
        #: the last controller lookup found no controller named (bootstrap addresses tried)
        self._guessing = False

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._metadata.close()
        await self._pool.close()

    # ------------------------------------------------------------ controller calls

    async def _controller_address(self, rediscover: bool = False) -> list[str]:
        """Where to send a controller call: the known controller, else the one the metadata
        names, else (no controller named yet) the explicit or bootstrap addresses, with
        ``self._guessing`` set."""
        self._guessing = False
        if self._controller and not rediscover:
            return [self._controller]
        try:
            view = await self._metadata.refresh()
        except errors.HeadwaterError:
            view = ClusterView()
        if view.controller_address:
            self._controller = view.controller_address
            return [view.controller_address]
        self._guessing = not self._explicit
        return [self._explicit] if self._explicit else list(self._bootstrap)

    async def _call(self, method: str, request: Any) -> Any:
        """Send ``method`` to the controller. An endpoint that is not a controller
        (UNSUPPORTED_VERSION) or not reachable makes it try the next; NOT_CONTROLLER makes it
        ask the metadata again. While the metadata names no controller yet (a broker answers
        Metadata before its first UpdateMetadata, e.g. just after it joined), and only then,
        it asks again with backoff until the request timeout, as Kafka's admin client waits
        for a controller, instead of failing at once on the bootstrap brokers."""
        last: errors.HeadwaterError | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        backoff = 0.05
        attempt = 0
        while True:
            for address in await self._controller_address(rediscover=attempt > 0):
                stub = self._pool.controller(address)
                try:
                    resp = await getattr(stub, method)(request, timeout=self.timeout_s)
                except grpc.RpcError as exc:
                    last = errors.from_rpc_error(exc)
                    if isinstance(last, errors.UnsupportedVersionError | errors.NetworkError):
                        continue  # not a controller endpoint / not reachable: try the next
                    if isinstance(last, errors.NotControllerError):
                        break
                    raise last from None
                self._controller = address
                return resp
            attempt += 1
            if attempt < 2:
                continue
            if not self._guessing or loop.time() + backoff > deadline:
                break
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        raise last or errors.NetworkError("no controller reachable")

    async def create_topics(
        self, topics: Iterable[NewTopic], *, validate_only: bool = False
    ) -> dict[str, str]:
        """Create topics; returns name -> topic id. Raises the first topic's error."""
        req = controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.NewTopic(
                    name=t.name,
                    partitions=t.partitions,
                    replication_factor=t.replication_factor,
                    configs=dict(t.configs),
                )
                for t in topics
            ],
            validate_only=validate_only,
        )
        resp = await self._call("CreateTopics", req)
        for r in resp.topics:
            _raise_result(r)
        self._metadata.request_update()
        return {r.name: r.topic_id for r in resp.topics}

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        ids = await self.create_topics(
            [NewTopic(name, partitions, replication_factor, dict(configs or {}))]
        )
        return ids[name]

    async def delete_topics(self, names: Iterable[str]) -> None:
        resp = await self._call("DeleteTopics", controller_pb2.DeleteTopicsRequest(names=names))
        for r in resp.topics:
            _raise_result(r)

    async def create_partitions(
        self, topic: str, total_count: int, *, validate_only: bool = False
    ) -> None:
        resp = await self._call(
            "CreatePartitions",
            controller_pb2.CreatePartitionsRequest(
                topic=topic, total_count=total_count, validate_only=validate_only
            ),
        )
        _raise_result(resp.result)

    async def alter_topic_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        resp = await self._call(
            "AlterTopicConfigs",
            controller_pb2.AlterTopicConfigsRequest(
                topic=topic,
                set=dict(set_configs or {}),
                delete=list(delete),
                validate_only=validate_only,
            ),
        )
        _raise_result(resp.result)

    async def describe_cluster(self) -> ClusterDescription:
        resp = await self._call("DescribeCluster", controller_pb2.DescribeClusterRequest())
        errors.raise_for_code(resp.error_code, "DescribeCluster")
        return ClusterDescription(
            resp.cluster_id,
            resp.controller_id,
            resp.controller_epoch,
            tuple(BrokerDescription(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers),
        )

    async def elect_leaders(
        self,
        partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
        *,
        election_type: str = "preferred",
    ) -> list[ElectionResult]:
        """Preferred (default) or unclean leader election for ``partitions`` (None: every
        partition). Per-partition outcomes; nothing is raised for them."""
        types = {
            "preferred": controller_pb2.ElectionType.PREFERRED,
            "unclean": controller_pb2.ElectionType.UNCLEAN,
        }
        if election_type not in types:
            raise errors.InvalidRequestError(
                f"election type must be preferred or unclean, not {election_type!r}"
            )
        req = controller_pb2.ElectLeadersRequest(
            election_type=types[election_type],
            partitions=[
                controller_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in partitions or ()
            ],
        )
        resp = await self._call("ElectLeaders", req)
        self._metadata.request_update()
        return [
            ElectionResult(
                r.topic,
                r.partition,
                r.leader,
                errors.error_for_code(r.error_code, r.error_message),
            )
            for r in resp.partitions
        ]

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition | tuple[str, int], Sequence[int] | None]
    ) -> None:
        """Start (replica list) or cancel (None or empty) reassignments; raises the first
        partition's error (the others of the request are still applied)."""
        req = controller_pb2.AlterPartitionReassignmentsRequest(
            partitions=[
                controller_pb2.ReassignmentTarget(topic=t, partition=p, replicas=list(r or ()))
                for (t, p), r in targets.items()
            ]
        )
        resp = await self._call("AlterPartitionReassignments", req)
        self._metadata.request_update()
        for r in resp.partitions:
            errors.raise_for_code(r.error_code, r.error_message or f"{r.topic}-{r.partition}")

    async def list_partition_reassignments(self) -> list[Reassignment]:
        resp = await self._call(
            "ListPartitionReassignments", controller_pb2.ListPartitionReassignmentsRequest()
        )
        return [
            Reassignment(
                r.topic,
                r.partition,
                tuple(r.replicas),
                tuple(r.adding_replicas),
                tuple(r.removing_replicas),
                tuple(r.isr),
            )
            for r in resp.reassignments
        ]

    # ------------------------------------------------------------ broker-side reads

    async def metadata(self) -> ClusterView:
        return await self._metadata.refresh()

    async def list_topics(self) -> list[str]:
        return sorted((await self._metadata.refresh()).topics)

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Descriptions (from broker metadata); unknown names raise UnknownTopicOrPartition."""
        view = await self._metadata.refresh()
        wanted = sorted(view.topics) if names is None else list(names)
        out = []
        for name in wanted:
            info = view.topics.get(name)
            if info is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            parts = tuple(
                PartitionDescription(
                    p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr)
                )
                for _, p in sorted(info.partitions.items())
            )
            out.append(TopicDescription(name, info.topic_id, parts, dict(info.configs)))
        return out

    async def list_offsets(
        self, wanted: Mapping[TopicPartition, int | str]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """tp -> "earliest" | "latest" | timestamp ms; returns offsets (-1: none qualifies)."""
        specs: dict[TopicPartition, int] = {}
        for tp, spec in wanted.items():
            if spec == "earliest":
                specs[TopicPartition(*tp)] = EARLIEST
            elif spec == "latest":
                specs[TopicPartition(*tp)] = LATEST
            elif isinstance(spec, int) and spec >= 0:
                specs[TopicPartition(*tp)] = spec
            else:
                raise errors.InvalidRequestError(
                    f"offset spec must be earliest, latest or a timestamp >= 0, not {spec!r}"
                )
        return await list_offsets(self._pool, self._metadata, specs, timeout_s=self.timeout_s)
