"""The base of every RLJob API model: Kubernetes' JSON reading rules, written once.

Sub-models live in modules by concern (``spec.py`` for the spec's core, others beside it) and all derive
from ``Model`` here, so new API sections never need to import ``spec.py`` (which imports them).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

ShortStr = Annotated[str, Field(min_length=1, max_length=253)]


class Model(BaseModel):
    """Base: unknown fields rejected, docstrings as descriptions.

    Attribute names are the Kubernetes wire names (camelCase) on purpose: the Python rules, the CEL rules
    and the error paths users see all spell a field the same way.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, strict=True)
    # strict: JSON types as the apiserver checks them ("2" is not an integer, 1 is not a boolean).

    @model_validator(mode="before")
    @classmethod
    def _json_like_kubernetes(cls, data: Any) -> Any:
        """Read JSON values as the apiserver does: null means absent (then the default applies), and an
        integral number like 2.0 is an integer."""
        if not isinstance(data, dict):
            return data
        return {
            key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in data.items()
            if value is not None
        }
