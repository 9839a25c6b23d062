"""The CRD's CEL rules agree with the Python rules, case by case and on generated specs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from rljob.api import RLJobError, parse_rljob
from rljob.api.rules import RULES
from tests.api.cases import RULE_CASES
from tests.api.celcheck import cel_failures, schema_failures
from tests.api.manifests import manifest
from tests.api.strategies import rljob_manifests

_RULE_ERRORS = {r.error for r in RULES}


def python_errors(obj: dict) -> list[str]:
    try:
        parse_rljob(obj)
    except RLJobError as exc:
        return exc.errors
    return []


def python_rule_errors(obj: dict) -> list[str] | None:
    """Cross-field rule errors from the model; None when a single-field check already failed."""
    errors = python_errors(obj)
    if any(e not in _RULE_ERRORS for e in errors):
        return None
    return sorted(errors)


def _assert_agree(obj: dict) -> None:
    """The CRD refuses what the model refuses, by the same kind of rule: cross-field rules by CEL (the same
    messages), single-field checks by the structural schema (the same field paths)."""
    expected = python_rule_errors(obj)
    if expected is not None:
        assert sorted(cel_failures(obj)) == expected
        return
    field_paths = {e.split(":")[0] for e in python_errors(obj) if e not in _RULE_ERRORS}
    assert field_paths <= schema_failures(obj), (field_paths, schema_failures(obj))


@pytest.mark.parametrize(("case", "obj", "field"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_cel_matches_python(case: str, obj: dict, field: str | None) -> None:
    _assert_agree(obj)


def test_cases_exercise_every_rule_in_cel() -> None:
    fired = {m for _, obj, _ in RULE_CASES if python_rule_errors(obj) for m in cel_failures(obj)}
    assert fired == {r.error for r in RULES}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rljob_manifests())
def test_cel_matches_python_on_generated_specs(obj: dict) -> None:
    _assert_agree(obj)


def test_transition_rules_make_spec_immutable_except_suspend() -> None:
    old = manifest()
    assert cel_failures(manifest({"suspend": True}), old=old) == []
    failures = cel_failures(manifest({"tpu": {"slices": 2}, "queueName": "team-a"}), old=old)
    assert failures == ["spec.tpu is immutable after creation", "spec.queueName is immutable after creation"]
