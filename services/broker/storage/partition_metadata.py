"""``partition.metadata``: the topic id a partition directory belongs to (Kafka's file).

A topic name can be deleted and created again; the two topics share every partition
directory name (``<topic>-<partition>``) but not their topic id (a uuid the controller draws
at creation, ``/headwater/topics/<name>``). The id is stored in each partition directory so a
broker can tell whose records a directory holds: a directory whose id is not the cluster's
current id for that name belongs to a deleted topic and is removed, never served
(``log_manager.py``; docs/storage.md).

Format (Kafka's, text, replaced atomically: write ``.tmp``, fsync, rename, fsync the
directory)::

    version: 0
    topic_id: <the topic id as the cluster spells it (32 hex digits; any printable token)>

A directory written before topic ids were stored has no file: its id is unknown until the
broker learns the cluster's id for the name and stores it (:func:`write_topic_id`). A new
partition's file is written without the fsyncs (``LogManager.sync_created`` writes back all
new directories of a LeaderAndIsr at once), so a power loss right after the creation may
leave it empty: an empty file reads as no file.
"""

from __future__ import annotations

from pathlib import Path

from headwater.errors import KafkaStorageError
from services.broker.storage.fileio import replace_atomically

METADATA_FILE = "partition.metadata"
VERSION = 0


def read_topic_id(directory: Path) -> str | None:
    """The stored topic id; None when the directory has no ``partition.metadata`` (or an
    empty one: see the module doc).

    Raises KafkaStorageError when the file exists but cannot be read or parsed (it is only
    ever replaced atomically, so a damaged file is a disk fault, not a torn write).
    """
    path = directory / METADATA_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc}") from exc
    if not text:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    topic_id = fields.get("topic_id", "")
    if fields.get("version") != str(VERSION) or not _valid_id(topic_id):
        raise KafkaStorageError(f"{path} is malformed: {text[:200]!r}")
    return topic_id


def write_topic_id(directory: Path, topic_id: str, *, sync: bool = True) -> None:
    """Store ``topic_id`` atomically (the directory must exist; ``sync=False``: without the
    fsyncs, see ``fileio.replace_atomically``). Raises KafkaStorageError for an id that is
    not a topic id, OSError when the disk fails."""
    if not _valid_id(topic_id):
        raise KafkaStorageError(f"not a topic id: {topic_id[:64]!r}")
    data = f"version: {VERSION}\ntopic_id: {topic_id}\n".encode()
    replace_atomically(directory / METADATA_FILE, data, sync=sync)


def _valid_id(topic_id: str) -> bool:
    """One printable token (the cluster's ids are 32 hex digits)."""
    return (
        0 < len(topic_id) <= 255
        and topic_id.isprintable()
        and not any(c.isspace() for c in topic_id)
    )
