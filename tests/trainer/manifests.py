"""A small valid RLJob for trainer tests: a tiny random Qwen3 on one v5e 2x2 slice. The trainer runs it on
CPU; the slice only has to pass validation. Each test sets the fields it is about."""

from __future__ import annotations

import copy
from typing import Any

TINY: dict[str, Any] = {
    "apiVersion": "rljob.dev/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "t"},
    "spec": {
        "image": "img",
        "model": {"family": "qwen3", "size": "tiny"},
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
        "maxPrefillPredictLength": 16,
        "maxTargetLength": 64,
    },
}


def tiny_rljob(**spec_paths: Any) -> dict[str, Any]:
    """A copy of TINY with dotted spec paths set in order, e.g. ``tiny_rljob(**{"model.size": "9b"})``;
    a plain name replaces that whole section (``tiny_rljob(grpo={...})``)."""
    doc = copy.deepcopy(TINY)
    for dotted, value in spec_paths.items():
        node = doc["spec"]
        *parents, leaf = dotted.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = copy.deepcopy(value)
    return doc
