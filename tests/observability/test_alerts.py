"""The shipped alert rules: valid (``promtool check rules``), unit-tested (``promtool test rules``) with a
firing and a quiet case for every alert, and those tests would notice a broken rule (mutations fail them).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.observability.conftest import ALERT_TEST_FILES, ROOT, RULES

RUNBOOK = ROOT / "docs" / "runbook.md"


def _run(promtool: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _alerts() -> list[str]:
    return [r["alert"] for r in _rules() if "alert" in r]


def test_rules_file_is_plain_groups() -> None:
    """The chart embeds the file unchanged: it must be a bare ``groups:`` document with no templating."""
    doc = yaml.safe_load(RULES.read_text())
    assert list(doc) == ["groups"]
    assert "{{ ." not in RULES.read_text() and "{{- " not in RULES.read_text()  # Helm syntax would break


def test_promtool_check_rules(promtool: Path) -> None:
    r = _run(promtool, "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in r.stdout


@pytest.mark.parametrize("tests", ALERT_TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(promtool: Path, tests: Path) -> None:
    r = _run(promtool, "test", "rules", str(tests))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = [t for f in ALERT_TEST_FILES for t in yaml.safe_load(f.read_text())["tests"]]
    cases = [c for t in tests for c in t.get("alert_rule_test", [])]
    for alert in _alerts():
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c.get("exp_alerts") for c in mine), f"{alert}: no firing case"
        assert any(not c.get("exp_alerts") for c in mine), f"{alert}: no quiet case"


def test_every_alert_has_a_runbook_section() -> None:
    """runbook_url points at docs/runbook.md#<alert name, lower case>, and that section exists."""
    headings = {
        line[3:].strip().lower() for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")
    }
    for rule in _rules():
        if "alert" in rule:
            name = rule["alert"]
            url = rule["annotations"].get("runbook_url", "")
            assert url.endswith(f"/docs/runbook.md#{name.lower()}"), (name, url)
            assert name.lower() in headings, f"docs/runbook.md has no '## {name}' section"


MUTATIONS = {
    "compiled steps counted": ('{compiled="false"}', ""),
    "unpacked padding counted": ('{packed="true"}', ""),
    "conflicts counted": ('{kind!="conflict"}', ""),
    "absence not per RLJob": (
        "unless on (project_id, cluster, namespace, rljob)",
        "unless on (project_id, cluster, namespace)",
    ),
    "stall threshold ignored": (
        "(rljob_trainer_stall_threshold_seconds and",
        "(rljob_trainer_first_step_grace_seconds and",
    ),
    "first-step grace ignored": (
        "(rljob_trainer_first_step_grace_seconds unless",
        "(rljob_trainer_stall_threshold_seconds unless",
    ),
    "grace waits for GMP's first counter sample": (
        "(rljob_trainer_first_step_grace_seconds unless rljob_trainer_steps_total > 0)",
        "(rljob_trainer_first_step_grace_seconds and rljob_trainer_steps_total == 0)",
    ),
    "finished runs count as stalled": (">= rljob_trainer_max_steps", "> 1e12"),
    "stall alert per host": (
        "count by (project_id, cluster, namespace, rljob) (rljob:",
        "count by (project_id, cluster, namespace, rljob, process) (rljob:",
    ),
    "regression margin dropped": ("1.25 * max by", "1.0 * max by"),
    "regression needs no steady steps": ('{compiled="false"}) >= 10', '{compiled="false"}) >= 0'),
    "failed means succeeded": ('{phase="Failed"}', '{phase="Succeeded"}'),
    "two restarts are often": (") >= 3", ") >= 2"),
    "goodput counts every kind": ('time_seconds_total{kind="productive_step"}', "time_seconds_total"),
    "goodput sums hosts": (
        "avg by (project_id, cluster, namespace, rljob) (\n            sum by",
        "sum by (project_id, cluster, namespace, rljob) (\n            sum by",
    ),
    "mfu sums hosts": (
        "max by (project_id, cluster, namespace, rljob) (\n            sum by",
        "sum by (project_id, cluster, namespace, rljob) (\n            sum by",
    ),
    "mfu ignores the chips": ("(rljob_trainer_chips * rljob_trainer_peak", "(rljob_trainer_peak"),
    # per process first (alerts_restart_test.yaml): each of these is what the rules did before
    "goodput averages series": (
        "sum by (project_id, cluster, namespace, rljob, process) (\n              max by (project_id, cluster, "
        "namespace, rljob, process, pod, kind) (\n                rate(rljob_trainer_time_seconds_total",
        "sum by (project_id, cluster, namespace, rljob, process, pod) (\n              max by (project_id, "
        "cluster, namespace, rljob, process, pod, kind) (\n                rate(rljob_trainer_time_seconds_total",
    ),
    "mfu takes one series": (
        "sum by (project_id, cluster, namespace, rljob, process) (\n              max by (project_id, cluster, "
        "namespace, rljob, process, pod, phase) (",
        "sum by (project_id, cluster, namespace, rljob, process, pod) (\n              max by (project_id, "
        "cluster, namespace, rljob, process, pod, phase) (",
    ),
    "duplicate scrapes summed": (
        "max by (project_id, cluster, namespace, rljob, process, pod, kind) (\n                rate(rljob_trainer_time",
        "sum by (project_id, cluster, namespace, rljob, process, pod, kind) (\n                rate(rljob_trainer_time",
    ),
    "stall read per series": (
        "          min by (project_id, cluster, namespace, rljob, process) (\n            (time() - rljob_trainer",
        "          min without () (\n            (time() - rljob_trainer",
    ),
    "stall per series (any stale series counts)": (
        "            min by (project_id, cluster, namespace, rljob, process) (\n",
        "            max by (project_id, cluster, namespace, rljob, process) (\n",
    ),
    "stall alert across clusters": (
        "count by (project_id, cluster, namespace, rljob) (rljob:",
        "count by (namespace, rljob) (rljob:",
    ),
    "processes query not scoped to the cluster": (
        '{project_id=%q,cluster=%q,namespace=%q,rljob=%q}" $labels.project_id $labels.cluster',
        '{namespace=%q,rljob=%q}"',
    ),
    # a trainer that stops answering scrapes (alerts_down_test.yaml)
    "silent trainers not read back": ("[8d]", "[5m]"),
    "silent trainers read by series, not by their pod's target": (
        "(up == 0)",
        "(last_over_time(rljob_trainer_last_step_timestamp_seconds[8d]))",
    ),
    "a gone pod's finished steps count": (
        "last_over_time(rljob_trainer_max_steps[8d])\n              and on (project_id, cluster, namespace, pod) (up == 0)",
        "last_over_time(rljob_trainer_max_steps[8d])",
    ),
    "silent finished process counts": (">= last_over_time(rljob_trainer_max_steps[8d])", "> 1e12"),
    "phase read by which series exist": (
        "== on (project_id, cluster, rljob_namespace, rljob) group_left ()",
        ">= 0 or on (project_id, cluster, rljob_namespace, rljob)",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_tests_catch_a_broken_rule(promtool: Path, tmp_path: Path, name: str) -> None:
    old, new = MUTATIONS[name]
    text = RULES.read_text()
    assert old in text, f"mutation {name!r} no longer applies; update MUTATIONS"
    (tmp_path / "rules.yaml").write_text(text.replace(old, new))
    failed = []
    for i, path in enumerate(ALERT_TEST_FILES):
        tests = yaml.safe_load(path.read_text())
        tests["rule_files"] = ["rules.yaml"]
        (tmp_path / f"tests{i}.yaml").write_text(yaml.safe_dump(tests))
        r = _run(promtool, "test", "rules", f"tests{i}.yaml", cwd=tmp_path)
        failed += [path.name] if r.returncode != 0 else []
    assert failed, f"mutation {name!r} went unnoticed by {[p.name for p in ALERT_TEST_FILES]}"
