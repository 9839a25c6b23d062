"""One scrape per trainer whatever the number of installs: the trainer scrapes (PodMonitor, and on GKE
Managed Prometheus PodMonitoring/ClusterPodMonitoring) follow the namespaces the release watches.

A release watching given namespaces (operator.watchNamespaces, or metrics.podMonitor.namespaces) scrapes
only those; a cluster-wide release (neither set) scrapes all. Two team installs with disjoint namespaces
therefore never scrape the same pod (tests/e2e/test_chart_two_releases.py checks the series on a real
Prometheus).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.chart.helm import CHART, by_kind, one, template
from tests.chart.test_managed_prometheus import GMP, render

SELECTOR = {"matchLabels": {"rljob.dev/role": "trainer"}}


def _gmp_trainer_scrapes(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o["kind"] in ("PodMonitoring", "ClusterPodMonitoring")
        and o["metadata"]["name"].endswith("-trainer")
    ]


def test_cluster_wide_release_scrapes_every_namespace() -> None:
    pm = one(template(monitoring=True), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    (cpm,) = _gmp_trainer_scrapes(render(apis=(GMP,)))
    assert cpm["kind"] == "ClusterPodMonitoring" and cpm["spec"]["selector"] == SELECTOR
    assert "namespace" in cpm["spec"]["targetLabels"]["metadata"]


def test_watched_namespaces_are_the_scraped_ones() -> None:
    sets = ("operator.watchNamespaces={team-a,team-b}",)
    pm = one(template(*sets, monitoring=True), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    scrapes = _gmp_trainer_scrapes(render(*sets, apis=(GMP,)))
    assert {o["kind"] for o in scrapes} == {"PodMonitoring"}
    assert sorted(o["metadata"]["namespace"] for o in scrapes) == ["team-a", "team-b"]
    for o in scrapes:
        assert o["spec"]["selector"] == SELECTOR
        assert o["spec"]["endpoints"][0]["port"] == "metrics"
        # GMP permits pod, container and node here; a PodMonitoring labels targets with its namespace
        assert set(o["spec"]["targetLabels"]["metadata"]) == {"pod", "node", "container"}
        assert {m["to"] for m in o["spec"]["targetLabels"]["fromPod"]} == {
            "jobset",
            "job_global_index",
            "restart_attempt",
        }


def test_pod_monitor_namespaces_override_the_watched_ones() -> None:
    sets = ("operator.watchNamespaces={team-a,team-b}", "metrics.podMonitor.namespaces={team-a}")
    pm = one(template(*sets, monitoring=True), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    scrapes = _gmp_trainer_scrapes(render(*sets, apis=(GMP,)))
    assert [o["metadata"]["namespace"] for o in scrapes] == ["team-a"]


def test_two_team_installs_scrape_disjoint_namespaces() -> None:
    a = one(template("operator.watchNamespaces={team-a}", monitoring=True), "PodMonitor")
    b = one(template("operator.watchNamespaces={team-b}", monitoring=True), "PodMonitor")
    assert set(a["spec"]["namespaceSelector"]["matchNames"]).isdisjoint(
        b["spec"]["namespaceSelector"]["matchNames"]
    )


def test_gmp_rules_can_be_left_to_another_release() -> None:
    assert by_kind(render(apis=(GMP,)), "ClusterRules")
    objs = render("metrics.managedPrometheus.rules=false", apis=(GMP,))
    assert not by_kind(objs, "ClusterRules") and _gmp_trainer_scrapes(objs)


def test_podmonitor_comment_is_true() -> None:
    """The relabelled target labels are for looking at one series only: no rule or dashboard query reads
    them (they would split a process's series); `pod` is the key the per-process aggregation uses."""
    text = (CHART / "templates" / "podmonitor.yaml").read_text()
    assert "No rule or dashboard query reads them" in text
    rules = yaml.safe_load((CHART / "files" / "rljob-alerts.rules.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    exprs += re.findall(r'"expr": "([^"]*)"', (CHART / "files" / "rljob-dashboard.json").read_text())
    used = {w for e in exprs for w in re.findall(r"[a-z_]+", e)}
    assert not {"jobset", "job_global_index", "restart_attempt", "node"} & used
    assert "pod" in used
