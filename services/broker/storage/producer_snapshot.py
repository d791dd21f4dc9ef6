"""Producer-state snapshots: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot holds the producer state as of ``offset`` (every batch below it applied, none at
or above). Byte layout (docs/storage.md), little-endian::

    0   4  magic              b"HWPS"
    4   2  version            u16 = 1
    6   2  reserved           0
    8   4  crc                u32 CRC32C of bytes [12, end)
    12  8  offset             i64 (equals the file name's)
    20  4  entry_count        u32
    24  .. entries, each a 32-byte fixed part then n_batches 32-byte batch records:
           0  8 producer_id i64      8 2 epoch i16      10 1 n_batches u8 (0..5)
           11 1 reserved             12 4 coordinator_epoch i32
           16 8 current_txn_first_offset i64 (-1: none)     24 8 last_timestamp i64
           batch: 0 4 first_seq i32  4 4 last_seq i32  8 8 first_offset i64
                  16 8 last_offset i64  24 8 max_timestamp i64

Written to ``<name>.tmp`` then renamed, so a reader sees a whole file or none; a file that
fails any check (torn by a crash before its data reached the disk, bit rot) is deleted by
:func:`load_newest`, which then falls back to the next older one.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c

from services.broker.storage.producer_state import BatchMetadata, ProducerEntry

SUFFIX = ".snapshot"
MAGIC = b"HWPS"
VERSION = 1
HEAD = struct.Struct("<4sHHIqI")
ENTRY = struct.Struct("<qhBxiqq")
BATCH = struct.Struct("<iiqqq")
assert HEAD.size == 24 and ENTRY.size == 32 and BATCH.size == 32


def path_for(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def offsets(directory: Path) -> list[int]:
    """Offsets of the snapshot files present, ascending."""
    return sorted(
        int(p.stem) for p in directory.glob(f"*{SUFFIX}") if len(p.stem) == 20 and p.stem.isdigit()
    )


def encode(offset: int, entries: list[ProducerEntry]) -> bytes:
    body = bytearray(struct.pack("<qI", offset, len(entries)))
    for e in entries:
        body += ENTRY.pack(
            e.producer_id,
            e.epoch,
            len(e.batches),
            e.coordinator_epoch,
            e.current_txn_first_offset,
            e.last_timestamp,
        )
        for b in e.batches:
            body += BATCH.pack(*b)
    crc = crc32c.crc32c(body)
    return struct.pack("<4sHHI", MAGIC, VERSION, 0, crc) + bytes(body)


def decode(data: bytes) -> tuple[int, list[ProducerEntry]] | None:
    """(offset, entries), or None when the bytes are not a whole valid snapshot."""
    if len(data) < HEAD.size:
        return None
    magic, version, _, crc, offset, count = HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or crc32c.crc32c(data[12:]) != crc:
        return None
    entries: list[ProducerEntry] = []
    pos = HEAD.size
    try:
        for _ in range(count):
            pid, epoch, n, coord, txn_first, last_ts = ENTRY.unpack_from(data, pos)
            pos += ENTRY.size
            batches = [BatchMetadata(*BATCH.unpack_from(data, pos + i * 32)) for i in range(n)]
            pos += n * BATCH.size
            entries.append(ProducerEntry(pid, epoch, batches, txn_first, coord, last_ts))
    except struct.error:
        return None
    return (offset, entries) if pos == len(data) else None


def write(directory: Path, offset: int, entries: list[ProducerEntry], *, sync: bool) -> Path:
    """Write the snapshot for ``offset`` atomically (tmp + rename; fsync when ``sync``)."""
    path = path_for(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode(offset, entries))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_newest(directory: Path, at_most: int) -> tuple[int, list[ProducerEntry]] | None:
    """The newest valid snapshot at or below ``at_most``; invalid ones met are deleted."""
    for off in reversed(offsets(directory)):
        if off > at_most:
            continue
        path = path_for(directory, off)
        try:
            found = decode(path.read_bytes())
        except OSError:
            found = None
        if found is not None and found[0] == off:
            return found
        path.unlink(missing_ok=True)
    return None


def delete_above(directory: Path, offset: int) -> None:
    """Remove snapshots above ``offset`` (and stray temporaries)."""
    for tmp in directory.glob(f"*{SUFFIX}.tmp"):
        tmp.unlink(missing_ok=True)
    for off in offsets(directory):
        if off > offset:
            path_for(directory, off).unlink(missing_ok=True)


def delete_below(directory: Path, log_start: int) -> None:
    """Retention: remove snapshots below ``log_start`` except the newest of them (a rebuild
    can start there when no snapshot at or above the log start exists)."""
    below = [off for off in offsets(directory) if off < log_start]
    for off in below[:-1]:
        path_for(directory, off).unlink(missing_ok=True)
