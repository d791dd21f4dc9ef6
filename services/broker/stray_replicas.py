"""Stray replicas at start: partition logs on disk that the cluster no longer assigns here.

A broker that is down (or has lost its registration) while a topic is deleted, or while one
of its replicas is moved away, never receives the StopReplica that would delete the data:
the controller sends control requests to live brokers only. Its partition directories are
still on disk when it starts again, and a topic created later under the same name would
otherwise find them (and their old records) in place (issue 15).

So, as Kafka does with topic ids at start, the broker compares every log it opened with the
cluster's topics in etcd (``/headwater/topics/<name>``, the layout in
``headwater.platform.cluster_layout``) after connecting to etcd and before registering (no
LeaderAndIsr can reach it yet): a log whose topic no longer exists, whose stored topic id is
not the topic's current id, or whose partition no longer lists this broker as a replica is
deleted (``LogManager.remove_stale``); a log from before topic ids were stored adopts the
current id. A topic key that cannot be decoded keeps its logs untouched.
"""

from __future__ import annotations

import logging

from headwater.platform import cluster_layout as st
from headwater.platform import etcd as hetcd

log = logging.getLogger(__name__)

Key = tuple[str, int]


async def cluster_assignment(etcd: hetcd.Etcd, broker_id: int) -> tuple[dict[Key, str], set[str]]:
    """``(expected, unreadable)``: each partition the cluster assigns to ``broker_id`` with
    its topic's current id, and the names of topics whose record could not be decoded."""
    snap = await etcd.get_prefix(st.TOPICS_PREFIX)
    expected: dict[Key, str] = {}
    unreadable: set[str] = set()
    for kv in snap.items:
        name = kv.key[len(st.TOPICS_PREFIX) :]
        try:
            topic = st.Topic.decode(name, kv.value, kv.meta.mod_revision)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("topic %s: record unreadable (%r); keeping its logs", name, exc)
            unreadable.add(name)
            continue
        for partition, replicas in topic.assignment.items():
            if broker_id in replicas:
                expected[(name, partition)] = topic.topic_id
    return expected, unreadable
