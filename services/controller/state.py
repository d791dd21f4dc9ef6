"""The controller's view of etcd: JSON codecs of brokers and partition states, and fenced
writes. (The in-memory state built from these keys: :mod:`services.controller.cluster_state`.)

The keys and their values: :mod:`headwater.platform.cluster_layout` (and docs/architecture.md).

A topic exists once its topic key exists (the commit point of CreateTopics); partition state
keys are written after it, and a controller loading state initialises any that are missing.

Every write by the controller is fenced: the transaction compares the epoch key's value with
the writer's epoch (a deposed controller's writes fail), and updates of an existing key also
compare its mod revision with the one the writer read (:func:`fenced_write`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from headwater.platform import etcd as hetcd
from headwater.platform.cluster_layout import (
    EPOCH_KEY,
    Topic,
    broker_key,
    partition_key,
    topic_key,
)

log = logging.getLogger(__name__)

#: Operations per etcd transaction (etcd's default --max-txn-ops is 128; one slot is the
#: epoch comparison's companion ops).
TXN_CHUNK = 100


class FencedError(Exception):
    """A fenced write failed its comparison: this controller is deposed or read stale state."""


@dataclass(frozen=True)
class Broker:
    """A live broker as registered in etcd. ``epoch`` is the key's create revision."""

    broker_id: int
    host: str
    port: int
    rack: str
    metrics_url: str
    epoch: int

    @staticmethod
    def decode(raw: bytes, epoch: int) -> Broker:
        d = json.loads(raw)
        return Broker(
            broker_id=int(d["broker_id"]),
            host=str(d["host"]),
            port=int(d["port"]),
            rack=str(d.get("rack") or ""),
            metrics_url=str(d.get("metrics_url") or ""),
            epoch=epoch,
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "broker_id": self.broker_id,
                "host": self.host,
                "port": self.port,
                "rack": self.rack,
                "metrics_url": self.metrics_url,
            }
        ).encode()


@dataclass(frozen=True)
class PartitionState:
    """Leadership of one partition; ``mod_revision`` of its etcd key (0: not written yet).

    ``adding_replicas`` / ``removing_replicas``: an ongoing reassignment (KIP-455), empty
    otherwise; while one runs the topic's replica list is target + the original replicas.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int
    mod_revision: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def encode(self) -> bytes:
        d: dict[str, object] = {
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "partition_epoch": self.partition_epoch,
            "controller_epoch": self.controller_epoch,
        }
        if self.reassigning:
            d["adding_replicas"] = list(self.adding_replicas)
            d["removing_replicas"] = list(self.removing_replicas)
        return json.dumps(d).encode()

    @staticmethod
    def decode(raw: bytes, mod_revision: int) -> PartitionState:
        d = json.loads(raw)
        return PartitionState(
            leader=int(d["leader"]),
            leader_epoch=int(d["leader_epoch"]),
            isr=tuple(int(b) for b in d["isr"]),
            partition_epoch=int(d["partition_epoch"]),
            controller_epoch=int(d["controller_epoch"]),
            mod_revision=mod_revision,
            adding_replicas=tuple(int(b) for b in d.get("adding_replicas") or ()),
            removing_replicas=tuple(int(b) for b in d.get("removing_replicas") or ()),
        )


def decode_broker(key: str, raw: bytes, epoch: int) -> Broker | None:
    """A registration, or None (logged) when the value is malformed or names another id."""
    try:
        b = Broker.decode(raw, epoch)
    except (ValueError, KeyError, TypeError) as exc:
        log.error("ignoring malformed broker registration %s: %r", key, exc)
        return None
    if key != broker_key(b.broker_id):
        log.error("ignoring broker registration %s naming broker %d", key, b.broker_id)
        return None
    return b


async def fenced_write(
    etcd: hetcd.Etcd,
    epoch: int,
    compare: Sequence[hetcd.Compare],
    ops: Sequence[hetcd.Op],
) -> int:
    """One transaction of ``ops`` under ``compare`` plus the controller-epoch fence.

    Returns the revision written; raises FencedError when a comparison fails (nothing is
    written) and EtcdError when etcd fails.
    """
    result = await etcd.txn([hetcd.cmp_value(EPOCH_KEY, "==", str(epoch)), *compare], ops)
    if not result.succeeded:
        raise FencedError(f"fenced write failed (controller epoch {epoch}, {len(ops)} ops)")
    return result.revision


async def write_partition_states(
    etcd: hetcd.Etcd,
    epoch: int,
    topic: str,
    states: dict[int, PartitionState],
) -> dict[int, PartitionState]:
    """Write one topic's partition states (see :func:`write_states`)."""
    written = await write_states(etcd, epoch, {(topic, p): s for p, s in states.items()})
    return {p: s for (_, p), s in written.items()}


async def write_states(
    etcd: hetcd.Etcd,
    epoch: int,
    states: Mapping[tuple[str, int], PartitionState],
) -> dict[tuple[str, int], PartitionState]:
    """Write many partition states (of any topics) in transactions of :data:`TXN_CHUNK`
    puts, each fenced by the epoch and, per key, by its mod revision (``mod_revision == 0``:
    the key must be absent). Returns the states with their new mod revisions. A chunk that
    fails its comparison raises FencedError; earlier chunks stay written (each is whole)."""
    out: dict[tuple[str, int], PartitionState] = {}
    items = sorted(states.items())
    for i in range(0, len(items), TXN_CHUNK):
        chunk = items[i : i + TXN_CHUNK]
        compare = [_cmp_partition(t, p, s.mod_revision) for (t, p), s in chunk]
        ops = [hetcd.op_put(partition_key(t, p), s.encode()) for (t, p), s in chunk]
        rev = await fenced_write(etcd, epoch, compare, ops)
        for key, s in chunk:
            out[key] = dataclasses.replace(s, mod_revision=rev)
    return out


def _cmp_partition(topic: str, p: int, mod_revision: int) -> hetcd.Compare:
    key = partition_key(topic, p)
    return hetcd.cmp_mod(key, "==", mod_revision) if mod_revision else hetcd.cmp_absent(key)


async def write_topic_and_state(
    etcd: hetcd.Etcd,
    epoch: int,
    before: Topic,
    after: Topic,
    partition: int,
    state: PartitionState,
) -> tuple[Topic, PartitionState]:
    """One fenced transaction replacing a topic's key (compared with ``before``'s mod
    revision) and one partition state (compared with its own): a reassignment step, where
    the replica list and the adding/removing sets must change together."""
    rev = await fenced_write(
        etcd,
        epoch,
        [
            hetcd.cmp_mod(topic_key(before.name), "==", before.mod_revision),
            _cmp_partition(before.name, partition, state.mod_revision),
        ],
        [
            hetcd.op_put(topic_key(after.name), after.encode()),
            hetcd.op_put(partition_key(after.name, partition), state.encode()),
        ],
    )
    after = dataclasses.replace(after, mod_revision=rev)
    return after, dataclasses.replace(state, mod_revision=rev)


async def expire_broker(etcd: hetcd.Etcd, epoch: int, broker: Broker) -> bool:
    """End ``broker``'s registration as its lease expiring would: revoke the lease its key is
    attached to, so the key goes and the broker watch reports it gone (a broker that is alive
    after all sees its lease lost and registers again, with a new epoch).

    Fenced: the lease is read in a transaction that holds only while this controller's epoch is
    current and the key still has ``broker.epoch`` as its create revision (the incarnation
    judged dead; a lease id belongs to one incarnation). Returns False, revoking nothing, when
    that does not hold (deposed, or the broker already left or re-registered).
    """
    key = broker_key(broker.broker_id)
    result = await etcd.txn(
        [hetcd.cmp_value(EPOCH_KEY, "==", str(epoch)), hetcd.cmp_create(key, "==", broker.epoch)],
        [hetcd.op_get(key)],
    )
    kvs = result.responses[0] if result.succeeded and result.responses else None
    if not isinstance(kvs, list) or not kvs or not kvs[0].meta.lease_id:
        return False
    await etcd.revoke_lease(kvs[0].meta.lease_id)
    return True
