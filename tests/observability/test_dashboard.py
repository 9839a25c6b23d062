"""The Grafana dashboard: generated, sidecar-ready, valid PromQL, and naming only exported metrics.

The metric-name check reads the names from the trainer's and the operator's own registries, so the
dashboard, the alert rules and the exporters cannot drift apart.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from rljob_operator.metrics import OperatorMetrics
from rljob_trainer.telemetry.metrics import TrainerMetrics

from charts.rljob import dashboard
from hack.docker_context import context_files
from tests.observability.conftest import DASHBOARD, RULES

NAME = re.compile(r"\brljob_(?:trainer|operator)_[a-z0-9_]+")


def _exported() -> set[str]:
    names = TrainerMetrics(rljob="x", baseline_seconds=1.0).names()
    for family in OperatorMetrics().registry.collect():
        if family.type == "histogram":
            names |= {f"{family.name}{s}" for s in ("_bucket", "_sum", "_count")}
        elif family.type == "counter":
            names.add(f"{family.name}_total")
        else:
            names.add(family.name)
    return names


def _exprs() -> list[str]:
    d = dashboard.build()
    panels = [t["expr"] for p in d["panels"] for t in p["targets"]]
    return panels + [a["expr"] for a in d["annotations"]["list"]]


def test_per_rljob_queries_group_by_namespace_and_rljob() -> None:
    """Same-named RLJobs in two namespaces never merge: every aggregation of per-RLJob series keeps both."""
    for expr in _exprs():
        if "$rljob" not in expr:
            continue
        for by in re.findall(r"by \(([^)]*)\)", expr):
            labels = {x.strip() for x in by.split(",")}
            assert {"namespace", "rljob"} <= labels or {"rljob_namespace", "rljob"} <= labels, (by, expr)


def test_operator_panels_and_alert_annotations() -> None:
    d = dashboard.build()
    text = "\n".join(_exprs())
    for name in (
        "rljob_operator_rljob_status_phase",
        "rljob_operator_rljob_restarts",
        "rljob_operator_reconcile_",
    ):
        assert name in text, name
    assert any("ALERTS{" in a["expr"] for a in d["annotations"]["list"])


def test_checked_in_json_is_generated() -> None:
    assert DASHBOARD.read_text() == dashboard.render(), "run hack/gen_dashboard.py"


def test_generator_is_in_no_image() -> None:
    """The generator imports the operator's and the trainer's metrics, so it lives outside both packages and
    outside every image's build context (it once sat in rljob_trainer, making the trainer import the operator)."""
    context = context_files(Path(__file__).resolve().parents[2])
    assert "charts/rljob/files/rljob-dashboard.json" not in context  # the chart is not in any image either
    assert [f for f in context if f.endswith("dashboard.py")] == []


def test_sidecar_ready() -> None:
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] == "rljob-trainer" and d["title"] and d["schemaVersion"] >= 36
    assert "__inputs" not in d and "DS_PROMETHEUS" not in DASHBOARD.read_text()
    assert next(v["name"] for v in d["templating"]["list"]) == "datasource"
    for panel in d["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
        for t in panel["targets"]:
            if "rate(" in t["expr"]:
                assert "[$__rate_interval]" in t["expr"], (panel["title"], t["expr"])
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in d["panels"]}
    assert units["Step time (steady steps)"] == "s" and units["Phase time per step"] == "s"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_and_rules_name_only_exported_metrics() -> None:
    exported = _exported()
    used_dashboard = {n for e in _exprs() for n in NAME.findall(e)}
    rules = yaml.safe_load(RULES.read_text())
    used_rules = {n for g in rules["groups"] for r in g["rules"] for n in NAME.findall(r["expr"])}
    assert used_dashboard and used_rules
    assert used_dashboard <= exported, f"dashboard names unexported metrics: {used_dashboard - exported}"
    assert used_rules <= exported, f"rules name unexported metrics: {used_rules - exported}"


def test_every_required_view_is_there() -> None:
    text = "\n".join(_exprs())
    for needle in (
        "histogram_quantile(0.9",
        "rljob_trainer_step_duration_seconds_sum",
        "rljob_trainer_phase_duration_seconds_sum",
        "rljob_trainer_reward_mean",
        "rljob_trainer_packing_padding_tokens_total",
        "rljob_trainer_last_step_timestamp_seconds",
    ):
        assert needle in text, needle


def test_queries_are_valid_promql(promtool: Path, tmp_path: Path) -> None:
    """Each query, with Grafana's variables filled in, as a recording rule: promtool parses it."""
    rules = []
    for i, expr in enumerate(_exprs()):
        concrete = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*").replace("$rljob", ".*")
        rules.append({"record": f"dashboard:query_{i}", "expr": concrete})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
