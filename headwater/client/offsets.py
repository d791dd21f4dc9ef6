"""ListOffsets on behalf of the consumer and the admin client.

``timestamp`` values: :data:`LATEST` (-1), :data:`EARLIEST` (-2), or ms since the epoch (the
first offset whose record timestamp is >= it). Requests are grouped by partition leader, one
RPC per leader; retriable errors (stale leader, unknown topic right after creation) are retried
after a metadata refresh until ``timeout_s``, others raise their typed exception.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from headwater import errors
from headwater.client.connection import ConnectionPool
from headwater.client.metadata import Metadata
from headwater.client.types import OffsetAndTimestamp, TopicPartition
from headwater.v1 import broker_pb2

LATEST = -1
EARLIEST = -2


async def list_offsets(
    pool: ConnectionPool,
    metadata: Metadata,
    wanted: dict[TopicPartition, int],
    *,
    timeout_s: float = 30.0,
    backoff_s: float = 0.1,
    isolation_level: int = broker_pb2.READ_UNCOMMITTED,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """Offsets for ``wanted`` (tp -> timestamp spec); offset -1 when no record qualifies.

    With ``READ_COMMITTED`` the latest offset is the last stable offset."""
    deadline = time.monotonic() + timeout_s
    todo = dict(wanted)
    out: dict[TopicPartition, OffsetAndTimestamp] = {}
    last: errors.HeadwaterError | None = None
    for tp in todo:
        if tp.topic not in metadata.view.topics:
            await metadata.wait_for_topic(tp.topic, max(0.0, deadline - time.monotonic()))
    while todo:
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in todo:
            addr = metadata.view.leader_address(tp)
            info = metadata.view.topics.get(tp.topic)
            if info is not None and tp.partition not in info.partitions:
                raise errors.UnknownTopicOrPartitionError(
                    f"{tp.topic!r} has no partition {tp.partition}"
                )
            if addr is None:
                last = errors.LeaderNotAvailableError(f"no leader for {tp.topic}[{tp.partition}]")
                continue
            by_leader.setdefault(addr, []).append(tp)
        for addr, tps in by_leader.items():
            req = broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic=tp.topic, partition=tp.partition, timestamp=todo[tp]
                    )
                    for tp in tps
                ],
                isolation_level=isolation_level,  # type: ignore[arg-type]
            )
            try:
                resp = await pool.broker(addr).ListOffsets(req, timeout=timeout_s)
            except grpc.RpcError as exc:
                err = errors.from_rpc_error(exc)
                if not err.retriable:
                    raise err from None
                last = err
                continue
            for r in resp.partitions:
                tp = TopicPartition(r.topic, r.partition)
                if tp not in todo:
                    continue
                if r.error_code:
                    err2 = errors.error_for_code(r.error_code, r.error_message)
                    assert err2 is not None
                    if not err2.retriable:
                        raise err2
                    last = err2
                    continue
                out[tp] = OffsetAndTimestamp(r.offset, r.timestamp)
                del todo[tp]
        if not todo:
            break
        if time.monotonic() >= deadline:
            raise last or errors.RequestTimedOutError("ListOffsets did not complete")
        await asyncio.sleep(backoff_s)
        try:
            await metadata.refresh()
        except errors.HeadwaterError as exc:
            last = exc
    return out
