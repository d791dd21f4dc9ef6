"""Small helpers around ``os`` file I/O that loop over short writes and reads."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import functools
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

#: Suffix of a directory renamed aside for deletion (Kafka's ``-delete``): it never matches
#: a partition directory's name, so a crash half-way through removing it leaves nothing
#: that is opened again as a (truncated) log; the next start removes it.
DELETE_SUFFIX = "-delete"

IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (regular files rarely write short)."""
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        view = view[n:]


def writev_all(fd: int, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
    """Write ``buffers`` in order with as few ``os.writev`` calls as possible (no copies).

    Returns the number of bytes written. Raises ``OSError`` as ``os.writev`` does; the caller
    decides what to do with a partial write.
    """
    views = [memoryview(b).cast("B") for b in buffers]
    views = [v for v in views if v.nbytes]
    total = sum(v.nbytes for v in views)
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i : i + IOV_MAX])
        while n > 0:
            size = views[i].nbytes
            if n >= size:
                n -= size
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0
    return total


def pread_into(fd: int, buf: bytearray, size: int, position: int) -> int:
    """Read up to ``size`` bytes at ``position`` into the start of ``buf``; bytes read.

    Fewer than ``size`` only at end of file. ``buf`` is reused by the caller, so a scan over
    a large file does not allocate (and page-fault) a fresh buffer per read.
    """
    view = memoryview(buf)
    got = 0
    while got < size:
        n = os.preadv(fd, [view[got:size]], position + got)
        if n == 0:
            break
        got += n
    return got


class OpenFiles:
    """A bound on how many :class:`LazyFile` descriptors are open at once (issue 17 item 4).

    Every hosted partition's active segment has two index files, written once per
    ``index.interval.bytes`` of appended log; keeping both open would cost every partition three
    descriptors (with its log file), which caps a broker at a third of its open-file limit.
    Instead the index files of all partitions share this least-recently-used set: opening one
    past :attr:`bound` closes the least recently used ones that nobody is using at that moment;
    they reopen on their next write. The index entries themselves live in memory, so readers
    never need these descriptors. ``bound`` (the broker's ``--index-files-open-max``) may be
    changed at any time; it takes effect at the next open.
    """

    def __init__(self, bound: int = 1024) -> None:
        self.bound = bound
        self._lru: collections.OrderedDict[LazyFile, None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    def _opened(self, f: LazyFile) -> None:
        """``f`` (whose lock the caller holds) opened its descriptor: close others past the
        bound. A file in use (its lock held) is skipped, so the set may exceed the bound
        briefly by the files being used at once."""
        with self._lock:
            self._lru[f] = None
            excess = len(self._lru) - self.bound
            if excess <= 0:
                return
            # From the least recently used end, stopping once enough are closed: usually the
            # first entry, so an open past the bound costs O(1), not a copy of the whole set.
            closed = []
            for victim in self._lru:
                if victim is f or not victim._lock.acquire(blocking=False):
                    continue
                try:
                    victim._close_fd()
                finally:
                    victim._lock.release()
                closed.append(victim)
                if len(closed) >= excess:
                    break
            for victim in closed:
                del self._lru[victim]

    def _touch(self, f: LazyFile) -> None:
        with self._lock:
            if f in self._lru:
                self._lru.move_to_end(f)

    def _forget(self, f: LazyFile) -> None:
        with self._lock:
            self._lru.pop(f, None)


#: The broker's one set of open index files (``--index-files-open-max``).
INDEX_FILES = OpenFiles()


class LazyFile:
    """A file opened (``O_RDWR | O_CREAT | O_APPEND``) when needed, closable in between.

    Its descriptor is used only inside :meth:`use` (under the file's lock), so :class:`OpenFiles`
    can close it between uses from any thread without a use ever writing through a closed
    (or reused) descriptor number. Index files of sealed segments are released for good
    (read once at load, written again only by a truncation); those of active segments count
    in ``files`` and are closed when others were used more recently.

    Reopening may fail (``EMFILE``: the descriptor shortage the bound is for). A cut that
    could not be made (:meth:`truncate`, or the cut-back of a failed :meth:`append`) is
    remembered and made by the next :meth:`use` before anything else, so nothing is ever
    written after bytes the owner has dropped.
    """

    __slots__ = ("__weakref__", "_closed", "_cut_to", "_fd", "_files", "_lock", "path")

    def __init__(self, path: os.PathLike[str] | str, files: OpenFiles = INDEX_FILES) -> None:
        self.path = path
        self._closed = False
        self._files = files
        self._lock = threading.Lock()
        self._fd = -1
        #: a length the file must be cut to before its next use (a cut that failed)
        self._cut_to: int | None = None
        with self.use():  # creates the file
            pass

    @contextlib.contextmanager
    def use(self) -> Iterator[int]:
        """The open descriptor, valid inside the ``with`` block only (reopened if released;
        a pending cut made first). Raises ``OSError(EBADF)`` after :meth:`close`, and
        ``OSError`` when the file cannot be reopened or cut."""
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, f"{self.path} is closed")
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                self._files._opened(self)
            else:
                self._files._touch(self)
            if self._cut_to is not None:
                os.ftruncate(self._fd, self._cut_to)
                self._cut_to = None
            yield self._fd

    def truncate(self, length: int) -> None:
        """Cut the file to ``length`` bytes. On ``OSError`` (raised) the cut stays pending:
        the next :meth:`use` makes it before anything else (class doc)."""
        with self._lock:
            self._cut_to = length if self._cut_to is None else min(self._cut_to, length)
        with self.use():
            pass

    def append(self, data: bytes | bytearray | memoryview, length: int) -> None:
        """Write ``data`` at the end of the file, ``length`` bytes long before. On ``OSError``
        (raised) the file is cut back to ``length``, now or at the next :meth:`use`."""
        try:
            with self.use() as fd:
                write_all(fd, data)
        except OSError:
            with contextlib.suppress(OSError):
                self.truncate(length)
            raise

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def fsync(self) -> None:
        """fsync the file (through a descriptor of its own, so writers do not wait), after
        making a pending cut."""
        if self._cut_to is not None:
            with self.use():
                pass
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, f"{self.path} is closed")
            fd = os.dup(self._fd) if self._fd >= 0 else os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _try_pending_cut(self) -> None:
        """Make a pending cut now if the file can be opened (else it stays pending)."""
        if self._cut_to is not None:
            with contextlib.suppress(OSError), self.use():
                pass

    def release(self) -> None:
        """Close the descriptor (a pending cut made first if it can be); the next use
        reopens the file."""
        self._try_pending_cut()
        with self._lock:  # forgotten under the lock (order as in use()): a use() racing
            self._close_fd()  # this release reopens after it and registers again
            self._files._forget(self)

    def close(self) -> None:
        """Close for good (a pending cut made first if it can be; a file left longer is
        validated against the log when loaded): later uses raise ``OSError(EBADF)``."""
        self._try_pending_cut()
        with self._lock:
            self._close_fd()
            self._closed = True
            self._files._forget(self)


def replace_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a
    torn one: write ``path.tmp``, fsync it, rename over ``path``, fsync the directory (so the
    rename itself survives a power loss). ``sync=False`` skips both fsyncs: a process crash
    still leaves the old or the new file, a power loss may leave the old one (or, on file
    systems that do not order the rename after the data, an empty or torn one: the caller
    must read such a file as absent). Raises OSError."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def sync_filesystem(path: Path) -> None:
    """Write back everything cached for the file system holding ``path`` (Linux ``syncfs``:
    one call for many new files instead of an fsync each; ``os.sync`` elsewhere). Raises
    OSError."""
    syncfs = getattr(_libc(), "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


#: ``sync_file_range(2)``'s SYNC_FILE_RANGE_WRITE: start writeback, do not wait.
_SFR_WRITE = 2


@functools.cache
def _sync_file_range() -> Any:
    fn = getattr(_libc(), "sync_file_range", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Start writing ``[offset, offset + nbytes)`` of ``fd`` back to disk, without waiting
    (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``). False where the call does not exist or
    fails; nothing else happens then. Not a durability step (no wait, no metadata)."""
    fn = _sync_file_range()
    if fn is None or nbytes <= 0:
        return False
    return bool(fn(fd, offset, nbytes, _SFR_WRITE) == 0)


def drop_cached(fd: int, offset: int, nbytes: int) -> bool:
    """Drop the clean pages of ``[offset, offset + nbytes)`` of ``fd`` from the page cache
    (``posix_fadvise(DONTNEED)``; pages still dirty or under writeback stay). Later reads of
    the range come from the disk. Does not wait for the disk. False where unsupported or on
    error (the data is unaffected either way: the cache is only a copy)."""
    if nbytes <= 0 or not hasattr(os, "posix_fadvise"):
        return False
    try:
        os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
    except OSError:
        return False
    return True


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def fsync_dir(directory: Path) -> None:
    """fsync a directory (so a rename or creation inside it survives a power loss)."""
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def rename_for_deletion(directory: Path) -> Path | None:
    """Rename ``directory`` aside atomically to ``<name>.<uuid>-delete`` (the rename is
    fsynced) and return the new path, for the caller to remove; None when it is already
    gone. Open descriptors of its files stay usable."""
    aside = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        return None
    fsync_dir(directory.parent)
    return aside


def remove_renamed(directory: Path) -> None:
    """Delete a directory renamed aside by :func:`rename_for_deletion` (whatever is left)."""
    shutil.rmtree(directory, ignore_errors=True)
