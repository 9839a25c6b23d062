"""The valid RLJob every API test case edits, and the edit helpers (the rule cases, the e2e hostile and CEL
suites all start from it, so a refusal is about the one edit)."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "apiVersion": "rljob.dev/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "grpo-demo"},
    "spec": {
        "image": "ghcr.io/example/rljob-trainer:0.1.0",
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
        "maxPrefillPredictLength": 64,
        "maxTargetLength": 256,
    },
}


WORKLOAD: dict[str, Any] = {
    "data": {"source": "hf://datasets/openai/gsm8k", "config": "main", "promptField": "question"},
    "rewards": [{"name": "mathAnswer"}],
}
"""A valid spec.data + spec.rewards patch (GSM8K with a math reward)."""


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``patch`` into a copy of ``base``; a value of ``DELETE`` removes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


DELETE = object()


def manifest(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """BASE with a spec patch and metadata overrides."""
    return merge(BASE, {"spec": spec or {}, "metadata": metadata})
