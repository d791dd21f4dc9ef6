"""The history checker: pure functions from (history, final reads, replica logs) to a report.

What counts as what (values are unique per write, ``"w-<n>"``):

* **acknowledged** — a produce with an ``ok`` completion.
* **lost** — acknowledged, but in no final read. The number that must be 0.
* **unexpected** — read, but never invoked by any produce.
* **failed present** — read, although its completion was a definite ``fail`` (the broker
  said the write did not happen). ``info`` (unknown) writes may or may not be present.
* **duplicated** — one value at two or more (partition, offset) positions.
* **reordered** — one process awaited each acknowledgement before its next write, so its
  acknowledged writes to one partition must sit at increasing offsets, both in the offsets
  the broker acknowledged and in the offsets where the final read found them.
* **inconsistent offsets** — one (partition, offset) holding two values, across readers
  (the consumer, every replica's log) and the offsets acknowledged to producers.
* **divergent replicas** — two replicas of a partition whose batches below the high
  watermark differ (base offset, last offset, leader epoch, CRC, size compared batch by batch).
  A replica that is only shorter (lagging) is reported as lagging, not divergent.

Nothing here touches the network or the disk; :mod:`tests.fault.harness.replicas` reads logs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tests.fault.harness.history import Op


@dataclass(frozen=True, slots=True)
class Read:
    """One record seen by a final reader: ``source`` is "consumer" or "broker-<id>"."""

    source: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The identity of one stored batch (what divergence compares)."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    size: int


@dataclass(frozen=True, slots=True)
class Divergence:
    partition: int
    replica_a: int
    replica_b: int
    base_offset: int
    detail: str


@dataclass(frozen=True, slots=True)
class Reorder:
    process: int
    partition: int
    first: str  # acknowledged first...
    second: str  # ...acknowledged later, yet at a lower or equal offset
    first_offset: int
    second_offset: int
    view: str  # "ack" (acknowledged offsets) or "read" (where the final read found them)


@dataclass
class Report:
    attempted: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    unknown_present: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    failed_present: list[str] = field(default_factory=list)
    duplicated: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    reordered: list[Reorder] = field(default_factory=list)
    inconsistent: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    divergent: list[Divergence] = field(default_factory=list)
    lagging: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # completion error -> count

    @property
    def valid(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.failed_present
            or self.duplicated
            or self.reordered
            or self.inconsistent
            or self.divergent
        )

    def summary(self) -> str:
        """The lines a scenario prints (the first is the headline)."""
        lines = [
            f"acknowledged records lost: {len(self.lost)} of {self.acknowledged}",
            f"writes attempted: {self.attempted} (ok {self.acknowledged}, failed "
            f"{self.failed}, unknown {self.unknown} of which {self.unknown_present} present)",
            f"records read: {self.read}",
            f"unexpected records: {len(self.unexpected)}",
            f"failed writes present: {len(self.failed_present)}",
            f"duplicated records: {len(self.duplicated)}",
            f"reordered records: {len(self.reordered)}",
            f"inconsistent offsets: {len(self.inconsistent)}",
            f"divergent replicas: {len(self.divergent)}",
        ]
        if self.errors:
            top = sorted(self.errors.items(), key=lambda kv: -kv[1])
            lines.append("errors: " + ", ".join(f"{k} x{n}" for k, n in top[:6]))
        if self.lagging:
            lines.append(f"lagging replicas: {', '.join(self.lagging)}")
        for what, items in (
            ("lost", self.lost),
            ("unexpected", self.unexpected),
            ("failed present", self.failed_present),
        ):
            if items:
                lines.append(f"  {what}: {_sample(items)}")
        if self.duplicated:
            lines.append(f"  duplicated: {_sample(f'{v}@{p}' for v, p in self.duplicated.items())}")
        if self.reordered:
            lines.append(f"  reordered: {_sample(self.reordered)}")
        if self.inconsistent:
            lines.append(
                f"  inconsistent: {_sample(f'{k}={v}' for k, v in self.inconsistent.items())}"
            )
        if self.divergent:
            lines.append(f"  divergent: {_sample(self.divergent)}")
        return "\n".join(lines)


def _sample(items: Iterable[object], n: int = 8) -> str:
    items = list(items)
    text = ", ".join(str(x) for x in items[:n])
    return text + (f" ... (+{len(items) - n})" if len(items) > n else "")


def completions(history: Sequence[Op]) -> dict[int, Op]:
    """invoke index -> its completion (invocations without one are still open: unknown)."""
    return {op.invoke_index: op for op in history if op.invoke_index is not None}


def check(
    history: Sequence[Op],
    reads: Sequence[Read],
    *,
    replica_logs: Mapping[int, Mapping[int, Sequence[BatchInfo]]] | None = None,
    high_watermarks: Mapping[int, int] | None = None,
) -> Report:
    """Check a produce history against the final reads (and replica logs when given)."""
    report = Report()
    done = completions(history)
    invoked: dict[str, Op] = {}
    outcome: dict[str, Op | None] = {}
    for op in history:
        if op.type == "invoke" and op.f == "produce" and op.value is not None:
            invoked[op.value] = op
            outcome[op.value] = done.get(op.index)
    report.attempted = len(invoked)

    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    at: dict[tuple[int, int], set[str]] = defaultdict(set)
    first_read: dict[str, tuple[int, int]] = {}
    for r in reads:
        positions[r.value].add((r.partition, r.offset))
        at[(r.partition, r.offset)].add(r.value)
        first_read.setdefault(r.value, (r.partition, r.offset))
    report.read = len(positions)

    errs: Counter[str] = Counter()
    for value, comp in outcome.items():
        kind = comp.type if comp is not None else "info"
        if comp is not None and comp.error:
            errs[f"{kind} {comp.error.split(':', 1)[0]}"] += 1
        if kind == "ok":
            report.acknowledged += 1
            if value not in positions:
                report.lost.append(value)
            if comp is not None and comp.offset is not None and comp.offset >= 0:
                at[(_partition(comp), comp.offset)].add(value)
        elif kind == "fail":
            report.failed += 1
            if value in positions:
                report.failed_present.append(value)
        else:
            report.unknown += 1
            report.unknown_present += value in positions
    report.errors = dict(errs)
    report.unexpected = sorted(v for v in positions if v not in invoked)
    report.duplicated = {v: sorted(p) for v, p in positions.items() if len(p) > 1}
    report.inconsistent = {k: sorted(v) for k, v in sorted(at.items()) if len(v) > 1}
    report.reordered = _reorders(history, done, first_read)
    if replica_logs is not None:
        hws = high_watermarks or {}
        for partition, logs in sorted(replica_logs.items()):
            div, lag = compare_replicas(partition, logs, hws.get(partition))
            report.divergent += div
            report.lagging += lag
    return report


def _partition(op: Op) -> int:
    return op.partition if op.partition is not None else -1


def _reorders(
    history: Sequence[Op], done: Mapping[int, Op], first_read: Mapping[str, tuple[int, int]]
) -> list[Reorder]:
    """Per process and partition, acknowledged writes in invocation order must be at
    increasing offsets (only meaningful for processes that await each acknowledgement)."""
    by_proc: dict[tuple[int, int], list[Op]] = defaultdict(list)
    for op in history:
        comp = done.get(op.index) if op.type == "invoke" and op.f == "produce" else None
        if comp is not None and comp.type == "ok":
            by_proc[(comp.process, _partition(comp))].append(comp)
    found: list[Reorder] = []
    for (process, partition), oks in sorted(by_proc.items()):
        for view in ("ack", "read"):
            prev: tuple[str, int] | None = None
            for comp in oks:
                assert comp.value is not None
                if view == "ack":
                    off = comp.offset if comp.offset is not None and comp.offset >= 0 else None
                else:
                    pos = first_read.get(comp.value)
                    off = pos[1] if pos is not None and pos[0] == partition else None
                if off is None:
                    continue
                if prev is not None and off <= prev[1]:
                    found.append(
                        Reorder(process, partition, prev[0], comp.value, prev[1], off, view)
                    )
                prev = (comp.value, off)
    return found


def compare_replicas(
    partition: int, logs: Mapping[int, Sequence[BatchInfo]], hw: int | None
) -> tuple[list[Divergence], list[str]]:
    """Compare every replica's batches below ``hw`` (all batches when None) pairwise.

    Returns (divergences, lagging descriptions). Batches are compared in order; the first
    difference between two replicas is one divergence (what follows it is not reported).
    """
    cut: dict[int, list[BatchInfo]] = {
        b: [x for x in batches if hw is None or x.base_offset < hw] for b, batches in logs.items()
    }
    divergences: list[Divergence] = []
    lagging: list[str] = []
    replicas = sorted(cut)
    for i, a in enumerate(replicas):
        for b in replicas[i + 1 :]:
            for x, y in zip(cut[a], cut[b], strict=False):
                if x != y:
                    at = min(x.base_offset, y.base_offset)
                    divergences.append(Divergence(partition, a, b, at, f"{x} != {y}"))
                    break
    if hw is not None:
        for b in replicas:
            end = cut[b][-1].last_offset + 1 if cut[b] else 0
            if end < hw:
                lagging.append(f"p{partition}@broker-{b} ends at {end} < hw {hw}")
    return divergences, lagging
