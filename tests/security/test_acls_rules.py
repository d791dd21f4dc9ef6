"""ACL decisions (Kafka's rules) and the RPC table's coverage, without a cluster."""

from __future__ import annotations

import pytest

from headwater.platform.auth import rules
from headwater.platform.auth.acls import CLUSTER_NAME, OP, PERM, PT, RT, Authorizer, Entry
from headwater.v1 import (
    broker_pb2,
    controller_pb2,
    coordinator_pb2,
    group_stream_pb2,
    security_pb2,
    transaction_pb2,
)

pytestmark = pytest.mark.fast

TOPIC, GROUP, CLUSTER = RT.ACL_RESOURCE_TOPIC, RT.ACL_RESOURCE_GROUP, RT.ACL_RESOURCE_CLUSTER
LIT, PRE = PT.ACL_PATTERN_LITERAL, PT.ACL_PATTERN_PREFIXED
ALLOW, DENY = PERM.ACL_PERMISSION_ALLOW, PERM.ACL_PERMISSION_DENY


def _authz(**kw: object) -> Authorizer:
    a = Authorizer(**kw)  # type: ignore[arg-type]
    a.replace(
        {
            (TOPIC, LIT, "orders"): [
                Entry("User:alice", "*", OP.ACL_OPERATION_READ, ALLOW),
                Entry("User:eve", "*", OP.ACL_OPERATION_ALL, ALLOW),
                Entry("User:eve", "*", OP.ACL_OPERATION_WRITE, DENY),
            ],
            (TOPIC, PRE, "logs-"): [Entry("User:bob", "10.0.0.1", OP.ACL_OPERATION_WRITE, ALLOW)],
            (TOPIC, LIT, "*"): [Entry("User:*", "*", OP.ACL_OPERATION_DESCRIBE, ALLOW)],
            (CLUSTER, LIT, CLUSTER_NAME): [
                Entry("User:ops", "*", OP.ACL_OPERATION_ALTER_CONFIGS, ALLOW)
            ],
        }
    )
    return a


def test_literal_prefixed_wildcard_host_and_implications() -> None:
    a = _authz()
    assert a.authorize("alice", "1.2.3.4", OP.ACL_OPERATION_READ, TOPIC, "orders")
    assert not a.authorize("alice", "1.2.3.4", OP.ACL_OPERATION_WRITE, TOPIC, "orders")
    assert a.authorize("bob", "10.0.0.1", OP.ACL_OPERATION_WRITE, TOPIC, "logs-app")
    assert not a.authorize("bob", "10.0.0.2", OP.ACL_OPERATION_WRITE, TOPIC, "logs-app")
    assert not a.authorize("bob", "10.0.0.1", OP.ACL_OPERATION_WRITE, TOPIC, "log")
    assert a.authorize("bob", "10.0.0.1", OP.ACL_OPERATION_DESCRIBE, TOPIC, "logs-app")  # implied
    assert a.authorize("zed", "h", OP.ACL_OPERATION_DESCRIBE, TOPIC, "anything")  # "*" and User:*
    assert not a.authorize("zed", "h", OP.ACL_OPERATION_READ, TOPIC, "anything")
    assert a.authorize("ops", "h", OP.ACL_OPERATION_DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME)
    assert not a.authorize("ops", "h", OP.ACL_OPERATION_ALTER, CLUSTER, CLUSTER_NAME)


def test_deny_wins_super_users_and_no_acl_found() -> None:
    a = _authz(super_users=["User:root"])
    assert a.authorize("eve", "h", OP.ACL_OPERATION_READ, TOPIC, "orders")
    assert not a.authorize("eve", "h", OP.ACL_OPERATION_WRITE, TOPIC, "orders")
    assert a.authorize("root", "h", OP.ACL_OPERATION_ALTER, GROUP, "g")
    assert not a.authorize("zed", "h", OP.ACL_OPERATION_READ, GROUP, "g")  # default deny
    assert _authz(allow_everyone_if_no_acl_found=True).authorize(
        "zed", "h", OP.ACL_OPERATION_READ, GROUP, "g"
    )


def test_every_rpc_of_every_service_has_a_rule() -> None:
    methods = [
        f"/{svc.full_name}/{m.name}"
        for mod in (
            broker_pb2,
            controller_pb2,
            coordinator_pb2,
            group_stream_pb2,
            transaction_pb2,
            security_pb2,
        )
        for svc in mod.DESCRIPTOR.services_by_name.values()
        for m in svc.methods
    ]
    missing = [m for m in methods if m not in rules.RULES]
    assert not missing
    assert {"/headwater.v1.Authenticator/Authenticate"} == rules.OPEN
    assert set(rules.RULES) == set(methods)
