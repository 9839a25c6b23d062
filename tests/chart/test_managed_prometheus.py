"""GKE Managed Prometheus objects: rendered when monitoring.googleapis.com/v1 is served (or forced by
values), alongside the Prometheus Operator objects when that API is served too; the alert rules are the
shipped rules file's groups unchanged (plus the evaluation interval GMP requires); NOTES say which is
active."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import CHART, KUBE_VERSION, MONITORING, by_kind, helm, one
from tests.chart.test_chart import notes

GMP = "monitoring.googleapis.com/v1"
GMP_KINDS = {"ClusterPodMonitoring", "PodMonitoring", "ClusterRules"}
COREOS_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
RULES = CHART / "files" / "rljob-alerts.rules.yaml"


def render(*sets: str, apis: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", "rljob", str(CHART), "--namespace", "rljob-system", "--kube-version", KUBE_VERSION]
    for api in apis:
        args += ["--api-versions", api]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def kinds(objs: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objs}


def test_auto_detects_each_api() -> None:
    assert not kinds(render()) & (GMP_KINDS | COREOS_KINDS)
    assert kinds(render(apis=(GMP,))) & (GMP_KINDS | COREOS_KINDS) == GMP_KINDS
    assert kinds(render(apis=(MONITORING,))) & (GMP_KINDS | COREOS_KINDS) == COREOS_KINDS
    assert kinds(render(apis=(GMP, MONITORING))) & (GMP_KINDS | COREOS_KINDS) == GMP_KINDS | COREOS_KINDS


def test_values_choose() -> None:
    assert kinds(render("metrics.managedPrometheus.enabled=true")) >= GMP_KINDS
    assert not kinds(render("metrics.managedPrometheus.enabled=false", apis=(GMP,))) & GMP_KINDS


def test_rules_are_the_shipped_file_with_an_interval() -> None:
    rules = one(render(apis=(GMP,)), "ClusterRules")
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    got = rules["spec"]["groups"]
    assert [g.pop("interval") for g in got] == ["30s"] * len(shipped)
    assert got == shipped


def test_trainer_and_operator_scrapes() -> None:
    objs = render(apis=(GMP,))
    trainer = one(objs, "ClusterPodMonitoring")
    assert trainer["spec"]["selector"] == {"matchLabels": {"rljob.dev/role": "trainer"}}
    assert trainer["spec"]["endpoints"][0]["port"] == "metrics"
    assert {m["to"] for m in trainer["spec"]["targetLabels"]["fromPod"]} == {
        "jobset",
        "job_global_index",
        "restart_attempt",
    }
    operator = by_kind(objs, "PodMonitoring")[0]
    assert operator["metadata"]["namespace"] == "rljob-system"
    deployment = one(objs, "Deployment")
    assert (
        operator["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_notes_say_which_is_active(tmp_path: Path) -> None:
    text = notes(tmp_path / "a", "metrics.managedPrometheus.enabled=true")
    assert "GKE Managed Prometheus is ACTIVE" in text and "Install prometheus-operator" not in text
    text = notes(tmp_path / "b", monitoring=True)
    assert "Prometheus Operator objects are ACTIVE" in text and "not rendered" in text
    text = notes(tmp_path / "c")
    assert "Install prometheus-operator (e.g. kube-prometheus-stack) or" in text
