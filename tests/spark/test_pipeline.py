"""The example pipeline in spark/pipeline/ runs against a real cluster and computes the right
per-page, per-minute click counts into Parquet (closed windows, once each) and into the
result topic (latest record per window = its count)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    path = ROOT / "spark" / "pipeline" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_clicks_per_page_pipeline(spark: Any, cluster: Any, tmp_path: Path) -> None:
    gen, job = _load("generate_clicks"), _load("clicks_per_page")
    bootstrap = cluster.bootstrap
    gen.ensure_topic(bootstrap, "pipe-clicks", 2)
    gen.ensure_topic(bootstrap, "pipe-counts", 1)
    start_ms = (int(time.time() * 1000) // 60_000 - 10) * 60_000
    evs = gen.events(900, start_ms=start_ms, step_ms=500, users=30, seed=1)  # 7.5 minutes
    gen.produce(bootstrap, "pipe-clicks", evs)
    expected = Counter((e["ts"] // 60_000 * 60_000, e["page"]) for e in evs)

    queries = job.start(
        spark,
        bootstrap=bootstrap,
        topic="pipe-clicks",
        result_topic="pipe-counts",
        out=str(tmp_path / "out"),
        checkpoints=str(tmp_path / "ckpt"),
        available_now=True,
    )
    for q in queries:
        q.awaitTermination(180)
        assert not q.isActive and q.exception() is None

    # Parquet: every window that the watermark closed, exactly once, with its full count
    watermark = max(e["ts"] for e in evs) - 60_000
    closed = {k: n for k, n in expected.items() if k[0] + 60_000 <= watermark}
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = [(int(r.window_start.timestamp() * 1000), r.page, r["count"]) for r in rows]
    assert len(got) == len({(w, p) for w, p, _ in got})
    assert {(w, p): n for w, p, n in got} == closed and closed

    # result topic: the same closed windows, one record each (key = page)
    out = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "pipe-counts")
        .load()
        .collect()
    )
    docs = [json.loads(bytes(r.value)) for r in out]
    assert all(bytes(r.key).decode() == d["page"] for r, d in zip(out, docs, strict=True))
    topic_counts = {(_ms(d["window_start"]), d["page"]): d["count"] for d in docs}
    assert len(docs) == len(topic_counts) and topic_counts == closed


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)
