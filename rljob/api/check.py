"""A single-field check written once in Python and once in CEL, with one message, attached to a type.

Schema patterns suffice where a regular expression says it all and its message can stay generic (names).
A check is for what a pattern cannot say, or should say in words: a Kubernetes quantity (Kubernetes' CEL
``isQuantity``), the storage schemes the trainer opens, an image without whitespace, annotation keys.

Used as ``Annotated[str, Field(max_length=...), Check(...)]``: pydantic runs ``check`` after the type's own
checks and reports ``message`` at the field's path; the CRD carries ``cel`` as an ``x-kubernetes-validations``
rule on the field itself, so the apiserver reports the same message at the same path (list items included:
``spec.volumes[1].emptyDir.sizeLimit``). ``tests/api/celcheck.py`` evaluates the CEL beside the Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

VALIDATIONS = "x-kubernetes-validations"


@dataclass(frozen=True)
class Check:
    """One check of a field's value: ``check`` in Python, ``cel`` (with ``self`` the value) in the CRD."""

    message: str
    cel: str
    check: Callable[[Any], bool]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        def validate(value: Any) -> Any:
            if not self.check(value):
                raise PydanticCustomError("kubernetes_check", self.message)
            return value

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out.setdefault(VALIDATIONS, []).append({"rule": self.cel, "message": self.message})
        return out


def cel_string(text: str) -> str:
    """``text`` as a CEL string literal: quotes and backslashes escaped, anything outside printable ASCII
    as ``\\uXXXX`` (so a regular expression holding tabs or non-breaking spaces survives the CRD's YAML)."""
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    return "'" + "".join(out) + "'"
