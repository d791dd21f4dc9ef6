"""The cluster metadata's layout in etcd, shared by the services that read it.

Layout (docs/architecture.md; values JSON unless noted)::

    /headwater/cluster_id               uuid hex (plain string), create-if-absent
    /headwater/controller/leader        {"controller_id", "epoch", "host", "port"} (lease)
    /headwater/controller/epoch         integer (plain string)
    /headwater/brokers/ids/<id>         {"broker_id", "host", "port", "rack", "metrics_url"}
                                        (broker's lease; create revision = broker epoch)
    /headwater/topics/<name>            {"topic_id", "partitions": {"0": [ids]}, "configs"}
    /headwater/partitions/<topic>/<p>   {"leader", "leader_epoch", "isr", "partition_epoch",
                                         "controller_epoch"[, "adding_replicas",
                                         "removing_replicas"]}  (the last two only while a
                                         reassignment runs; the topic key then holds
                                         target + original replicas)

The controller is the only writer of the topic, partition and epoch keys
(:mod:`services.controller.state`: loading, fenced writes); brokers read them too (the
controller epoch a control request must not be older than; the topics a stray replica is
checked against at start), so the keys, the topic record's codec and
:func:`read_controller_epoch` live here, not in the controller.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from headwater.platform import etcd as hetcd

ROOT = "/headwater/"
CLUSTER_ID_KEY = "/headwater/cluster_id"
LEADER_KEY = "/headwater/controller/leader"
EPOCH_KEY = "/headwater/controller/epoch"
BROKERS_PREFIX = "/headwater/brokers/ids/"
TOPICS_PREFIX = "/headwater/topics/"
PARTITIONS_PREFIX = "/headwater/partitions/"


async def read_controller_epoch(etcd: hetcd.Etcd) -> int:
    """The controller epoch etcd holds (0 when no controller was ever elected): what a broker
    checks before adopting a higher epoch from a control request."""
    got = await etcd.get(EPOCH_KEY)
    return int(got[0]) if got else 0


def topic_key(name: str) -> str:
    return f"{TOPICS_PREFIX}{name}"


def partitions_prefix(topic: str) -> str:
    return f"{PARTITIONS_PREFIX}{topic}/"


def partition_key(topic: str, partition: int) -> str:
    return f"{PARTITIONS_PREFIX}{topic}/{partition}"


def broker_key(broker_id: int) -> str:
    return f"{BROKERS_PREFIX}{broker_id}"


@dataclass
class Topic:
    """A topic's assignment and config overrides; ``mod_revision`` of its etcd key."""

    name: str
    topic_id: str
    assignment: dict[int, list[int]]
    configs: dict[str, str]
    mod_revision: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "topic_id": self.topic_id,
                "partitions": {str(p): r for p, r in sorted(self.assignment.items())},
                "configs": self.configs,
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(name: str, raw: bytes, mod_revision: int) -> Topic:
        d = json.loads(raw)
        return Topic(
            name=name,
            topic_id=str(d["topic_id"]),
            assignment={int(p): [int(b) for b in r] for p, r in d["partitions"].items()},
            configs={str(k): str(v) for k, v in (d.get("configs") or {}).items()},
            mod_revision=mod_revision,
        )
