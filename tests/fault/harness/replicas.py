"""Each broker's own copy of a partition, read straight from its segment files.

A LocalCluster broker ``<id>`` keeps partition ``<topic>-<p>`` under
``<data_dir>/broker-<id>/log-<k>/<topic>-<p>/`` as ``<base offset, 20 digits>.log`` segments of
record batches back to back (``services/broker/storage/segment.py``). Reading them needs no
RPC, so it also works for a broker that is stopped, paused or cut off.

The files may be read while a broker appends: a batch cut short at the tail (or a torn tail
after a crash) ends the scan of that file, it is not an error. Batches are returned in offset
order across segments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from headwater.batch import RecordBatch, iter_headers
from headwater.errors import HeadwaterError
from tests.fault.harness.checker import BatchInfo, Read


def partition_dir(data_dir: Path, broker_id: int, topic: str, partition: int) -> Path | None:
    """The directory of the partition on that broker, or None when it holds no copy."""
    for d in sorted((data_dir / f"broker-{broker_id}").glob(f"log-*/{topic}-{partition}")):
        if d.is_dir():
            return d
    return None


def segments(pdir: Path) -> list[Path]:
    return sorted(pdir.glob("*.log"), key=lambda f: int(f.stem))


def stored_batches(pdir: Path) -> list[tuple[BatchInfo, bytes]]:
    """(identity, raw bytes) of every whole batch in the partition directory."""
    found: list[tuple[BatchInfo, bytes]] = []
    for seg in segments(pdir):
        buf = seg.read_bytes()
        pos = 0
        try:
            for pos, h in iter_headers(buf):
                info = BatchInfo(
                    h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc, h.total_size
                )
                found.append((info, buf[pos : pos + h.total_size]))
        except HeadwaterError:
            pass  # a tail being written (or torn): the scan of this file ends here
    return found


def replica_logs(
    data_dir: Path, brokers: Iterable[int], topic: str, partitions: Sequence[int]
) -> dict[int, dict[int, list[BatchInfo]]]:
    """partition -> broker -> its batches (brokers without a copy are left out)."""
    out: dict[int, dict[int, list[BatchInfo]]] = {}
    for p in partitions:
        out[p] = {}
        for b in brokers:
            pdir = partition_dir(data_dir, b, topic, p)
            if pdir is not None:
                out[p][b] = [info for info, _raw in stored_batches(pdir)]
    return out


def replica_reads(
    data_dir: Path,
    brokers: Iterable[int],
    topic: str,
    high_watermarks: dict[int, int],
) -> list[Read]:
    """Every record below each partition's high watermark in every broker's copy, as
    :class:`Read` from source ``"broker-<id>"`` (batches failing their CRC are skipped: the
    divergence check reports them)."""
    reads: list[Read] = []
    for p, hw in high_watermarks.items():
        for b in brokers:
            pdir = partition_dir(data_dir, b, topic, p)
            if pdir is None:
                continue
            for info, raw in stored_batches(pdir):
                if info.base_offset >= hw:
                    break
                try:
                    batch = RecordBatch(raw)
                except HeadwaterError:
                    continue
                for off, v in zip(batch.offsets().tolist(), batch.values(), strict=True):
                    if off < hw:
                        text = "<null>" if v is None else bytes(v).decode(errors="replace")
                        reads.append(Read(f"broker-{b}", p, int(off), text))
    return reads


def log_prefix_bytes(pdir: Path, end_offset: int) -> bytes:
    """The raw bytes of every batch below ``end_offset`` (what "byte-identical" compares)."""
    return b"".join(raw for info, raw in stored_batches(pdir) if info.base_offset < end_offset)
