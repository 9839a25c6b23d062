"""Generate the RLJob CustomResourceDefinition from the pydantic model.

pydantic's JSON Schema is turned into a structural OpenAPI v3 schema (refs inlined, ``Optional`` unwrapped,
titles dropped, object defaults added so the apiserver fills nested defaults), and the cross-field rules of
``rules.py`` are attached as ``x-kubernetes-validations`` at their scope, next to the transition rules that
make every spec field but ``suspend`` immutable.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from rljob.api.check import VALIDATIONS
from rljob.api.kubeyaml import Dumper
from rljob.api.rules import MUTABLE_SPEC_FIELDS, RULES
from rljob.api.spec import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, RLJob, RLJobSpec

CRD_FILENAME = f"{GROUP}_{PLURAL}.yaml"

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    {"name": "Reward", "type": "number", "jsonPath": ".status.progress.rewardMean"},
    {
        "name": "Step-Time",
        "type": "number",
        "jsonPath": ".status.progress.meanStepSeconds",
        "description": "Mean seconds per steady step (trainer host 0)",
    },
    {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta"},
    {"name": "Accelerator", "type": "string", "jsonPath": ".spec.tpu.accelerator"},
    {"name": "Topology", "type": "string", "jsonPath": ".spec.tpu.topology"},
    {"name": "Slices", "type": "integer", "jsonPath": ".spec.tpu.slices"},
    {
        "name": "Packing",
        "type": "integer",
        "jsonPath": ".spec.packing.maxSeqTokenPerTpu",
        "description": "Tokens per packed row (0 = unpacked)",
    },
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "priority": 1},
    {"name": "JobSet", "type": "string", "jsonPath": ".status.jobSetName", "priority": 1},
    {"name": "Max-Steps", "type": "integer", "jsonPath": ".status.progress.maxSteps", "priority": 1},
    {"name": "Last-Step", "type": "date", "jsonPath": ".status.progress.lastStepTime", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "maxProperties",
    "maxItems",
    "minItems",
    VALIDATIONS,  # a field's own checks (check.py); the cross-field rules are added below
}


_ORDER = {k: i for i, k in enumerate(("type", "description", "default", "enum", "format"))}
_ORDER.update({"properties": 90, "required": 91, "items": 92, "additionalProperties": 93})


def _clean_text(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text).strip()


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One pydantic JSON Schema node -> one structural OpenAPI v3 node."""
    node = dict(node)
    optional = any(b.get("type") == "null" for b in node.get("anyOf", []))
    if "$ref" in node:  # inline the definition; the referring field's description wins
        target = dict(defs[node.pop("$ref").split("/")[-1]])
        target.update({k: v for k, v in node.items() if k in ("description", "default")})
        node = target
    if "anyOf" in node:  # Optional[X] -> X (absence is how Kubernetes says "unset")
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"unsupported union in the RLJob model: {branches}")
        merged = _structural(branches[0], defs)
        merged.update({k: v for k, v in node.items() if k in ("description", "default")})
        node = merged
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
        node["exclusiveMinimum"], bool
    ):
        node["minimum"], node["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if isinstance(node.get("exclusiveMaximum"), int | float) and not isinstance(
        node["exclusiveMaximum"], bool
    ):
        node["maximum"], node["exclusiveMaximum"] = node["exclusiveMaximum"], True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items",) or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _structural(value, defs)
        elif key == "additionalProperties":
            continue  # `false`: unknown fields are pruned by the apiserver and refused by kubectl
        elif key == "description":
            out[key] = _clean_text(value)
        else:
            out[key] = value
    if out.get("type") == "object" and "default" not in out and "required" not in out and not optional:
        # So the apiserver creates the object when it is absent. Its fields' defaults are spelled out, not
        # left to nested defaulting: the apiserver checks a default against the CEL rules as it stands, and
        # `{}` breaks every rule that reads a field (kube-apiserver 1.36 refuses such a CRD: "no such key").
        # Not for an Optional object (`X | None`): absent means unset there (e.g. an env var's valueFrom).
        props = out.get("properties", {})
        out["default"] = {name: sub["default"] for name, sub in props.items() if "default" in sub}
    return {k: out[k] for k in sorted(out, key=lambda k: (_ORDER.get(k, len(_ORDER)), k))}


def _at(schema: dict[str, Any], scope: tuple[str, ...]) -> dict[str, Any]:
    for name in scope:
        schema = schema["properties"][name]
    return schema


def _immutability_rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Transition rules: every spec field except MUTABLE_SPEC_FIELDS keeps its first value.

    ``spec`` is the spec's structural schema: a field is always present when it is required or the
    apiserver fills a default (a list with an empty default is not defaulted, so it may be absent)."""
    rules = []
    for name in RLJobSpec.model_fields:
        if name in MUTABLE_SPEC_FIELDS:
            continue
        always_present = name in spec.get("required", []) or "default" in spec["properties"][name]
        rule = (
            f"self.{name} == oldSelf.{name}"
            if always_present
            else f"has(self.{name}) == has(oldSelf.{name}) && (!has(self.{name}) || self.{name} == oldSelf.{name})"
        )
        rules.append({"rule": rule, "message": f"spec.{name} is immutable after creation"})
    return rules


def openapi_schema() -> dict[str, Any]:
    """The RLJob's structural schema with every validation rule attached."""
    raw = RLJob.model_json_schema(mode="validation")
    schema = _structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    for field in ("apiVersion", "kind"):
        schema["properties"][field] = {
            "type": "string",
            "description": schema["properties"][field].get(
                "description", f"{field} of the object (rljob.dev/v1alpha1, RLJob)."
            ),
        }
    schema["properties"]["status"].pop("default", None)
    schema["properties"]["spec"]["description"] = _clean_text(RLJobSpec.__doc__ or "")
    for rule in RULES:
        entry: dict[str, Any] = {"rule": rule.cel, "message": rule.error}
        if rule.scope:  # fieldPath must point into the schema, which has no metadata properties
            entry["fieldPath"] = "." + rule.field
        _at(schema, rule.scope).setdefault("x-kubernetes-validations", []).append(entry)
    spec = schema["properties"]["spec"]
    spec["x-kubernetes-validations"] = [*spec.get("x-kubernetes-validations", []), *_immutability_rules(spec)]
    return schema


def crd() -> dict[str, Any]:
    """The complete CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}", "annotations": {"rljob.dev/generated-by": "rljob crd"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["all", "rljob"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML checked in under crds/ (stable key order, so diffs are meaningful)."""
    header = "# Generated by `rljob crd` from rljob/api/spec.py and rljob/api/rules.py. Do not edit.\n"
    return header + yaml.dump(crd(), Dumper=Dumper, sort_keys=False, width=110)
