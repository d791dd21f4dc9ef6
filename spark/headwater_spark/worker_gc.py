"""Keep PySpark's per-task garbage collection cheap in a reused Python worker.

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker process
(``pyspark/daemon.py``). A full collection walks every object the collector tracks: a worker
that has imported pyarrow, grpc and the client and keeps a pooled consumer holds ~10^5 of
them, 60-70 ms a collection on a loaded 2-core machine, after each of a micro-batch's tasks.
In bench/spark_streaming_scale.py (16 partitions, a micro-batch every few seconds) py-spy put
more of the workers' samples in that collection than in reading.

:func:`freeze_once` (called when a task's read is done) collects once and then moves every
object still alive to the permanent generation (``gc.freeze``), once per process: later
collections walk only what later tasks made. Contract: the first call in a process freezes,
later calls do nothing. Objects frozen then are never collected, even if dropped later (a
pooled consumer closed after its idle timeout): they are the worker's start-up state, made
once per process, and they go when the worker exits.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_once() -> None:
    """Collect, then freeze every surviving object, the first time in this process."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
