"""Replica placement: Kafka's ``assignReplicasToBrokers``, as a pure function.

Rack-unaware (no broker declares a rack, or only some do): brokers sorted by id; partition
``p``'s first replica (its preferred leader) is broker ``(p + start_index) % n``, so leaders
spread evenly; the other replicas follow at a shift that grows by one every ``n`` partitions,
so followers spread too.

Rack-aware (every broker declares a rack): the same walk over a rack-alternated broker list
(``r1b1, r2b1, r3b1, r1b2, ...``), and a follower is taken only from a rack (and a broker)
that holds no replica of the partition yet, unless every rack (broker) already holds one.
So a partition's replicas land on ``min(rf, racks)`` distinct racks.

``start_index`` is random in Kafka (to spread the leaders of many small topics); callers
pass it explicitly so tests are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headwater.errors import InvalidPartitionsError, InvalidReplicationFactorError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered by alternating racks: racks sorted by name, brokers by id."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    names = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        column = by_rack[names[i % len(names)]]
        if column:
            out.append(column.pop(0))
        i += 1
    return out


def assign_replicas(
    brokers: Mapping[int, str | None] | Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    start_partition: int = 0,
) -> dict[int, list[int]]:
    """Replica lists for partitions ``start_partition .. start_partition + partitions - 1``.

    ``brokers``: live broker ids, or a mapping id -> rack (None or "" when undeclared).
    The first replica of each list is the preferred leader. Raises
    InvalidReplicationFactorError / InvalidPartitionsError for impossible requests.
    """
    racks: dict[int, str | None] = (
        dict(brokers) if isinstance(brokers, Mapping) else dict.fromkeys(brokers)
    )
    n = len(racks)
    if partitions < 0 or (partitions == 0 and start_partition == 0):
        raise InvalidPartitionsError(f"number of partitions must be >= 1, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be >= 1, got {replication_factor}"
        )
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {n} live brokers"
        )
    declared = {b: r for b, r in racks.items() if r}
    if declared and len(declared) == n:
        return _rack_aware(declared, partitions, replication_factor, start_index, start_partition)
    return _rack_unaware(
        sorted(racks), partitions, replication_factor, start_index, start_partition
    )


def _rack_unaware(
    ids: list[int], partitions: int, rf: int, start_index: int, start_partition: int
) -> dict[int, list[int]]:
    n = len(ids)
    shift = start_index
    out: dict[int, list[int]] = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        out[p] = replicas
    return out


def _rack_aware(
    racks: dict[int, str], partitions: int, rf: int, start_index: int, start_partition: int
) -> dict[int, list[int]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    shift = start_index
    out: dict[int, list[int]] = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                rack_ok = rack not in racks_used or len(racks_used) == num_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[p] = replicas
    return out


def start_index_for(brokers: Sequence[int], first_replica_of_p0: int) -> int:
    """Kafka's start index when adding partitions: the position of partition 0's first
    replica among the sorted live brokers (the first broker with id >= it)."""
    ids = sorted(brokers)
    for i, b in enumerate(ids):
        if b >= first_replica_of_p0:
            return i
    return 0
