"""The shipped alert rules: valid (``promtool check rules``), unit-tested (``promtool test rules``) with a
firing and a quiet case for every alert, and those tests would notice a broken rule (mutations fail them).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.observability.conftest import ALERT_TESTS, RULES


def _run(promtool: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _alerts() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_rules_file_is_plain_groups() -> None:
    """The chart embeds the file unchanged: it must be a bare ``groups:`` document with no templating."""
    doc = yaml.safe_load(RULES.read_text())
    assert list(doc) == ["groups"]
    assert "{{ ." not in RULES.read_text() and "{{- " not in RULES.read_text()  # Helm syntax would break


def test_promtool_check_rules(promtool: Path) -> None:
    r = _run(promtool, "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in r.stdout


def test_promtool_test_rules(promtool: Path) -> None:
    r = _run(promtool, "test", "rules", str(ALERT_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    cases = [c for t in tests for c in t.get("alert_rule_test", [])]
    for alert in _alerts():
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c.get("exp_alerts") for c in mine), f"{alert}: no firing case"
        assert any(not c.get("exp_alerts") for c in mine), f"{alert}: no quiet case"


MUTATIONS = {
    "compiled steps counted": ('{compiled="false"}', ""),
    "unpacked padding counted": ('{packed="true"}', ""),
    "conflicts counted": ('{kind!="conflict"}', ""),
    "absent trainers not counted as 0": ("or vector(0)", ""),
    "stall threshold ignored": ("> rljob_trainer_stall_threshold_seconds", "> 1800"),
    "regression margin dropped": ("1.25 * max by", "1.0 * max by"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_tests_catch_a_broken_rule(promtool: Path, tmp_path: Path, name: str) -> None:
    old, new = MUTATIONS[name]
    text = RULES.read_text()
    assert old in text, f"mutation {name!r} no longer applies; update MUTATIONS"
    (tmp_path / "rules.yaml").write_text(text.replace(old, new))
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    r = _run(promtool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert r.returncode != 0, f"mutation {name!r} went unnoticed by alerts_test.yaml"
