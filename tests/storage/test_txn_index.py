"""The aborted-transaction index: byte layout, torn tail, concurrent reads, compaction."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import FakeClock, append, read_all
from test_producer_state import marker

from headwater.batch import decode_batches, encode_batch, parse_header
from services.broker.storage.cleaner import clean_log
from services.broker.storage.log import Log
from services.broker.storage.txn_index import AbortedTxn, TxnIndex, path_for

pytestmark = pytest.mark.fast

OpenLog = Callable[..., Log]


def test_layout_torn_tail_and_truncation(tmp_path: Path) -> None:
    idx = TxnIndex(tmp_path, 100)
    idx.append(AbortedTxn(7, 100, 140, 141))
    idx.append(AbortedTxn(8, 120, 150, 151))
    raw = path_for(tmp_path, 100).read_bytes()
    assert raw == struct.pack("<qqqq", 7, 100, 140, 141) + struct.pack("<qqqq", 8, 120, 150, 151)
    path_for(tmp_path, 100).write_bytes(raw + b"\x01\x02\x03")  # torn third record
    again = TxnIndex(tmp_path, 100)
    assert [e.producer_id for e in again.entries()] == [7, 8]
    assert path_for(tmp_path, 100).stat().st_size == 64
    again.truncate_from(150)
    assert [e.producer_id for e in again.entries()] == [7]
    again.truncate_from(0)
    assert not path_for(tmp_path, 100).exists()


def _keyed(pid: int, seq: int, key: bytes, value: bytes, *, txn: bool) -> bytes:
    return encode_batch(
        [value],
        [key],
        timestamps=1_700_000_000_000,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=txn,
    )


def test_reads_concurrent_with_markers(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=2048)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                found = log.aborted_transactions(0, 1 << 40)
                firsts = [f for _, f in found]
                assert firsts == sorted(firsts)
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for pid in range(60):
            append(log, _keyed(pid, 0, b"k", b"v", txn=True))
            marker(log, pid, 1, commit=False)
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors and not t.is_alive()
    assert [p for p, _ in log.aborted_transactions(0, 1 << 40)] == list(range(60))


def test_cleaner_keeps_markers_drops_aborted_and_stops_at_open_txn(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(cleanup_policy="compact", segment_bytes=1 << 20)
    append(log, _keyed(1, 0, b"k", b"committed", txn=True))  # 0
    marker(log, 1, 1, commit=True)  # 1
    append(log, _keyed(2, 0, b"k", b"aborted", txn=True))  # 2
    marker(log, 2, 1, commit=False)  # 3
    append(log, encode_batch([b"x"], [b"other"]))  # 4
    log.roll()
    append(log, _keyed(3, 0, b"k", b"open", txn=True))  # 5: stays open
    log.roll()
    append(log, encode_batch([b"y"], [b"other"]))  # 6
    log.roll()
    append(log, encode_batch([b"z"], [b"tail"]))  # active segment
    result = clean_log(log, clock.now, max_offset=log.log_end_offset)
    assert result is not None and result.plan.end == 5  # bounded by the open transaction
    raw = read_all(log)
    kept: list[bytes | None] = []
    offsets_by_kind = []
    p = 0
    while p < len(raw):
        h = parse_header(raw, p)
        offsets_by_kind.append((h.base_offset, h.is_control))
        p += h.total_size
    assert (1, True) in offsets_by_kind and (3, True) in offsets_by_kind  # markers kept
    assert all(off != 2 for off, _ in offsets_by_kind)  # aborted record dropped
    assert (5, False) in offsets_by_kind  # the open transaction's batch untouched
    for b in decode_batches(raw):
        if not b.header.is_control:
            kept += [v for k, v in zip(b.keys(), b.values(), strict=True) if k == b"k"]
    assert kept == [b"committed", b"open"]
    assert log.aborted_transactions(0, 100) == [(2, 2)]  # entry moved to the cleaned segment
    log.close()
    again = open_log(cleanup_policy="compact", segment_bytes=1 << 20)
    assert again.aborted_transactions(0, 100) == [(2, 2)]
    assert again.first_unstable_offset == 5
