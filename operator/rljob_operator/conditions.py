"""Standard Kubernetes conditions (metav1.Condition), kept the way JobSet keeps them.

A condition's ``lastTransitionTime`` moves only when its ``status`` flips: a new message or reason alone
keeps the time, so ``kubectl describe`` tells how long something has been true, not when the operator
last looked.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

Condition = dict[str, Any]


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC, second precision, as the apiserver writes times."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    """A new list with ``type_`` set; the original list is not changed (the caller compares the two)."""
    value = "True" if status else "False"
    old = find(conditions, type_)
    since = (
        old["lastTransitionTime"]
        if old and old.get("status") == value and old.get("lastTransitionTime")
        else timestamp(now)
    )
    new: Condition = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    out = [c for c in conditions if c.get("type") != type_]
    if old is None:
        out.append(new)
    else:
        out.insert(conditions.index(old), new)
    return out


def set_on(
    status: dict[str, Any],
    type_: str,
    value: bool,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    """:func:`set_condition` on an object's ``status``, whose ``conditions`` may be absent or null (a new
    RLJob's): every status writer starts from the list it last wrote, so they read it one way."""
    return set_condition(
        list(status.get("conditions") or []), type_, value, reason, message, now=now, generation=generation
    )


def clear_condition(
    conditions: list[Condition],
    type_: str,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    """Set ``type_`` to False, but only if it was ever reported: conditions appear when they first matter."""
    if find(conditions, type_) is None:
        return conditions
    return set_condition(conditions, type_, False, reason, message, now=now, generation=generation)
