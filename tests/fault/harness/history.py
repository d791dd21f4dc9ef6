"""The operation history of a fault-injection run (Jepsen's model).

Every client operation is recorded twice: an ``invoke`` when it starts and one completion —
``ok`` (the system said it happened), ``fail`` (the system said it definitely did *not*
happen) or ``info`` (unknown: a timeout, a broken connection, an error returned after the
write may already be in the log). Fault injections are recorded as ``info`` operations of
the ``nemesis`` process so a failing history can be read next to what was done to the cluster.

Contract: operations are appended in real-time order; ``index`` is the position in the
history; a completion names its invocation (``invoke_index``). Produce operations carry the
unique value written (``"w-<n>"``), the partition and, once acknowledged, the offset.

Thread-safety: :class:`History` appends under a lock, so workload tasks on an event loop and
a nemesis in another thread may record into one history.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

OpType = Literal["invoke", "ok", "fail", "info"]
NEMESIS = -1  # the process id of fault injections


@dataclass(frozen=True, slots=True)
class Op:
    """One history entry (an invocation, a completion, or a nemesis event)."""

    index: int
    process: int
    type: OpType
    f: str  # "produce", or the nemesis action ("kill", "pause", "cut", ...)
    value: str | None = None
    partition: int | None = None
    offset: int | None = None
    time: float = 0.0  # seconds since the history started
    error: str | None = None
    invoke_index: int | None = None  # for completions: the index of their invocation


class History:
    """An append-only, thread-safe list of :class:`Op` (see module doc)."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def _append(self, **fields: object) -> Op:
        with self._lock:
            op = Op(index=len(self._ops), time=time.monotonic() - self._t0, **fields)  # type: ignore[arg-type]
            self._ops.append(op)
            return op

    def invoke(self, process: int, f: str, value: str, partition: int | None = None) -> Op:
        return self._append(process=process, type="invoke", f=f, value=value, partition=partition)

    def complete(
        self,
        invocation: Op,
        type: OpType,
        *,
        offset: int | None = None,
        partition: int | None = None,
        error: str | None = None,
    ) -> Op:
        if invocation.type != "invoke":
            raise ValueError(f"op {invocation.index} is not an invocation")
        if type == "invoke":
            raise ValueError("a completion cannot be an invocation")
        return self._append(
            process=invocation.process,
            type=type,
            f=invocation.f,
            value=invocation.value,
            partition=invocation.partition if partition is None else partition,
            offset=offset,
            error=error,
            invoke_index=invocation.index,
        )

    def nemesis(self, action: str, detail: str = "") -> Op:
        """Record a fault injection (or its undoing)."""
        return self._append(process=NEMESIS, type="info", f=action, value=detail or None)

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def dump(self, path: Path) -> None:
        """One JSON object per line (kept next to a failing run's logs)."""
        path.write_text("".join(json.dumps(asdict(op)) + "\n" for op in self.ops))


def load(path: Path) -> list[Op]:
    return [Op(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def from_tuples(rows: Iterable[tuple[object, ...]]) -> list[Op]:
    """Build a history by hand (checker tests): rows of ``(process, type, value, partition,
    offset[, error])``; completions are matched to the latest open invocation of their
    process."""
    ops: list[Op] = []
    open_inv: dict[int, int] = {}
    for row in rows:
        process, type_, value, partition, offset, *rest = row
        assert isinstance(process, int) and isinstance(type_, str)
        op = Op(
            index=len(ops),
            process=process,
            type=type_,  # type: ignore[arg-type]
            f="produce",
            value=value,  # type: ignore[arg-type]
            partition=partition,  # type: ignore[arg-type]
            offset=offset,  # type: ignore[arg-type]
            time=float(len(ops)),
            error=rest[0] if rest else None,  # type: ignore[arg-type]
        )
        if type_ == "invoke":
            open_inv[process] = op.index
        else:
            op = replace(op, invoke_index=open_inv.pop(process))
        ops.append(op)
    return ops
