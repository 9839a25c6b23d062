"""Evaluate the CRD's CEL rules the way the apiserver does (defaults first), with the cel-python library.

The real-apiserver version of this check lives in the operator reliability tests; this one needs no
cluster, so it runs on every change to the model.
"""

from __future__ import annotations

import copy
import re
from decimal import ROUND_UP, Decimal
from functools import cache
from typing import Any

import celpy
from celpy import celtypes

from rljob.api import quantity
from rljob.api.crd import openapi_schema

_ENV = celpy.Environment()


def _split(text: Any, sep: Any) -> celtypes.ListType:
    """``string.split(separator)`` of Kubernetes' CEL strings extension (Go's strings.Split), which
    cel-python lacks; the real apiserver's version is exercised by tests/e2e/test_reliability_cel.py."""
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(sep))])


def _sum(items: Any) -> celtypes.IntType:
    """``list.sum()`` of Kubernetes' CEL lists library (integers only here)."""
    return celtypes.IntType(sum(int(i) for i in items))


# Kubernetes' CEL quantity library (isQuantity, quantity, isLessThan), as far as the CRD uses it.
# A quantity is held as Kubernetes holds it: rounded up to whole nanounits and capped at 2^63-1.


def _is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(quantity.parse_quantity(str(text)) is not None)


def _quantity(text: Any) -> Decimal:
    value = quantity.parse_quantity(str(text))
    if value is None:
        raise ValueError(f"quantity({text!r}): not a quantity")
    if abs(value) >= quantity.MAX:
        return quantity.MAX.copy_sign(value)
    return abs(value).quantize(quantity.NANO, rounding=ROUND_UP).copy_sign(value)  # < 29 digits


def _is_less_than(value: Decimal, other: Decimal) -> celtypes.BoolType:
    return celtypes.BoolType(value < other)


_FUNCTIONS = {
    "split": _split,
    "sum": _sum,
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "isLessThan": _is_less_than,
}


@cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule), functions=_FUNCTIONS)


def _holds(rule: str, activation: dict[str, Any]) -> bool:
    result = _program(rule).evaluate(celpy.json_to_cel(activation))
    if isinstance(result, Exception):  # cel-python returns evaluation errors as values
        raise result
    return bool(result)


def _field_check(rule: dict[str, Any], path: str) -> bool:
    """A field's own check (rljob/api/check.py): on a field, not the root, with no fieldPath (the
    cross-field rules all point at theirs) and no oldSelf (the transition rules)."""
    return bool(path) and "fieldPath" not in rule and "oldSelf" not in rule["rule"]


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
            if not _holds(rule["rule"], activation):
                failures.append(rule["message"])
        for name, sub in node.get("properties", {}).items():
            if isinstance(value, dict) and name in value:
                child_old = old_value.get(name) if isinstance(old_value, dict) else None
                walk(sub, value[name], child_old)
        if isinstance(value, list) and "items" in node:  # list items have no transition rules here
            for item in value:
                walk(node["items"], item, None)

    walk(schema, new, prev)
    return failures


_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def schema_failures(obj: dict[str, Any]) -> set[str]:
    """Field paths where the CRD's structural schema rejects ``obj``: types, enums, bounds, patterns,
    lengths, required and unknown fields (the apiserver's OpenAPI checks), and each field's own CEL
    checks (``rljob/api/check.py``), which the model reports as field errors too."""
    failures: set[str] = set()

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        want = _TYPES.get(node.get("type", ""))
        if want and (not isinstance(value, want) or (isinstance(value, bool) and bool not in want)):
            failures.add(path)
            return
        checks = [
            "enum" in node and value not in node["enum"],
            "minimum" in node and value < node["minimum"],
            "maximum" in node and value > node["maximum"],
            node.get("exclusiveMinimum") is True and value <= node["minimum"],
            node.get("exclusiveMaximum") is True and value >= node["maximum"],
            "pattern" in node and re.search(node["pattern"], value) is None,
            "minLength" in node and len(value) < node["minLength"],
            "maxLength" in node and len(value) > node["maxLength"],
            "maxItems" in node and len(value) > node["maxItems"],
            "minItems" in node and len(value) < node["minItems"],
        ]
        if any(checks):
            failures.add(path)
            return  # the apiserver runs a field's CEL checks only on a value of the right form
        if any(
            _field_check(r, path) and not _holds(r["rule"], {"self": value})
            for r in node.get("x-kubernetes-validations", [])
        ):
            failures.add(path)
        if isinstance(value, dict):
            props = node.get("properties", {})
            failures.update(f"{path}.{k}".lstrip(".") for k in node.get("required", []) if k not in value)
            open_map = "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields")
            for key, child in value.items():
                if key in props:
                    walk(props[key], child, f"{path}.{key}".lstrip("."))
                elif not open_map and path:  # the root's apiVersion/kind/metadata are the apiserver's
                    failures.add(f"{path}.{key}")
        if isinstance(value, list) and "items" in node:
            for i, item in enumerate(value):
                walk(node["items"], item, f"{path}[{i}]")

    walk(openapi_schema(), apply_defaults(openapi_schema(), obj), "")
    return failures
