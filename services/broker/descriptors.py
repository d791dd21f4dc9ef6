"""The broker's file descriptors: the limit raised at start, and new partitions refused before
the descriptors run out (issue 17 item 4).

Every hosted partition keeps :data:`FILES_PER_PARTITION` descriptor open (its active
segment's log; one more per sealed segment, counted by :func:`open_descriptors` as they are
open). Index files are opened on demand: the active segments' offset and time indexes of all
partitions share one bounded least-recently-used set
(:data:`services.broker.storage.fileio.INDEX_FILES`, ``--index-files-open-max``, at most a
quarter of the limit: :func:`index_files_bound`), whose whole bound is kept free for them.
Still the inherited soft ``RLIMIT_NOFILE`` (often 1,024; 20,000 on the benchmark machine)
caps how many partitions a broker can host; past it the broker could not even accept a
connection while it still looks healthy. Hence:

* at start, :func:`raise_soft_limit` raises the soft limit to the hard one (Kafka's
  deployment guides ask for ``ulimit -n 100000``; a process may raise its own soft limit up
  to the hard one), and the broker logs what that leaves room for;
* :meth:`DescriptorBudget.admit` decides, once per LeaderAndIsr, how many of its *new*
  partitions fit while :data:`RESERVE` descriptors stay free for sockets (clients, peers,
  etcd) and short-lived files, and the index files' bound for them; the rest are refused
  with ``KAFKA_STORAGE_ERROR`` (what Kafka answers when a log directory cannot open files)
  and a message naming the limit, and counted in
  ``headwater_broker_partitions_refused_total{reason="descriptors"}``. Partitions already
  hosted are never refused.

The process collector's ``process_open_fds`` and ``process_max_fds`` (every Headwater
service's /metrics) show the use against the limit.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable

from services.broker.storage import fileio

log = logging.getLogger(__name__)

#: Descriptors a hosted partition keeps open (its active segment's log; indexes on demand).
FILES_PER_PARTITION = 1
#: Default bound of open index files (``--index-files-open-max``).
INDEX_FILES_OPEN_MAX = 1024
#: Descriptors kept free for sockets and short-lived files (a quarter of a smaller limit: under
#: the common 1,024 a broker keeps 256 free and still hosts about 250 partitions).
RESERVE = 1024


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns ``(before, after)``. An
    unlimited hard limit raises the soft one to the kernel's ``nr_open`` (else it stays)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
        return soft, target
    return soft, soft


def index_files_bound(limit: int, wanted: int = INDEX_FILES_OPEN_MAX) -> int:
    """The bound of open index files under the open-file limit ``limit``: ``wanted``, at most a
    quarter of the limit (so a limit of 1,024 keeps 256 for them), at least 2 (one segment's
    pair)."""
    return max(2, min(wanted, limit // 4))


def open_descriptors() -> int:
    """Descriptors this process has open now (Linux ``/proc``; ``/dev/fd`` elsewhere)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return len(os.listdir("/dev/fd"))


class DescriptorBudget:
    """How many new partitions still fit under the open-file limit (module doc)."""

    def __init__(
        self,
        limit: int | None = None,
        reserve: int | None = None,
        count: Callable[[], int] = open_descriptors,
        index_files: fileio.OpenFiles = fileio.INDEX_FILES,
    ) -> None:
        self.limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if limit is None else limit
        self.reserve = min(RESERVE, self.limit // 4) if reserve is None else reserve
        #: how many descriptors are open now
        self.count = count
        #: the bounded set of open index files, whose bound stays free for them
        self.index_files = index_files

    def room(self) -> int:
        """New partitions that fit now: what is left once the reserve and the index files'
        bound are set aside (the index files open now count once, in ``count``)."""
        index_headroom = max(0, self.index_files.bound - len(self.index_files))
        free = self.limit - self.reserve - index_headroom - self.count()
        return max(0, free // FILES_PER_PARTITION)

    def admit(self, new_partitions: int) -> int:
        """How many of ``new_partitions`` may be created (the first ones, in request order)."""
        if new_partitions <= 0:
            return 0
        return min(new_partitions, self.room())

    def refusal(self) -> str:
        return (
            f"open-file limit reached: {self.limit} descriptors (RLIMIT_NOFILE), "
            f"{FILES_PER_PARTITION} per hosted partition and segment, "
            f"{self.index_files.bound} for index files and {self.reserve} kept for "
            f"connections; raise the hard limit (ulimit -n) or spread partitions over more "
            f"brokers"
        )
