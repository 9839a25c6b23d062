"""Every validation rule, with a passing and a failing case, through the model and `rljob validate`."""

from __future__ import annotations

import pytest
import yaml
from rljob_cli.main import main as cli_main

from rljob.api import RLJobError, parse_rljob
from rljob.api.rules import RULES, immutable_violations
from tests.api.cases import RULE_CASES
from tests.api.manifests import manifest


@pytest.mark.parametrize(("case", "obj", "field"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_rule(case: str, obj: dict, field: str | None) -> None:
    if field is None:
        parse_rljob(obj)
        return
    with pytest.raises(RLJobError) as info:
        parse_rljob(obj)
    named = [e for e in info.value.errors if e.startswith(field + ":")]
    assert named, f"{case}: no error names {field}: {info.value.errors}"


def test_every_cross_field_rule_has_a_failing_case() -> None:
    failing_paths = {field for _, _, field in RULE_CASES if field}
    assert {r.path for r in RULES} <= failing_paths


def test_all_rule_errors_are_listed_at_once() -> None:
    obj = manifest(
        {
            "packing": {"maxSeqTokenPerTpu": 10},
            "metrics": {"port": 8471},
            "tpu": {"topology": "2x2", "slices": 3},
        },
        name="x" * 50,
    )
    with pytest.raises(RLJobError) as info:
        parse_rljob(obj)
    paths = {e.split(":")[0] for e in info.value.errors}
    assert paths == {
        "metadata.name",
        "spec.packing.maxSeqTokenPerTpu",
        "spec.metrics.port",
        "spec.tpu.slices",
    }


def test_immutable_fields() -> None:
    old = parse_rljob(manifest()).spec
    assert immutable_violations(old, parse_rljob(manifest({"suspend": True})).spec) == []
    changed = parse_rljob(manifest({"packing": {"maxSeqTokenPerTpu": 512}, "image": "other"})).spec
    assert immutable_violations(old, changed) == [
        "spec.image: is immutable after creation",
        "spec.packing: is immutable after creation",
    ]


def test_validate_cli_lists_every_error(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(manifest({"packing": {"maxSeqTokenPerTpu": 10}, "metrics": {"port": 8080}}))
    )
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(manifest()))
    assert cli_main(["validate", "-f", str(good)]) == 0
    assert cli_main(["validate", "-f", str(good), "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "spec.packing.maxSeqTokenPerTpu:" in err and "spec.metrics.port:" in err


def test_validate_cli_rejects_broken_yaml(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    assert cli_main(["validate", "-f", str(bad)]) == 1
    assert "bad.yaml is not valid YAML:\n  - line 1 column 16: " in capsys.readouterr().err
