"""Small helpers around ``os`` file I/O that loop over short writes and reads."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

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


class LazyFile:
    """A file opened (``O_RDWR | O_CREAT | O_APPEND``) when first needed, closable in between.

    Index files of sealed segments are only read once (at load) and written again only by a
    truncation, so their segment releases the descriptor: a partition with thousands of
    segments holds one descriptor per segment (its log file), not three.
    """

    __slots__ = ("_closed", "_fd", "path")

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = path
        self._closed = False
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    @property
    def fd(self) -> int:
        if self._closed:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def fsync(self) -> None:
        if self._fd >= 0 or self._closed:
            os.fsync(self.fd)  # raises EBADF when closed for good
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def release(self) -> None:
        """Close the descriptor; the next use reopens the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        """Close for good: later uses raise ``OSError(EBADF)`` instead of reopening."""
        self.release()
        self._closed = True


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
