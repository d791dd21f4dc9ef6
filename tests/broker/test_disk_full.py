"""A broker whose disk refuses writes answers KAFKA_STORAGE_ERROR, appends nothing, says so
in its log (at most once per interval), and takes the records again once writes succeed.

The refusal is real: the broker process's file-size limit (``RLIMIT_FSIZE``, set on the
running process) fails a write past it with EFBIG, as a full disk fails it with ENOSPC; both
reach the segment's append as an ``OSError``. A blocking producer held up behind it is told
why its buffer does not drain, and no record it was promised is lost.
"""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import grpc
import pytest

from headwater.batch import encode_batch
from headwater.client import AdminClient, Producer
from headwater.client.errors import BufferExhaustedError
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.client.per_record_helpers import read_all
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.timeout(300)

TOPIC = "full"
VALUE = b"v" * 100_000
BEFORE = b"b" * 100_000


def _log_file(cluster: LocalCluster) -> Path:
    (path,) = (cluster.data_dir / "broker-1").rglob(f"{TOPIC}-0/*.log")
    return path


def _produce_raw(bootstrap: str, value: bytes) -> broker_pb2.PartitionProduceResult:
    async def main() -> broker_pb2.PartitionProduceResult:
        async with grpc.aio.insecure_channel(bootstrap) as channel:
            resp = await broker_pb2_grpc.BrokerStub(channel).Produce(
                broker_pb2.ProduceRequest(
                    acks=broker_pb2.ACKS_LEADER,
                    partitions=[
                        broker_pb2.PartitionRecords(topic=TOPIC, records=encode_batch([value]))
                    ],
                ),
                timeout=30,
            )
            (answer,) = resp.partitions
            return answer

    return asyncio.run(main())


def test_a_full_disk_refuses_appends_with_a_storage_error_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", brokers=1, etcd_unsafe_no_fsync=True) as cluster:
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, 1)
        with Producer(cluster.bootstrap, acks=1) as p:
            # ~1 MB: the broker's own log file (under the same file-size limit) stays far
            # below the limit set from this segment's size
            p.send_many(TOPIC, [BEFORE] * 10).result(60)
        log_file = _log_file(cluster)
        size_before = log_file.stat().st_size
        pid = cluster.brokers[1].pid
        broker_log = cluster.brokers[1].log_path
        # Room for half a record: the first write is cut short, the next one refused. Only
        # the soft limit moves (raising a hard limit back needs CAP_SYS_RESOURCE).
        _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        limit = size_before + len(VALUE) // 2
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, hard))
        try:
            answer = _produce_raw(cluster.bootstrap, VALUE)
            assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert "File too large" in answer.error_message
            assert log_file.stat().st_size == size_before  # the partial write was cut back
            wait_for(
                lambda: f"produce to {TOPIC}-0" in broker_log.read_text(errors="replace"),
                timeout=30,
                what="the broker to log the storage error",
            )

            # A blocking producer fills its buffer behind the refused batches; the wait that
            # times out names the latest retry and its error.
            with Producer(
                cluster.bootstrap, acks=1, buffer_memory=1024 * 1024, max_block_ms=10_000
            ) as p:
                promised = []
                with pytest.raises(BufferExhaustedError) as refused:
                    for _ in range(100):
                        promised.append(p.send(TOPIC, VALUE))
                assert "KAFKA_STORAGE_ERROR" in str(refused.value)
                assert f"{TOPIC}-0" in str(refused.value)
                assert 0 < len(promised) < 100
                assert log_file.stat().st_size == size_before

                # Writes succeed again (space freed): the retries land, nothing promised is
                # lost.
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
                p.flush(60)
                offsets = [f.result(60).offset for f in promised]
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert offsets == list(range(10, 10 + len(promised)))
        records = asyncio.run(read_all(cluster.bootstrap, TOPIC, 1, 10 + len(promised)))
        assert [r.value for r in records] == [BEFORE] * 10 + [VALUE] * len(promised)
