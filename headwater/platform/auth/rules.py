"""The one table of what every RPC needs: method -> :class:`Rule` (Kafka's authorization table).

A rule lists the (resource type, operation, resource name) checks a request must pass
(:class:`Need`; a need with ``alternatives`` passes when any of them is allowed). Optional
refinements:

* ``inband``: per-partition requests (Produce, ListOffsets, OffsetCommit, ...) whose response
  has per-partition errors: partitions of denied topics are removed from the request and
  answered in-band with TOPIC_AUTHORIZATION_FAILED; the rest is served.
* ``filter``: list-style answers (Metadata, ListGroups, ListTransactions) drop what the
  caller may not DESCRIBE (an explicitly requested but denied topic is answered with
  TOPIC_AUTHORIZATION_FAILED).

``internal`` marks the cluster's own RPCs (controller -> broker, broker -> broker,
coordinator -> broker/coordinator, broker -> controller: every rule that needs ClusterAction
on the cluster whatever the request): they are closed by default, with or without the
authorizer — only the cluster's internal identity (an internal token, minted with the cluster
key from etcd) passes; with the authorizer on, a super user or a ClusterAction ACL also passes
(Kafka's rule). See :mod:`headwater.platform.auth.interceptor` and docs/security.md.

An RPC missing from :data:`RULES` is internal and needs ALL on the cluster (a new RPC cannot
be forgotten open); ``tests/security/test_acls_rules.py`` checks the table covers every method
of every service descriptor. :data:`OPEN` lists the methods that need no authorization,
:data:`INTERNAL` the internal ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from headwater import errors
from headwater.client.admin_security import CLUSTER_NAME
from headwater.platform.auth.acls import OP, RT
from headwater.v1 import controller_pb2
from headwater.v1.errors_pb2 import ErrorCode

TOPIC, GROUP, CLUSTER, TXN = (
    RT.ACL_RESOURCE_TOPIC,
    RT.ACL_RESOURCE_GROUP,
    RT.ACL_RESOURCE_CLUSTER,
    RT.ACL_RESOURCE_TRANSACTIONAL_ID,
)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    OP.ACL_OPERATION_READ,
    OP.ACL_OPERATION_WRITE,
    OP.ACL_OPERATION_CREATE,
    OP.ACL_OPERATION_DELETE,
    OP.ACL_OPERATION_ALTER,
    OP.ACL_OPERATION_DESCRIBE,
)
CLUSTER_ACTION = OP.ACL_OPERATION_CLUSTER_ACTION
DESCRIBE_CONFIGS = OP.ACL_OPERATION_DESCRIBE_CONFIGS
ALTER_CONFIGS = OP.ACL_OPERATION_ALTER_CONFIGS
IDEMPOTENT_WRITE = OP.ACL_OPERATION_IDEMPOTENT_WRITE

_ERROR_OF: dict[int, type[errors.HeadwaterError]] = {
    TOPIC: errors.TopicAuthorizationFailedError,
    GROUP: errors.GroupAuthorizationFailedError,
    CLUSTER: errors.ClusterAuthorizationFailedError,
    TXN: errors.TransactionalIdAuthorizationFailedError,
}

#: (resource type, operation, name)
Check = tuple[int, int, str]
#: authorize(resource_type, operation, name) -> allowed
Decide = Callable[[int, int, str], bool]


@dataclass(frozen=True)
class Need:
    check: Check
    alternatives: tuple[Check, ...] = ()

    def allowed(self, decide: Decide) -> bool:
        return any(decide(*c) for c in (self.check, *self.alternatives))

    def error(self) -> errors.HeadwaterError:
        rt, op, name = self.check
        from headwater.platform.auth.acls import op_name, rt_name

        return _ERROR_OF[rt](f"not authorized: {op_name(op)} on {rt_name(rt)} {name!r}")


@dataclass(frozen=True)
class Inband:
    """Per-partition answering: request list field, response list field, the operation the
    topics need and the response class."""

    request_field: str
    response_field: str
    operation: int
    response: type[Any]


@dataclass(frozen=True)
class Rule:
    needs: Callable[[Any], Iterable[Need]] = lambda r: ()
    inband: Inband | None = None
    filter: Callable[[Decide, Any, Any], None] | None = None
    open: bool = False
    #: the cluster's own RPC: closed to everyone but the internal identity by default
    internal: bool = False
    #: the request is a stream (no request to inspect before the handler): needs get None
    streaming: bool = False
    #: a client stream's needs read from its first message (the stream's opening, e.g. the
    #: group stream's Open): checked before the handler sees that message
    first: Callable[[Any], Iterable[Need]] | None = None


def _n(rt: int, op: int, name: str, *alts: Check) -> Need:
    return Need((rt, op, name), tuple(alts))


def _cluster(op: int) -> Rule:
    return Rule(needs=lambda r: [_n(CLUSTER, op, CLUSTER_NAME)])


#: The internal RPCs' rule: the cluster's own identity (or, with the authorizer, ClusterAction).
_CLUSTER_ACTION = Rule(needs=lambda r: [_n(CLUSTER, CLUSTER_ACTION, CLUSTER_NAME)], internal=True)


def _topics(op: int, names: Iterable[str]) -> list[Need]:
    return [_n(TOPIC, op, t) for t in dict.fromkeys(names)]


def _producer_id(r: Any) -> list[Need]:
    if r.transactional_id:
        return [_n(TXN, WRITE, r.transactional_id)]
    return [_n(CLUSTER, IDEMPOTENT_WRITE, CLUSTER_NAME)]


def _produce(r: Any) -> list[Need]:
    return [_n(TXN, WRITE, r.transactional_id)] if r.transactional_id else []


def _fetch(r: Any) -> list[Need]:
    if r.replica_id >= 0:
        return [_n(CLUSTER, CLUSTER_ACTION, CLUSTER_NAME)]
    return [_n(TOPIC, READ, r.topic)]


def _offset_for_leader_epoch(r: Any) -> list[Need]:
    if r.replica_id >= 0:
        return [_n(CLUSTER, CLUSTER_ACTION, CLUSTER_NAME)]
    return _topics(DESCRIBE, (p.topic for p in r.partitions))


def _config_needs(op: int, resources: Iterable[Any]) -> list[Need]:
    out = []
    for res in resources:
        if res.type == controller_pb2.CONFIG_TOPIC:
            out.append(_n(TOPIC, op, res.name))
        else:  # brokers, clients, users (quotas): cluster-level
            out.append(_n(CLUSTER, op, CLUSTER_NAME))
    return out


def _consume_open(r: Any) -> list[Need]:
    """GroupStreamService.Consume: Read on the group and on each topic of the Open (what the
    classic path needs for JoinGroup/OffsetCommit and Fetch); any other first message is the
    handler's INVALID_REQUEST."""
    if r.WhichOneof("request") != "open":
        return []
    return [_n(GROUP, READ, r.open.group_id), *_topics(READ, r.open.topics)]


def _find_coordinator(r: Any) -> list[Need]:
    if r.key_type == 1:  # CoordinatorType.TRANSACTION
        return [_n(TXN, DESCRIBE, r.group_id)]
    return [_n(GROUP, DESCRIBE, r.group_id)]


def _filter_metadata(decide: Decide, request: Any, response: Any) -> None:
    requested = set(request.topics)
    keep = []
    for t in response.topics:
        if decide(TOPIC, DESCRIBE, t.name):
            keep.append(t)
        elif t.name in requested:
            t.ClearField("partitions")
            t.ClearField("configs")
            t.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            keep.append(t)
    del response.topics[:]
    response.topics.extend(keep)


def _filter_list(field_name: str, rt: int, key: str) -> Callable[[Decide, Any, Any], None]:
    def run(decide: Decide, request: Any, response: Any) -> None:
        items = getattr(response, field_name)
        keep = [i for i in items if decide(rt, DESCRIBE, getattr(i, key))]
        del items[:]
        items.extend(keep)

    return run


def _rules() -> dict[str, Rule]:
    from headwater.v1 import broker_pb2, coordinator_pb2

    b, c, g, t = (
        "/headwater.v1.Broker/",
        "/headwater.v1.Controller/",
        "/headwater.v1.GroupCoordinator/",
        "/headwater.v1.TransactionCoordinator/",
    )
    produce_resp = broker_pb2.ProduceResponse
    init_pid = Rule(needs=_producer_id)
    commit_inband = Inband("partitions", "partitions", READ, coordinator_pb2.OffsetCommitResponse)
    return {
        "/headwater.v1.Authenticator/Authenticate": Rule(open=True, streaming=True),
        "/headwater.v1.GroupStreamService/Consume": Rule(streaming=True, first=_consume_open),
        # --- broker
        b + "Produce": Rule(
            needs=_produce, inband=Inband("partitions", "partitions", WRITE, produce_resp)
        ),
        b + "ProduceRecords": Rule(needs=lambda r: [_n(TOPIC, WRITE, r.topic)]),
        b + "Fetch": Rule(needs=_fetch),
        b + "FetchRecords": Rule(needs=_fetch),
        b + "ListOffsets": Rule(
            inband=Inband("partitions", "partitions", DESCRIBE, broker_pb2.ListOffsetsResponse)
        ),
        b + "Metadata": Rule(filter=_filter_metadata),
        b + "ReplicaFetch": Rule(needs=_CLUSTER_ACTION.needs, internal=True, streaming=True),
        b + "OffsetForLeaderEpoch": Rule(needs=_offset_for_leader_epoch),
        b + "LeaderAndIsr": _CLUSTER_ACTION,
        b + "UpdateMetadata": _CLUSTER_ACTION,
        b + "StopReplica": _CLUSTER_ACTION,
        b + "ControllerLiveness": _CLUSTER_ACTION,
        b + "InitProducerId": init_pid,
        b + "WriteTxnMarkers": _CLUSTER_ACTION,
        # --- controller
        c + "CreateTopics": Rule(
            needs=lambda r: [
                _n(TOPIC, CREATE, x.name, (CLUSTER, CREATE, CLUSTER_NAME)) for x in r.topics
            ]
        ),
        c + "DeleteTopics": Rule(needs=lambda r: _topics(DELETE, r.names)),
        c + "CreatePartitions": Rule(needs=lambda r: [_n(TOPIC, ALTER, r.topic)]),
        c + "AlterTopicConfigs": Rule(needs=lambda r: [_n(TOPIC, ALTER_CONFIGS, r.topic)]),
        c + "DescribeCluster": _cluster(DESCRIBE),
        c + "AlterPartition": _CLUSTER_ACTION,
        c + "ControlledShutdown": _CLUSTER_ACTION,
        c + "ElectLeaders": _cluster(ALTER),
        c + "AlterPartitionReassignments": _cluster(ALTER),
        c + "ListPartitionReassignments": _cluster(DESCRIBE),
        c + "DescribeConfigs": Rule(needs=lambda r: _config_needs(DESCRIBE_CONFIGS, r.resources)),
        c + "AlterConfigs": Rule(
            needs=lambda r: _config_needs(ALTER_CONFIGS, (x.resource for x in r.resources))
        ),
        c + "AlterUserScramCredentials": _cluster(ALTER),
        c + "DescribeUserScramCredentials": _cluster(DESCRIBE),
        c + "CreateAcls": _cluster(ALTER),
        c + "DeleteAcls": _cluster(ALTER),
        c + "DescribeAcls": _cluster(DESCRIBE),
        # --- group coordinator
        g + "FindCoordinator": Rule(needs=_find_coordinator),
        g + "JoinGroup": Rule(needs=lambda r: [_n(GROUP, READ, r.group_id)]),
        g + "SyncGroup": Rule(needs=lambda r: [_n(GROUP, READ, r.group_id)]),
        g + "Heartbeat": Rule(needs=lambda r: [_n(GROUP, READ, r.group_id)]),
        g + "LeaveGroup": Rule(needs=lambda r: [_n(GROUP, READ, r.group_id)]),
        g + "OffsetCommit": Rule(
            needs=lambda r: [_n(GROUP, READ, r.group_id)], inband=commit_inband
        ),
        g + "OffsetFetch": Rule(
            needs=lambda r: [
                _n(GROUP, DESCRIBE, r.group_id),
                *_topics(DESCRIBE, (p.topic for p in r.partitions)),
            ]
        ),
        g + "DescribeGroups": Rule(needs=lambda r: [_n(GROUP, DESCRIBE, x) for x in r.group_ids]),
        g + "ListGroups": Rule(filter=_filter_list("groups", GROUP, "group_id")),
        g + "DeleteGroups": Rule(needs=lambda r: [_n(GROUP, DELETE, x) for x in r.group_ids]),
        g + "TxnOffsetCommit": Rule(
            needs=lambda r: [_n(TXN, WRITE, r.transactional_id), _n(GROUP, READ, r.group_id)],
            inband=commit_inband,
        ),
        g + "WriteTxnOffsetMarker": _CLUSTER_ACTION,
        # --- transaction coordinator
        t + "InitProducerId": init_pid,
        t + "AddPartitionsToTxn": Rule(
            needs=lambda r: [
                _n(TXN, WRITE, r.transactional_id),
                *_topics(WRITE, (p.topic for p in r.partitions)),
            ]
        ),
        t + "AddOffsetsToTxn": Rule(
            needs=lambda r: [_n(TXN, WRITE, r.transactional_id), _n(GROUP, READ, r.group_id)]
        ),
        t + "EndTxn": Rule(needs=lambda r: [_n(TXN, WRITE, r.transactional_id)]),
        t + "DescribeTransactions": Rule(
            needs=lambda r: [_n(TXN, DESCRIBE, x) for x in r.transactional_ids]
        ),
        t + "ListTransactions": Rule(filter=_filter_list("transactions", TXN, "transactional_id")),
    }


RULES: dict[str, Rule] = _rules()
#: Methods open to everyone (authentication itself; health and reflection are not Headwater
#: services and are passed through by the interceptor).
OPEN = frozenset(m for m, r in RULES.items() if r.open)
#: The cluster's own RPCs (closed by default; methods missing from the table are too).
INTERNAL = frozenset(m for m, r in RULES.items() if r.internal)
#: A rule for methods missing from the table: internal, and only super users pass.
UNKNOWN = Rule(needs=lambda r: [_n(CLUSTER, OP.ACL_OPERATION_ALL, CLUSTER_NAME)], internal=True)


def rule_for(method: str) -> Rule:
    return RULES.get(method, UNKNOWN)
