"""READ_COMMITTED through a real broker process (docs/transactions.md, "Last stable offset and
read_committed fetches"): a fetch stops at the last stable offset while a transaction is open
and a waiting stream wakes when it commits; an abort is listed in aborted_transactions;
FetchRecords drops aborted and control records; ListOffsets(latest) answers the LSO. Plus a
unit test of the broker-side filter."""

from __future__ import annotations

import threading
import time

from broker_helpers import ActingController, produce
from txn_helpers import (
    fetch1,
    fetch_records1,
    fetch_request,
    idem_batch,
    init_pid,
    latest,
    write_markers,
)

from headwater.batch import encode_batch, encode_control_batch, iter_headers, patch_header
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.handlers.fetch_records import decode

ALL = broker_pb2.ACKS_ALL


def _pid(c: ActingController) -> int:
    code, pid, _ = init_pid(c.stub)
    assert code == ErrorCode.NONE
    return pid


def _bases(records: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_headers(records)]


def test_fetch_stops_at_the_lso_and_wakes_when_the_transaction_commits(
    controller: ActingController,
) -> None:
    t = "rc-lso"
    controller.create_topic(t)
    pid = _pid(controller)
    assert produce(controller, t, 0, encode_batch([b"plain0"]), ALL).base_offset == 0
    assert produce(controller, t, 0, idem_batch(2, pid, 0, 0, txn=True), ALL).base_offset == 1
    assert produce(controller, t, 0, encode_batch([b"plain3"]), ALL).base_offset == 3

    got = fetch1(controller, t, 0, committed=True)
    assert got.error_code == ErrorCode.NONE
    assert _bases(got.records) == [0] and got.next_offset == 1
    assert got.high_watermark == 4 and got.last_stable_offset == 1
    uncommitted = fetch1(controller, t, 0, committed=False)
    assert _bases(uncommitted.records) == [0, 1, 3] and uncommitted.last_stable_offset == 1
    assert latest(controller, t, committed=True) == 1
    assert latest(controller, t, committed=False) == 4

    stream = controller.stub.Fetch(
        fetch_request(t, 1, committed=True, max_wait_ms=20_000), timeout=60
    )
    received: list[broker_pb2.FetchResponse] = []
    started = threading.Event()

    def reader() -> None:
        started.set()
        received.append(next(stream))

    th = threading.Thread(target=reader)
    th.start()
    try:
        assert started.wait(5)
        opened = time.monotonic()
        (res,) = write_markers(controller.stub, pid, 1, True, [(t, 0)])
        assert res.error_code == ErrorCode.NONE, res
        th.join(15)
        assert not th.is_alive(), "the READ_COMMITTED stream did not wake at the commit"
        assert time.monotonic() - opened < 10, "woken by the commit, not by max_wait"
    finally:
        stream.cancel()
    (first,) = received
    assert first.error_code == ErrorCode.NONE and _bases(first.records)[0] == 1
    assert list(first.aborted_transactions) == []
    assert latest(controller, t, committed=True) == 5 == latest(controller, t, committed=False)
    done = fetch1(controller, t, 0, committed=True)
    assert _bases(done.records) == [0, 1, 3, 4] and done.last_stable_offset == 5


def test_aborted_transaction_is_listed_and_filtered_by_fetch_records(
    controller: ActingController,
) -> None:
    t = "rc-abort"
    controller.create_topic(t)
    a, b = _pid(controller), _pid(controller)
    assert produce(controller, t, 0, encode_batch([b"p0"]), ALL).base_offset == 0
    assert (
        produce(controller, t, 0, idem_batch(2, a, 0, 0, txn=True, tag=b"a"), ALL).base_offset == 1
    )
    assert (
        produce(controller, t, 0, idem_batch(1, b, 0, 0, txn=True, tag=b"b"), ALL).base_offset == 3
    )
    assert write_markers(controller.stub, a, 1, False, [(t, 0)])[0].error_code == 0  # offset 4
    assert latest(controller, t, committed=True) == 3  # b still open
    assert write_markers(controller.stub, b, 1, True, [(t, 0)])[0].error_code == 0  # offset 5
    assert produce(controller, t, 0, encode_batch([b"p6"]), ALL).base_offset == 6

    got = fetch1(controller, t, 0, committed=True)
    assert got.next_offset == 7 and got.last_stable_offset == 7
    assert [(x.producer_id, x.first_offset) for x in got.aborted_transactions] == [(a, 1)]
    # a fetch starting after the aborted transaction ended does not list it
    later = fetch1(controller, t, 5, committed=True)
    assert list(later.aborted_transactions) == []
    # READ_UNCOMMITTED never lists aborted transactions
    assert list(fetch1(controller, t, 0, committed=False).aborted_transactions) == []

    rc = fetch_records1(controller, t, 0, committed=True)
    assert rc.error_code == ErrorCode.NONE and rc.last_stable_offset == 7
    assert [(r.offset, r.value) for r in rc.records] == [(0, b"p0"), (3, b"b0"), (6, b"p6")]
    ru = fetch_records1(controller, t, 0, committed=False)
    assert [r.offset for r in ru.records] == [0, 1, 2, 3, 6]  # control records never


def _at(buf: bytes, base: int) -> bytes:
    """``buf`` (one batch) with its base offset set as the log would."""
    out = bytearray(buf)
    patch_header(out, base, 0)
    return bytes(out)


def test_filter_keeps_a_reused_producer_after_its_abort_marker() -> None:
    """Unit: a producer's later transaction (after its ABORT marker) is kept; a batch of an
    aborted transaction that straddles the fetch start is dropped."""
    pid = 42
    log = b"".join(
        [
            _at(idem_batch(2, pid, 0, 0, txn=True, tag=b"x"), 10),  # aborted: 10-11
            _at(
                encode_control_batch(
                    producer_id=pid,
                    producer_epoch=1,
                    committed=False,
                    coordinator_epoch=0,
                    timestamp_ms=1,
                ),
                12,
            ),
            _at(idem_batch(1, pid, 1, 0, txn=True, tag=b"y"), 13),  # later txn, committed
            _at(encode_batch([b"plain"]), 14),
        ]
    )
    got = decode(log, 11, [(pid, 10)])
    assert [(r.offset, r.value) for r in got] == [(13, b"y0"), (14, b"plain")]
    unfiltered = decode(log, 11)
    assert [r.offset for r in unfiltered] == [11, 13, 14]
