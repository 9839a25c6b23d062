"""The checked-in CRD and docs are exactly what the model generates, and the schema is structural."""

from __future__ import annotations

from pathlib import Path

import yaml

from rljob.api.crd import CRD_FILENAME, crd, crd_yaml
from rljob.api.docs import api_markdown

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "run `rljob crd -o crds -o charts/rljob/crds --docs docs/api.md`"


def test_checked_in_crd_is_generated() -> None:
    assert (ROOT / "crds" / CRD_FILENAME).read_text() == crd_yaml(), REGENERATE


def test_chart_crd_is_the_same_file() -> None:
    chart_crd = ROOT / "charts" / "rljob" / "crds" / CRD_FILENAME
    if not (ROOT / "charts" / "rljob" / "Chart.yaml").exists():
        return  # the chart is not there yet
    assert chart_crd.read_text() == crd_yaml(), REGENERATE


def test_docs_are_generated() -> None:
    assert (ROOT / "docs" / "api.md").read_text() == api_markdown(), REGENERATE


def _walk(node: dict, path: str):
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_schema_is_structural_and_described() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema["properties"]["spec"], "spec"):
        assert "type" in node, f"{path} has no type"
        assert node.get("description"), f"{path} has no description (kubectl explain would be empty)"
        assert not {"anyOf", "oneOf", "$ref", "title"} & set(node), f"{path} is not structural"
        if node["type"] == "string":
            assert "maxLength" in node or "enum" in node, f"{path}: CEL cost needs a bounded string"


def test_crd_shape() -> None:
    obj = yaml.safe_load(crd_yaml())
    version = obj["spec"]["versions"][0]
    assert obj["metadata"]["name"] == "rljobs.rljob.dev"
    assert obj["spec"]["names"]["shortNames"] == ["rlj"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:9] == [
        "Phase", "Step", "Reward", "Step-Time", "ETA", "Accelerator", "Topology", "Slices", "Packing"
    ] and columns[-1] == "Age"  # fmt: skip
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == ["Restarts", "JobSet", "Max-Steps", "Last-Step"]
    spec_rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    assert any(r["rule"] == "self.tpu == oldSelf.tpu" for r in spec_rules)
    assert not any("suspend" in r["rule"] for r in spec_rules)
