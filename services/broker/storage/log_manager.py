"""Every partition log on this broker, across one or more log directories (one per disk).

Each log directory holds partition directories named ``<topic>-<partition>`` (the topic name
may itself contain ``-``; the partition is the digits after the last one) and a ``.lock``
file. The lock is an exclusive ``flock`` held for the manager's lifetime, so a second broker
(or a second manager in the same process) pointed at the same directory fails at start with
KafkaStorageError instead of corrupting the logs.

At start every partition directory found is opened (and recovered: see ``log.py``), and
directories renamed aside for deletion by an earlier run (``*-delete``, ``fileio``) are
removed. A new partition goes to the log directory holding the fewest partitions (ties: the
first listed).

Topic ids (``partition_metadata.py``): each partition directory stores the id of the topic it
belongs to, written atomically when the directory is created, before any segment. The
manager never hands out a log of another topic id than the one asked for: ``get_or_create``
with an id deletes a stored log whose id differs (it belongs to a deleted topic of the same
name) and creates a fresh one, and stores the id in a directory that has none yet (written
before topic ids were stored). ``remove_stale`` applies the same rule at start, before the
broker registers, to every log against the cluster's assignment of this broker.

Logs found at start are opened with ``default_config`` (the topic's real configuration comes
from the controller); ``retention_pass`` skips them until ``get_or_create`` has given them
their configuration, so a default retention never deletes data of a topic configured to keep
it longer.

Threads: the partition map is guarded by a lock, so any thread may call these methods.
``retention_pass`` and ``flush_pass`` call mutating ``Log`` methods, which serialise with the
partition's own writer through the log's internal lock; closed logs are skipped. The flush
pass also writes behind the leader-epoch files that lack new entries (``write_epochs_behind``,
one write per changed log, under each cache's own file lock, not the log's).

The flush pass runs every second and its work is proportional to what changed, not to the
number of logs: each log reports every change of its state (``Log.on_change``, any thread)
into a set of changed logs, and a pass takes that set, does what the flush policy and the
epoch files ask of those logs, and keeps for the next pass only those that may still have
work without a further change (``Log.wants_flush_pass``: a ``flush.ms`` not yet due, a
failed write, an epoch file left for a later pass by :data:`EPOCH_WRITES_PER_PASS`), oldest
change first. An idle broker's pass looks at no log at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from headwater.batch.codec import now_ms
from headwater.config import TopicConfig
from headwater.errors import InvalidTopicError, KafkaStorageError
from services.broker.storage import fileio, partition_metadata
from services.broker.storage.log import Clock, Log

_log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: Leader-epoch files one flush pass writes behind at most: a failover gives thousands of
#: logs a new epoch at once, and writing all their files (a temporary file and a rename
#: each) in the second the new leaders start serving competed with them for the CPU; the
#: rest are written by the following passes (the logs stay in the changed set), and a flush
#: that moves a log's recovery point still writes and fsyncs its file first.
EPOCH_WRITES_PER_PASS = 256
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``; rejects names that are not a single safe path component."""
    if not topic or topic in (".", "..") or "/" in topic or "\0" in topic or partition < 0:
        raise InvalidTopicError(f"cannot store partition {partition} of topic {topic!r}")
    return f"{topic}-{partition}"


class LogManager:
    """Opens, creates, places and deletes partition logs (see module doc)."""

    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike[str]],
        *,
        default_config: TopicConfig | None = None,
        clock: Clock = now_ms,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise KafkaStorageError("no log directory configured")
        if len({d.resolve() for d in self.log_dirs}) != len(self.log_dirs):
            raise KafkaStorageError(f"log directories listed twice: {self.log_dirs}")
        self.default_config = default_config or TopicConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._home: dict[tuple[str, int], Path] = {}
        #: partitions placed in each log directory (``_home`` counted, for placements)
        self._placed: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        #: logs changed since the flush pass last looked at them (guarded by ``_changed_lock``)
        self._changed: dict[Log, None] = {}  # a set in the order the logs changed
        self._changed_lock = threading.Lock()
        self._configured: set[tuple[str, int]] = set()
        #: each log's stored topic id (None: a directory from before topic ids were stored).
        self._topic_ids: dict[tuple[str, int], str | None] = {}
        self._lock_fds: list[int] = []
        #: partitions whose new log another thread is creating (outside the lock)
        self._creating: dict[tuple[str, int], threading.Event] = {}
        #: new partitions not yet written back (``sync_created``), by log directory
        self._unsynced: dict[Path, set[tuple[str, int]]] = {}
        try:
            for d in self.log_dirs:
                d.mkdir(parents=True, exist_ok=True)
                self._lock_fds.append(_lock_dir(d))
            self._load_all()
        except BaseException:
            self.close()
            raise

    def _load_all(self) -> None:
        for d in self.log_dirs:
            for entry in sorted(d.iterdir()):
                if entry.is_dir() and entry.name.endswith(fileio.DELETE_SUFFIX):
                    fileio.remove_renamed(entry)  # a deletion an earlier run did not finish
                    continue
                m = _PARTITION_DIR.match(entry.name)
                if not entry.is_dir() or m is None:
                    continue
                tp = (m["topic"], int(m["partition"]))
                if tp in self._logs:
                    raise KafkaStorageError(
                        f"partition {tp[0]}-{tp[1]} found in both {self._home[tp]} and {d}"
                    )
                self._topic_ids[tp] = partition_metadata.read_topic_id(entry)
                self._logs[tp] = self._track(Log(entry, self.default_config, clock=self._clock))
                self._set_home(tp, d)

    # -- lookup and creation ------------------------------------------------------------

    def get_or_create(
        self, topic: str, partition: int, config: TopicConfig, topic_id: str = ""
    ) -> Log:
        """The partition's log, created if absent (reopened if it was closed); applies
        ``config``.

        With a ``topic_id`` (the cluster's id for ``topic``), a stored log of another id is
        deleted first and a fresh, empty log created in its place; a log without a stored id
        is given this one; a new log stores it before its first segment exists. Without one
        (``""``) ids are neither checked nor stored.
        """
        name = partition_dir_name(topic, partition)
        tp = (topic, partition)
        with self._lock:
            stored = self._topic_ids.get(tp)
            stale = None
            if tp in self._logs and topic_id and stored is not None and stored != topic_id:
                stale = self._forget(tp)
        if stale is not None:
            stale.delete()
        while True:
            with self._lock:
                busy = self._creating.get(tp)
                if busy is None:
                    log = self._logs.get(tp)
                    if log is not None and log.closed:
                        log = Log(self._home[tp] / name, config, clock=self._clock)
                        self._logs[tp] = self._track(log)
                    elif log is not None:
                        log.update_config(config)
                    else:
                        home = self._least_loaded_dir()
                        self._set_home(tp, home)  # placed: counts for the next placements
                        busy = self._creating[tp] = threading.Event()
                        break
                    return self._finish(tp, log, topic_id)
            busy.wait()  # another thread is creating this partition's log: use it
        # The new log's files are created outside the lock: thousands of new partitions go
        # through the worker threads at once, and the event loop's lookups (``topic_id``,
        # ``log_dir_of``) must not wait behind all of them. They are not fsynced one by one
        # (three files and two directories each): ``sync_created`` writes back all of them
        # at once.
        try:
            with self._lock:
                self._unsynced.setdefault(home, set()).add(tp)
            if topic_id:
                (home / name).mkdir(exist_ok=True)
                partition_metadata.write_topic_id(home / name, topic_id, sync=False)
            log = Log(home / name, config, clock=self._clock)
        except BaseException:
            with self._lock:
                self._drop_home(tp)
                self._creating.pop(tp).set()
            raise
        with self._lock:
            if topic_id:
                self._topic_ids[tp] = topic_id
            self._logs[tp] = self._track(log)
            self._set_home(tp, home)
            self._creating.pop(tp).set()
            return self._finish(tp, log, topic_id)

    def sync_created(self) -> dict[tuple[str, int], OSError]:
        """Write back the new partitions' directories and files (``fileio.sync_filesystem``:
        one call per log directory, not five fsyncs per partition). Returns the new
        partitions of the directories that could not be written back, with the error; they
        stay pending, so the next call tries again."""
        with self._lock:
            dirs, self._unsynced = self._unsynced, {}
        failed: dict[tuple[str, int], OSError] = {}
        for d in sorted(dirs):
            try:
                fileio.sync_filesystem(d)
            except OSError as exc:
                failed.update(dict.fromkeys(dirs[d], exc))
                with self._lock:
                    self._unsynced.setdefault(d, set()).update(dirs[d])
        return failed

    def _finish(self, tp: tuple[str, int], log: Log, topic_id: str) -> Log:
        """Store a missing topic id and mark ``tp`` configured (caller holds the lock)."""
        if topic_id and self._topic_ids.get(tp) is None:
            partition_metadata.write_topic_id(self._home[tp] / partition_dir_name(*tp), topic_id)
            self._topic_ids[tp] = topic_id
        self._configured.add(tp)
        return log

    def _forget(self, tp: tuple[str, int]) -> Log | None:
        """Drop ``tp`` from every map (caller holds the lock); its log, if any."""
        self._drop_home(tp)
        self._configured.discard(tp)
        self._topic_ids.pop(tp, None)
        return self._logs.pop(tp, None)

    def _set_home(self, tp: tuple[str, int], home: Path) -> None:
        """Place ``tp`` in ``home`` (caller holds the lock)."""
        self._drop_home(tp)
        self._home[tp] = home
        self._placed[home] += 1

    def _drop_home(self, tp: tuple[str, int]) -> None:
        home = self._home.pop(tp, None)
        if home is not None:
            self._placed[home] -= 1

    def _least_loaded_dir(self) -> Path:
        # counted as placed, not by walking every partition: thousands of creations at once
        return min(self.log_dirs, key=lambda d: self._placed[d])

    def _track(self, log: Log) -> Log:
        """Have ``log`` report its changes to the flush pass, which looks at it once now."""
        log.on_change(lambda: self._mark_changed(log))
        self._mark_changed(log)
        return log

    def _mark_changed(self, log: Log) -> None:
        with self._changed_lock:
            self._changed[log] = None

    def get(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        with self._lock:
            return self._home.get((topic, partition))

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._logs)

    def delete(self, topic: str, partition: int) -> bool:
        """Delete the partition's directory; False when it was not here."""
        with self._lock:
            log = self._forget((topic, partition))
        if log is None:
            return False
        log.delete()
        return True

    def topic_id(self, topic: str, partition: int) -> str | None:
        """The partition's stored topic id (None: not here, or stored before ids were)."""
        with self._lock:
            return self._topic_ids.get((topic, partition))

    def remove_stale(
        self, expected: Mapping[tuple[str, int], str], *, unknown_topics: Iterable[str] = ()
    ) -> list[tuple[str, int]]:
        """Delete every log not yet handed out by ``get_or_create`` that the cluster does not
        assign to this broker under its stored topic id; returns the partitions deleted.

        ``expected`` maps each partition the cluster assigns to this broker to the topic's
        current id. A log absent from it (its topic was deleted, or the partition was moved
        away) or whose stored id differs (the name was deleted and created again) is
        deleted; a log without a stored id that is expected stores the expected one. Logs of
        ``unknown_topics`` (names whose cluster record could not be read) are left alone.
        Blocking: call off the event loop.
        """
        keep = set(unknown_topics)
        with self._lock:
            candidates = [tp for tp in self._logs if tp not in self._configured]
        removed: list[tuple[str, int]] = []
        for tp in sorted(candidates):
            if tp[0] in keep:
                continue
            want = expected.get(tp)
            with self._lock:
                if tp in self._configured or tp not in self._logs:
                    continue  # handed out meanwhile: get_or_create checked it
                stored = self._topic_ids.get(tp)
                if want is not None and stored in (None, want):
                    if stored is None:
                        home = self._home[tp]
                        partition_metadata.write_topic_id(home / partition_dir_name(*tp), want)
                        self._topic_ids[tp] = want
                    continue
                log = self._forget(tp)
            if log is not None:
                log.delete()
                removed.append(tp)
        return removed

    # -- periodic work ------------------------------------------------------------------

    def retention_pass(self, now_ms: int) -> int:
        """Apply retention to every open, configured log; segments deleted."""
        with self._lock:
            logs = [lg for tp, lg in self._logs.items() if tp in self._configured]
        return sum(lg.delete_retention(now_ms) for lg in logs if not lg.closed)

    def flush_pass(self, now_ms: int) -> int:
        """For every log changed since the last pass (module doc): write its leader-epoch
        file when it lacks entries (``write_epochs_behind``), then apply the flush policy;
        logs whose active segment was fsynced. Logs that may have more work later stay for
        the next pass, also when a flush fails (KafkaStorageError, raised)."""
        with self._changed_lock:
            changed, self._changed = self._changed, {}
        logs = [log for log in changed if not log.closed]
        try:
            self.write_epochs_behind(logs, limit=EPOCH_WRITES_PER_PASS)
            return sum(1 for log in logs if log.maybe_flush(now_ms))
        finally:
            again = [log for log in logs if log.wants_flush_pass()]
            if again:
                with self._changed_lock:
                    self._changed = {**dict.fromkeys(again), **self._changed}  # first

    def write_epochs_behind(
        self, logs: Iterable[Log] | None = None, *, limit: int | None = None
    ) -> int:
        """Write every leader-epoch file (of ``logs``; None: of every open log) that lacks
        entries of its cache, without fsync (a failover's new epochs are kept in memory at
        once: ``leader_epoch`` module doc), at most ``limit`` of them; the number written.
        A log whose write fails is logged and tried again by the next pass (its next flush,
        which must fsync the file, raises the error)."""
        written, failed = 0, []
        for lg in self._open_logs() if logs is None else logs:
            if limit is not None and written >= limit:
                break
            try:
                written += lg.write_epochs_behind()
            except KafkaStorageError as exc:
                failed.append(exc)
        if failed:
            _log.warning(
                "leader-epoch files of %d logs not written (next pass retries): %s",
                len(failed),
                failed[0],
            )
        return written

    def _open_logs(self) -> list[Log]:
        return [log for log in self.all_logs() if not log.closed]

    def close(self) -> None:
        """Close every log cleanly and release the directory locks."""
        with self._lock:
            logs = list(self._logs.values())
        try:
            failed = self.sync_created()
            if failed:  # not marked clean: the next start validates them
                raise next(iter(failed.values()))
            for log in logs:
                log.close()
        finally:
            for fd in self._lock_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._lock_fds = []


def _lock_dir(d: Path) -> int:
    fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise KafkaStorageError(f"log directory {d} is in use by another broker: {exc}") from exc
    return fd
