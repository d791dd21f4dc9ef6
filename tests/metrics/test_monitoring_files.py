"""deploy/monitoring validates without promtool: the Grafana dashboard is JSON with the panels
Grafana needs, the alert rules are Prometheus rule-file YAML with the required alerts, and
every PromQL expression in both names only metrics Headwater exports.

"Exported" is the union of (a) every family registered by importing each service's metrics
modules into this process's default registry (the processes do the same) and (b) the
required-family list of tests/metrics/families.py that the live-cluster test checks on real
processes. PromQL is checked with a tokenizer: identifiers that are not functions, keywords,
label names or quoted strings must be exported sample names.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import prometheus_client as prom
import yaml

from tests.metrics.families import (
    BROKER,
    BROKER_QUOTA,
    COMMON,
    CONTROLLER,
    COORDINATOR,
    sample_names,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-dashboard.json"
ALERTS = ROOT / "deploy" / "monitoring" / "prometheus-alerts.yaml"

METRIC_MODULES = (
    "headwater.platform.metrics",
    "services.broker.metrics",
    "services.controller.metrics",
    "services.coordinator.metrics",
)

PROMQL_WORDS = {
    # functions
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp_max",
    "clamp_min", "count_over_time", "delta", "deriv", "floor", "histogram_quantile", "idelta",
    "increase", "irate", "label_replace", "label_values", "last_over_time", "max_over_time",
    "min_over_time", "predict_linear", "rate", "resets", "round", "sort", "sort_desc",
    "sum_over_time", "time", "vector", "scalar",
    # aggregations and keywords
    "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "stddev", "stdvar",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset",
}  # fmt: skip

REQUIRED_ALERTS = {
    "HeadwaterOfflinePartitions": "headwater_controller_offline_partitions",
    "HeadwaterUnderReplicatedPartitions": "headwater_broker_under_replicated_partitions",
    "HeadwaterNoActiveController": "headwater_controller_active",
    "HeadwaterConsumerLagGrowing": "headwater_coordinator_group_lag",
}
REQUIRED_ALERTS_5M = "HeadwaterUnderReplicatedPartitions"  # must hold for 5 minutes


def exported_sample_names() -> set[str]:
    for mod in METRIC_MODULES:
        importlib.import_module(mod)
    out: set[str] = set()
    for family in prom.REGISTRY.collect():
        out |= sample_names(
            family.name + ("_total" if family.type == "counter" else ""), family.type
        )
    for families in (COMMON, BROKER, BROKER_QUOTA, CONTROLLER, COORDINATOR):
        for name, kind in families.items():
            out |= sample_names(name, kind)
    return out


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_SETS = re.compile(r"\{[^}]*\}")
_BY_CLAUSES = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (Grafana ``$variables`` removed)."""
    e = re.sub(r"\$\{?\w+\}?", "1m", expr)
    e = _STRINGS.sub('""', e)
    e = _RANGES.sub("", e)
    e = _LABEL_SETS.sub("", e)
    e = _BY_CLAUSES.sub("", e)
    names = {m.group(0) for m in _IDENT.finditer(e)}
    names = {n for n in names if not re.fullmatch(r"\d.*|e\d+|Inf|NaN", n, re.IGNORECASE)}
    return names - PROMQL_WORDS


def test_metric_names_tokenizer() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (service, method, le) (rate(x_bucket{job=~"$job",'
        ' a="b c"}[$__rate_interval]))) / on (job) group_left max without (le) (y_total) > 0.5'
    )
    assert metric_names(expr) == {"x_bucket", "y_total"}
    assert metric_names("absent(up)") == {"up"}


def _dashboard_exprs(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for p in panels:
        out += _dashboard_exprs(p.get("panels", []))
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def test_dashboard_is_valid_grafana_json_using_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"], f"panel {p['title']!r} has no query"
    exported = exported_sample_names()
    exprs = _dashboard_exprs(panels)
    unknown = {
        (title, name) for title, e in exprs for name in metric_names(e) if name not in exported
    }
    assert not unknown, f"dashboard queries name metrics nobody exports: {sorted(unknown)}"
    used = {n for _, e in exprs for n in metric_names(e)}
    # every required family has a panel
    for families in (BROKER, CONTROLLER, COORDINATOR):
        for name, kind in families.items():
            assert sample_names(name, kind) & used, f"no dashboard panel shows {name}"


def test_alert_rules_are_valid_and_use_only_exported_metrics() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    groups = doc["groups"]
    assert groups and all(g["name"] and g["rules"] for g in groups)
    exported = exported_sample_names()
    alerts: dict[str, str] = {}
    for g in groups:
        for rule in g["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert rule["annotations"]["summary"]
            if "for" in rule:
                assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["for"]
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
            unknown = metric_names(rule["expr"]) - exported
            assert not unknown, f"{rule['alert']}: unknown metrics {unknown}"
            alerts[rule["alert"]] = rule["expr"]
    for name, metric in REQUIRED_ALERTS.items():
        assert name in alerts and metric in alerts[name], name
    under = next(r for g in groups for r in g["rules"] if r["alert"] == REQUIRED_ALERTS_5M)
    assert under["for"] == "5m"
