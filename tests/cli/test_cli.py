"""The ``headwater`` CLI as a user runs it: subprocesses against a real local cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cli import hw, ok


def test_acceptance_produce_100000_lines_and_consume_them_in_order(cluster: Any) -> None:
    ok(hw(cluster, "topics", "create", "demo", "--partitions", "3"))
    lines = b"".join(b"%d\n" % i for i in range(1, 100_001))
    ok(hw(cluster, "produce", "demo", stdin=lines))
    out = ok(
        hw(
            cluster,
            "consume",
            "demo",
            "--from-beginning",
            "--max-messages",
            "100000",
            "--output",
            "json",
        )
    )
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 100_000
    assert sorted(int(r["value"]) for r in records) == list(range(1, 100_001))
    per_part: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        assert r["topic"] == "demo" and r["key"] is None and r["timestamp"] > 0
        per_part.setdefault(r["partition"], []).append(r)
    for rs in per_part.values():
        assert [r["offset"] for r in rs] == list(range(len(rs)))
        values = [int(r["value"]) for r in rs]
        assert values == sorted(values)  # each partition in the order produced
    # text output, a single partition, an offset and an idle timeout
    part = max(per_part, key=lambda p: len(per_part[p]))
    text = ok(
        hw(
            cluster,
            "consume",
            "demo",
            "--partition",
            str(part),
            "--offset",
            "5",
            "--max-messages",
            "3",
            "--timeout-ms",
            "10000",
        )
    )
    assert text.splitlines() == [r["value"] for r in per_part[part][5:8]]


def test_keys_and_text_output(cluster: Any) -> None:
    ok(hw(cluster, "topics", "create", "keyed", "--partitions", "2"))
    ok(
        hw(
            cluster,
            "produce",
            "keyed",
            "--key-separator",
            ":",
            "--acks",
            "all",
            "--compression",
            "zstd",
            stdin=b"a:1\nb:2\na:3\nnokey\n",
        )
    )
    out = ok(
        hw(cluster, "consume", "keyed", "--from-beginning", "--timeout-ms", "1500", "--print-key")
    )
    lines = sorted(out.splitlines())
    assert lines == ["a\t1", "a\t3", "b\t2", "null\tnokey"]


def test_topics_list_describe_alter_delete(cluster: Any) -> None:
    ok(hw(cluster, "topics", "create", "cfg", "--partitions", "1", "--config", "retention.ms=1000"))
    assert "cfg" in json.loads(ok(hw(cluster, "topics", "list", "--output", "json")))
    ok(
        hw(
            cluster,
            "topics",
            "alter",
            "cfg",
            "--partitions",
            "3",
            "--config",
            "retention.bytes=100000",
            "--delete-config",
            "retention.ms",
        )
    )
    desc = json.loads(ok(hw(cluster, "--output", "json", "topics", "describe", "cfg")))
    assert desc[0]["name"] == "cfg"
    text = ok(hw(cluster, "topics", "describe", "cfg"))
    assert "Topic: cfg" in text
    meta = json.loads(ok(hw(cluster, "metadata", "--output", "json")))
    assert meta["brokers"] and meta["controller_id"] >= 0
    ok(hw(cluster, "topics", "delete", "cfg"))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("topics", "create", "dup"), "TOPIC_ALREADY_EXISTS"),
        (("topics", "create", "bad", "--config", "retention.ms=x"), "INVALID_CONFIG"),
        (("topics", "create", "bad2", "--partitions", "-1"), "INVALID_PARTITIONS"),
        (("topics", "describe", "missing-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
    ],
)
def test_errors_are_one_line_with_the_code(cluster: Any, args: tuple[str, ...], code: str) -> None:
    hw(cluster, "topics", "create", "dup")
    proc = hw(cluster, *args)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.startswith(f"error: {code}: ") and "Traceback" not in err


def test_missing_bootstrap_is_a_clear_error() -> None:
    proc = hw(None, "topics", "list")
    assert proc.returncode == 1
    assert "HEADWATER_BOOTSTRAP" in proc.stderr.decode() and "Traceback" not in proc.stderr.decode()


def test_bench_produce_and_consume(cluster: Any) -> None:
    for mode in ("many", "send"):
        res = json.loads(
            ok(
                hw(
                    cluster,
                    "--output",
                    "json",
                    "bench",
                    "produce",
                    "--topic",
                    "bench",
                    "--num-records",
                    "20000",
                    "--record-size",
                    "100",
                    "--mode",
                    mode,
                )
            )
        )
        assert res["records"] == 20000 and res["records_per_sec"] > 0
        assert res["latency_p50_ms"] <= res["latency_p99_ms"] <= res["latency_max_ms"]
    for decode in ("values", "arrow", "none", "records"):
        res = json.loads(
            ok(
                hw(
                    cluster,
                    "--output",
                    "json",
                    "bench",
                    "consume",
                    "--topic",
                    "bench",
                    "--num-records",
                    "40000",
                    "--decode",
                    decode,
                )
            )
        )
        assert res["records"] >= 40000 and res["mb_per_sec"] > 0


def test_bench_produce_idempotence_switch(cluster: Any) -> None:
    """``--idempotence`` reaches the producer: off with acks=all runs, on with acks=1 is the
    producer's configuration error (bench/idempotence_ab.py compares the two)."""
    base = ("--output", "json", "bench", "produce", "--topic", "idem", "--num-records", "2000")
    res = json.loads(ok(hw(cluster, *base, "--acks", "all", "--idempotence", "off")))
    assert res["records"] == 2000
    proc = hw(cluster, *base, "--acks", "1", "--idempotence", "on")
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.startswith("error: INVALID_CONFIG: ") and "acks" in err, err


def test_bench_produce_paced(cluster: Any) -> None:
    """``--throughput`` paces the producer (records/s); every ack's latency is sampled."""
    for mode in ("many", "send"):
        res = json.loads(
            ok(
                hw(
                    cluster,
                    *("--output", "json", "bench", "produce", "--topic", f"paced-{mode}"),
                    *("--num-records", "2000", "--record-size", "100", "--mode", mode),
                    *("--throughput", "4000", "--replication-factor", "1"),
                    *("--warmup-records", "1000"),
                )
            )
        )
        # the warmup records are sent but left out of the figures
        assert res["records"] == 1000 and res["seconds"] >= 0.2
