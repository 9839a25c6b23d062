"""Evaluate the CRD's CEL rules the way the apiserver does (defaults first), with the cel-python library.

The real-apiserver version of this check lives in the operator reliability tests; this one needs no
cluster, so it runs on every change to the model.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import celpy
from celpy import celtypes

from rljob.api.crd import openapi_schema

_ENV = celpy.Environment()


def _split(text: Any, sep: Any) -> celtypes.ListType:
    """``string.split(separator)`` of Kubernetes' CEL strings extension (Go's strings.Split), which
    cel-python lacks; the real apiserver's version is exercised by tests/e2e/test_reliability_cel.py."""
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(sep))])


@cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule), functions={"split": _split})


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Structural defaulting: fill absent properties that have a default, recursively."""
    if not isinstance(obj, dict) or schema.get("type") != "object":
        return obj
    out = copy.deepcopy(obj)
    for name, sub in schema.get("properties", {}).items():
        if name not in out and "default" in sub:
            out[name] = copy.deepcopy(sub["default"])
        if name in out:
            out[name] = apply_defaults(sub, out[name])
    return out


def cel_failures(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Messages of every CEL rule the (defaulted) object breaks; transition rules only when ``old`` given."""
    schema = openapi_schema()
    new = apply_defaults(schema, obj)
    prev = apply_defaults(schema, old) if old is not None else None
    failures: list[str] = []

    def walk(node: dict[str, Any], value: Any, old_value: Any) -> None:
        for rule in node.get("x-kubernetes-validations", []):
            transition = "oldSelf" in rule["rule"]
            if transition and old_value is None:
                continue
            activation = {"self": value} | ({"oldSelf": old_value} if transition else {})
            result = _program(rule["rule"]).evaluate(celpy.json_to_cel(activation))
            if isinstance(result, Exception):  # cel-python returns evaluation errors as values
                raise result
            if not result:
                failures.append(rule["message"])
        for name, sub in node.get("properties", {}).items():
            if isinstance(value, dict) and name in value:
                child_old = old_value.get(name) if isinstance(old_value, dict) else None
                walk(sub, value[name], child_old)

    walk(schema, new, prev)
    return failures
