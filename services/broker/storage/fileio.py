"""Small helpers around ``os`` file I/O that loop over short writes and reads."""

from __future__ import annotations

import os
from collections.abc import Sequence

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
