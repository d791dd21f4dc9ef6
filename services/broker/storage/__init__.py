"""The broker's storage engine: partition logs of segments on local disk.

Pure synchronous Python and ``os`` file I/O (no gRPC, no asyncio). Layers, each importing only
the ones above it in this list:

* ``fileio``        short-write/short-read loops around ``os``
* ``offset_index``  ``<base>.index``: sparse offset -> position (8-byte entries)
* ``time_index``    ``<base>.timeindex``: sparse timestamp -> offset (12-byte entries)
* ``segment``       ``LogSegment``: one ``<base>.log`` + its indexes; append, read, recovery
* ``checkpoint``    ``partition.checkpoint`` and the clean-shutdown marker
* ``results``       ``AppendInfo``, ``FetchSlice``, the read ``Snapshot``
* ``log_state``     the fields of a ``Log``, its read snapshot and checkpoint helpers
* ``log_read``      reading a ``Log`` (any thread, no lock)
* ``log_cleanup``   retention, truncation and the cleaner's swap of a ``Log``
* ``log``           ``Log``: one partition directory; load, append, roll, flush
* ``log_manager``   ``LogManager``: every partition in every log directory

The on-disk format and the behaviour are described in ``docs/storage.md``.
"""

from services.broker.storage.log import Log
from services.broker.storage.log_manager import LogManager
from services.broker.storage.results import AppendInfo, FetchSlice
from services.broker.storage.segment import TimestampMatch

__all__ = ["AppendInfo", "FetchSlice", "Log", "LogManager", "TimestampMatch"]
