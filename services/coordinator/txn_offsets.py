"""TxnOffsetCommit and WriteTxnOffsetMarker: the group side of transactions (pure handlers).

``txn_commit`` validates like OffsetCommit (a generation / member id, when given, must be the
group's current ones; generation -1 with no member id is not checked — the transaction
coordinator has the producer fenced already) and appends one *pending* record per partition,
keyed by (group, topic, partition, producer id) with the producer epoch in its value
(records.py). Pending offsets are invisible to OffsetFetch; ``require_stable`` fetches answer
UNSTABLE_OFFSET_COMMIT for their partitions (offsets.fetch).

``txn_marker`` resolves the pending offsets of (group, producer id) written at an epoch BELOW
the marker's (the marker carries the epoch bumped at the end of the transaction, so pending
offsets of a later transaction of the same producer are left alone): commit appends those of
the transaction's own epoch (marker epoch - 1) as ordinary offset records, and every resolved
pending key is tombstoned (abort: only the tombstones). A pending offset from an even older
epoch is a zombie's late write and is dropped, never committed; ``txn_commit`` also refuses
(PRODUCER_FENCED) an epoch below one already pending for the same producer in the group.
A marker that finds nothing to resolve (a retry) changes nothing and succeeds, so markers are
idempotent and replay-safe (replay sees only ordinary offset / pending records).
"""

from __future__ import annotations

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import records as rec
from services.coordinator.group import GroupState, GroupTable
from services.coordinator.membership import valid_group_id
from services.coordinator.offsets import MAX_METADATA_BYTES
from services.coordinator.outcome import Ctx, Outcome


def txn_commit(table: GroupTable, req: pb.TxnOffsetCommitRequest, ctx: Ctx) -> Outcome:
    def whole(code: int, msg: str) -> Outcome:
        return Outcome(response=pb.OffsetCommitResponse(error_code=code, error_message=msg))  # type: ignore[arg-type]

    if not valid_group_id(req.group_id):
        return whole(ErrorCode.INVALID_GROUP_ID, f"invalid group id {req.group_id!r}")
    if req.producer_id < 0 or req.producer_epoch < 0:
        return whole(ErrorCode.INVALID_REQUEST, "producer id and epoch are required")
    g = table.get(req.group_id)
    newer = [
        po.producer_epoch
        for (_t, _p, pid), po in (g.pending.items() if g is not None else ())
        if pid == req.producer_id and po.producer_epoch > req.producer_epoch
    ]
    if newer:
        return whole(
            ErrorCode.PRODUCER_FENCED, f"producer epoch {max(newer)} has offsets pending already"
        )
    if req.member_id or req.generation_id >= 0:
        m = None if g is None else g.members.get(req.member_id)
        if g is None or m is None:
            return whole(ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {req.member_id!r}")
        if req.generation_id != g.generation:
            return whole(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {req.generation_id} is not the current {g.generation}",
            )
        if g.state is GroupState.COMPLETING_REBALANCE:
            return whole(ErrorCode.REBALANCE_IN_PROGRESS, "rebalance in progress")
    out = Outcome()
    resp = pb.OffsetCommitResponse()
    for p in req.partitions:
        code, msg = ErrorCode.NONE, ""
        if not p.topic or "\x00" in p.topic or p.partition < 0:
            code, msg = ErrorCode.INVALID_REQUEST, "bad topic or partition"
        elif p.offset < 0:
            code, msg = ErrorCode.INVALID_REQUEST, f"offset {p.offset} < 0"
        elif len(p.metadata.encode()) > MAX_METADATA_BYTES:
            code, msg = ErrorCode.OFFSET_METADATA_TOO_LARGE, "metadata over 4096 bytes"
        else:
            po = rec.PendingOffset(
                rec.Offset(p.offset, p.leader_epoch, p.metadata, ctx.now_ms), req.producer_epoch
            )
            pid = req.producer_id
            pending = rec.PendingOffsetCommit(req.group_id, p.topic, p.partition, pid, po)
            out.records.append(rec.Record(pending, ctx.epoch))
        resp.partitions.append(
            pb.OffsetCommitPartitionResult(
                topic=p.topic, partition=p.partition, error_code=code, error_message=msg
            )
        )
    out.response = resp
    return out


def txn_marker(table: GroupTable, req: pb.WriteTxnOffsetMarkerRequest, ctx: Ctx) -> Outcome:
    if not valid_group_id(req.group_id):
        return Outcome(
            response=pb.WriteTxnOffsetMarkerResponse(
                error_code=ErrorCode.INVALID_GROUP_ID, error_message="invalid group id"
            )
        )
    out = Outcome(response=pb.WriteTxnOffsetMarkerResponse())
    g = table.get(req.group_id)
    if g is None:
        return out
    for (topic, p, pid), po in sorted(g.pending.items()):
        if pid != req.producer_id or po.producer_epoch >= req.producer_epoch:
            continue
        if req.committed and po.producer_epoch == req.producer_epoch - 1:
            committed = rec.OffsetCommit(req.group_id, topic, p, po.offset)
            out.records.append(rec.Record(committed, ctx.epoch))
        resolved = rec.PendingOffsetCommit(req.group_id, topic, p, pid, None)
        out.records.append(rec.Record(resolved, ctx.epoch))
    return out
