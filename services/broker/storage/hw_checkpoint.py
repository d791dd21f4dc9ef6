"""``replication-offset-checkpoint``: the high watermark of every partition in a log directory.

Text, Kafka's format, replaced atomically (write ``.tmp``, fsync, rename)::

    0                       version
    2                       number of entries
    orders 0 1523           topic partition high_watermark
    orders 1 977

Written by the broker periodically and at shutdown; read at start so that a restarted leader
does not serve a high watermark that went backwards (it is clamped to the log end offset when
the partition opens). Topic names cannot contain whitespace (topic name validation).
A missing or damaged file reads as empty: the HW then restarts at 0 and advances again as
soon as the ISR has the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from headwater.errors import KafkaStorageError
from services.broker.storage.fileio import replace_atomically

HW_FILE = "replication-offset-checkpoint"
VERSION = 0


def read_high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    try:
        lines = (log_dir / HW_FILE).read_text().split("\n")
        if int(lines[0]) != VERSION:
            return {}
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, part, hw = line.split()
            out[(topic, int(part))] = int(hw)
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return {}
    return out if len(out) == count else {}


def write_high_watermarks(log_dir: Path, hws: Mapping[tuple[str, int], int]) -> None:
    items = sorted(hws.items())
    text = f"{VERSION}\n{len(items)}\n" + "".join(f"{t} {p} {hw}\n" for (t, p), hw in items)
    try:
        replace_atomically(log_dir / HW_FILE, text.encode())
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {HW_FILE} in {log_dir}: {exc}") from exc
