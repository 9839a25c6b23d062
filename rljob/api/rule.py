"""The :class:`Rule` every rules module builds: one cross-field rule, written once in Python and once in CEL.

Kept apart from ``rules.py`` (which gathers them) so the modules by concern (``tpu_rules.py``,
``pod_rules.py``) and ``rules.py`` itself import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One validation rule. ``check`` and ``cel`` receive the object at ``scope`` (e.g. the spec)."""

    scope: tuple[str, ...]  # path from the RLJob root to the object the rule is attached to
    field: str  # path, relative to scope, of the field the error names (CEL fieldPath)
    message: str
    cel: str
    check: Callable[[Any], bool]

    @property
    def path(self) -> str:
        """The field's full path, as Kubernetes prints it (``spec.packing.maxSeqTokenPerTpu``)."""
        return ".".join((*self.scope, self.field))

    @property
    def error(self) -> str:
        return f"{self.path}: {self.message}"


def cel_list(items: tuple[Any, ...]) -> str:
    """A CEL list literal of ``items`` (strings quoted), so CEL tests membership in the tuple Python uses."""
    return "[" + ", ".join(f"'{i}'" if isinstance(i, str) else str(i) for i in items) + "]"
