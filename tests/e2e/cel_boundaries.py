"""RLJobs for the CEL agreement suite (``test_reliability_cel.py``): values at, just inside and just
outside every single-field bound of the CRD schema, and Hypothesis strategies that start from a valid or
a cross-field-edge RLJob and step over up to three of those bounds. Pure: no cluster needed to build them.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from rljob.api import RLJobError, parse_rljob, tpu
from rljob.api.crd import openapi_schema
from tests.api.manifests import manifest
from tests.api.strategies import rljob_manifests


def model_verdict(obj: dict[str, Any]) -> list[str] | None:
    """None if the model accepts ``obj``, else its ``path: message`` errors."""
    try:
        parse_rljob(obj)
    except RLJobError as exc:
        return exc.errors
    return None


def _spec_leaves() -> dict[str, dict[str, Any]]:
    """``spec.a.b`` -> schema node of every spec leaf (podAnnotations counts as a leaf)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            for name, sub in node["properties"].items():
                walk(sub, f"{path}.{name}")
        else:
            out[path] = node

    walk(openapi_schema()["properties"]["spec"], "spec")
    return out


LEAVES = _spec_leaves()


def _string_of(length: int, path: str) -> list[str]:
    """Strings of exactly ``length`` characters that match the field's pattern when that is possible."""
    if length < 0:
        return []
    if path == "spec.tpu.topology":
        return ["1x" + "1" * (length - 2)] if length >= 3 else ["1" * length]
    # "é" is 2 bytes in UTF-8: a length limit counted in bytes instead of characters would show.
    return ["a" * length, "é" * length] if length else [""]


def boundary_values(path: str, node: dict[str, Any]) -> list[Any]:
    """Values at, just inside and just outside each bound of one field."""
    kind = node.get("type")
    values: list[Any] = []
    if "enum" in node:
        values += node["enum"]
        values += [0, 2, 3, 2048] if kind == "integer" else ["", "bogus", node["enum"][0].upper()]
    elif kind == "integer":
        lo, hi = node.get("minimum"), node.get("maximum")
        for bound in (lo, hi):
            if bound is not None:
                values += [bound - 1, bound, bound + 1]
        values += [-1, 2**31, 2**53 + 1]
    elif kind == "number":
        lo, hi = node.get("minimum"), node.get("maximum")
        for bound in (lo, hi):
            if bound is not None:
                values += [bound, bound - 1e-9, bound + 1e-9, float(bound) + 0.5, float(bound) - 0.5]
        values += [5e-324, 1e300, -0.0]
    elif kind == "string":
        lo, hi = node.get("minLength", 0), node.get("maxLength")
        for n in {lo - 1, lo, lo + 1, *(() if hi is None else (hi - 1, hi, hi + 1))}:
            values += _string_of(n, path)
        values += ["UPPER", "with space", "a/b:c", "ü", "x" * 70000]
    elif kind == "boolean":
        values += [True, False]
    elif kind == "object":  # podAnnotations: a map of strings with a size limit
        n, length = node.get("maxProperties", 64), node["additionalProperties"].get("maxLength", 4096)
        values += [
            {},
            {f"k{i}": "v" for i in range(n)},
            {f"k{i}": "v" for i in range(n + 1)},
            {"a": "x" * length},
            {"a": "x" * (length + 1)},
            {"gke-gcsfuse/volumes": "true", "ünï": "çødé"},
        ]
    return values


_EDITABLE = sorted(path for path, node in LEAVES.items() if node.get("type") != "array")
"""Scalar and map leaves. List fields (env, volumes, volumeMounts, rewards) have no single bound to step
over; their items are checked by the rule cases (tests/api/cases.py) and the hostile suite."""


@st.composite
def edits(draw: st.DrawFn) -> tuple[str, Any]:
    """(path, value): a value near one bound, or the field removed (``_ABSENT``), or an unknown field."""
    path = draw(st.sampled_from(_EDITABLE))
    # Hypothesis favours the ends of integer ranges; a sampled list keeps these mixes as written.
    choice = draw(st.sampled_from(["bound"] * 8 + ["absent", "unknown"]))
    if choice == "absent":
        return path, _ABSENT
    if choice == "unknown":
        return path.rsplit(".", 1)[0] + "." + draw(st.sampled_from(["extra", "Image", "slice"])), "x"
    return path, draw(st.sampled_from(boundary_values(path, LEAVES[path])))


_ABSENT = object()


def apply_edit(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return
    if value is _ABSENT:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = copy.deepcopy(value)


_VALID_NAMES = st.one_of(
    st.from_regex(r"[a-z]([a-z0-9-]{0,38}[a-z0-9])?", fullmatch=True), st.sampled_from(["a", "a" * 40])
)
_BAD_NAMES = st.sampled_from(["a" * 41, "a-", "-a", "1a", "a.b", "A", "a_b", "é", "a" * 254, "a" * 64])
_SHAPES = [(g.accelerator, t) for g in tpu.GENERATIONS for t in tpu.topologies(g.accelerator)]


@st.composite
def valid_rljobs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid RLJob on any real TPU shape (so edits start from the accepted side of every bound)."""
    accelerator, topology = draw(st.sampled_from(_SHAPES))
    target = draw(st.integers(2, 1_048_576))
    row = -(-target // 128) * 128  # packed rows are multiples of 128 (splash blocks)
    batch = draw(st.integers(1, 64))
    mini = draw(st.sampled_from([d for d in range(1, batch + 1) if batch % d == 0]))
    obj = manifest(
        {
            "tpu": {"accelerator": accelerator, "topology": topology},
            "maxTargetLength": target,
            "maxPrefillPredictLength": draw(st.integers(1, target - 1)),
            "packing": {"maxSeqTokenPerTpu": draw(st.sampled_from([0, row, min(row * 2, 1_048_576)]))},
            "grpo": {"batchSize": batch, "miniBatchSize": mini},
            "suspend": draw(st.booleans()),
        },
        name=draw(_VALID_NAMES),
    )
    assert model_verdict(obj) is None, model_verdict(obj)
    return obj


@st.composite
def near_boundary_rljobs(draw: st.DrawFn) -> dict[str, Any]:
    """Either the API tests' cross-field strategy (mostly invalid, around each cross-field rule) or a valid
    RLJob; then up to three single-field edits near a bound, and sometimes a bad name."""
    if draw(st.booleans()):
        obj = draw(rljob_manifests())
        obj["metadata"]["name"] = draw(_VALID_NAMES)
    else:
        obj = draw(valid_rljobs())
    for path, value in draw(st.lists(edits(), max_size=3)):
        apply_edit(obj, path, value)
    if draw(st.sampled_from([False] * 9 + [True])):
        obj["metadata"]["name"] = draw(_BAD_NAMES)
    return obj
