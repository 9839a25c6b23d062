"""The startup check of the installed JobSet CRD (``rljob_operator.jobset_crd``), without a cluster.

The CRD here is built from the rendered JobSet itself (every path the operator writes, nothing more), so
removing one field shows exactly what an older JobSet looks like to the check. The same check against the
real apiserver and JobSet v0.12's CRD is in tests/e2e/test_jobset_crd.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from rljob_operator import jobset_crd, main
from rljob_operator.render import render_jobset

from rljob.api import parse_rljob


def _schema_of(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: _schema_of(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "array", "items": _schema_of(value[0])}
    return {"type": "string"}


def crd_for(jobset: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"spec": _schema_of(jobset["spec"])}}
    return {
        "spec": {"versions": [{"name": "v1alpha2", "served": True, "schema": {"openAPIV3Schema": schema}}]}
    }


@pytest.fixture
def jobset() -> dict[str, Any]:
    return render_jobset(parse_rljob(jobset_crd._SAMPLE))


def _rule_props(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec["properties"]["failurePolicy"]["properties"]["rules"]["items"]["properties"]


def test_a_crd_with_every_field_passes(jobset):
    assert jobset_crd.missing(crd_for(jobset), jobset) == []


def test_jobset_before_v0_10_lacks_the_message_patterns(jobset):
    old = crd_for(jobset)
    del _rule_props(old)["onJobFailureMessagePatterns"]
    assert jobset_crd.missing(old, jobset) == ["spec.failurePolicy.rules[].onJobFailureMessagePatterns"]


def test_an_action_the_crd_does_not_list_is_missing(jobset):
    crd = crd_for(jobset)
    _rule_props(crd)["action"]["enum"] = ["FailJobSet", "RestartJobSet"]
    assert jobset_crd.missing(crd, jobset) == [
        "spec.failurePolicy.rules[].action value RestartJobSetAndIgnoreMaxRestarts"
    ]


def test_the_job_template_is_not_jobset_schema(jobset):
    crd = crd_for(jobset)
    template = _rule_props(crd)  # any node: the template's inside is batch/v1's, never walked
    crd2 = copy.deepcopy(crd)
    spec = crd2["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["replicatedJobs"]["items"]["properties"]["template"] = {"type": "object"}
    assert template and jobset_crd.missing(crd2, jobset) == []


def test_operator_exits_1_naming_the_field_and_the_version(monkeypatch, capsys):
    monkeypatch.setattr(main.preflight, "cluster_problem", lambda timeout: None)
    monkeypatch.setattr(
        main.jobset_crd, "jobset_problem", lambda: "the installed JobSet CRD lacks X: v0.10.0"
    )
    assert main.main(["--standalone"]) == 1
    assert "rljob operator: the installed JobSet CRD lacks X: v0.10.0" in capsys.readouterr().err
