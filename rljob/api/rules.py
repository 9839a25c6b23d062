"""Cross-field rules of the RLJob API, each written once in Python and once in CEL, side by side.

The Python ``check`` runs in the model (``RLJob`` validation, ``rljob validate``, the trainer); the ``cel``
expression is emitted into the CRD as an ``x-kubernetes-validations`` entry at ``scope`` so the apiserver
rejects the same specs at admission. ``tests/api/test_cel.py`` evaluates both on the same cases, so they
cannot drift apart. Single-field bounds (ranges, patterns, enums) live on the fields in ``spec.py``.

The rules of the slice are in ``tpu_rules.py`` and those of the trainer pod's fields in ``pod_rules.py``;
this module holds the rest and gathers all of them, in the order the CRD lists them.
"""

from __future__ import annotations

import re
from typing import Any

from rljob.api.maxtext import MAXTEXT_SIZES
from rljob.api.pod_rules import POD_RULES
from rljob.api.rule import Rule, cel_list
from rljob.api.tpu import RESERVED_TPU_PORTS
from rljob.api.tpu_rules import TPU_RULES

MAX_NAME_LENGTH = 40
"""Longest RLJob name. The JobSet (same name) gives pods ``<name>-slice-<job>-<pod>-<5 random>``; with
up to 3 digits of slice index and 4 of host index that is name + 20 characters, and pod names (hostnames
on the host network) must stay <= 63. 40 leaves a margin for JobSet's own suffixes."""

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1035 label: the name becomes a JobSet, a headless Service and pod hostnames."""

NODE_AGENT_PORTS: dict[int, str] = {
    9100: "node-exporter",
    10248: "kubelet healthz",
    10249: "kube-proxy metrics",
    10250: "kubelet",
    10255: "kubelet read-only",
    10256: "kube-proxy healthz",
}
"""Ports that agents beside the trainer hold on every node's host network (the trainer pods use the host
network, so spec.metrics.port is a node port): node-exporter (kube-prometheus-stack's DaemonSet declares
hostPort 9100: a trainer pod asking for it stays Pending), the kubelet and kube-proxy (not pods with a
declared host port: the pod would be scheduled and the trainer could not bind). MetricsSpec.port's
description says the same for docs/api.md; a test keeps the two in step."""

PACKED_ROW_MULTIPLE = 128
"""A packed row's length must be a multiple of this. TPU splash attention tiles a row into query and key
blocks that are multiples of 128 (the TPU lane width) and must divide the row; the trainer picks the
largest of 1024/512/256/128 that divides it."""


def _micro_divides(g: Any) -> bool:
    mini = g.miniBatchSize if g.miniBatchSize is not None else g.batchSize
    return g.microBatchSize is None or mini % g.microBatchSize == 0


_CORE_RULES: tuple[Rule, ...] = (
    Rule(
        scope=(),
        field="metadata.name",
        message=f"must be at most {MAX_NAME_LENGTH} characters, so generated pod names stay within 63",
        cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
        check=lambda j: len(j.metadata.name) <= MAX_NAME_LENGTH,
    ),
    Rule(
        scope=(),
        field="metadata.name",
        message="must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)",
        cel=f"self.metadata.name.matches('{NAME_PATTERN}')",
        check=lambda j: re.fullmatch(NAME_PATTERN, j.metadata.name) is not None,
    ),
    Rule(
        scope=("spec",),
        field="maxPrefillPredictLength",
        message="must be less than spec.maxTargetLength (prompt + completion)",
        cel="self.maxPrefillPredictLength < self.maxTargetLength",
        check=lambda s: s.maxPrefillPredictLength < s.maxTargetLength,
    ),
    Rule(
        scope=("spec",),
        field="packing.maxSeqTokenPerTpu",
        message="must be 0 (unpacked) or at least spec.maxTargetLength, so a whole prompt+completion fits "
        "one packed row",
        cel="self.packing.maxSeqTokenPerTpu == 0 || self.packing.maxSeqTokenPerTpu >= self.maxTargetLength",
        check=lambda s: s.packing.maxSeqTokenPerTpu == 0 or s.packing.maxSeqTokenPerTpu >= s.maxTargetLength,
    ),
    Rule(
        scope=("spec", "packing"),
        field="maxSeqTokenPerTpu",
        message=f"must be a multiple of {PACKED_ROW_MULTIPLE} (0 = unpacked): TPU splash attention cuts a "
        "packed row into blocks of a multiple of 128 tokens that must divide it",
        cel=f"self.maxSeqTokenPerTpu % {PACKED_ROW_MULTIPLE} == 0",
        check=lambda p: p.maxSeqTokenPerTpu % PACKED_ROW_MULTIPLE == 0,
    ),
    Rule(
        scope=("spec",),
        field="rollout.vllmBlockSize",
        message="is only used by rollout.engine vllm",
        cel="!has(self.rollout.vllmBlockSize) || self.rollout.engine == 'vllm'",
        check=lambda s: s.rollout.vllmBlockSize is None or s.rollout.engine == "vllm",
    ),
    Rule(
        scope=("spec", "model"),
        field="maxtext",
        message="is required with backend maxtext (the MaxText model name)",
        cel="self.backend != 'maxtext' || has(self.maxtext)",
        check=lambda m: m.backend != "maxtext" or m.maxtext is not None,
    ),
    Rule(
        scope=("spec", "model"),
        field="maxtext",
        message="is only used by backend maxtext",
        cel="!has(self.maxtext) || self.backend == 'maxtext'",
        check=lambda m: m.maxtext is None or m.backend == "maxtext",
    ),
    Rule(
        scope=("spec", "model"),
        field="size",
        message=f"with backend maxtext must be one of {', '.join(MAXTEXT_SIZES)} (tiny: the named "
        "architecture shrunk to the 2-layer random demo decoder; full: as MaxText defines it)",
        cel=f"self.backend != 'maxtext' || self.size in {cel_list(MAXTEXT_SIZES)}",
        check=lambda m: m.backend != "maxtext" or m.size in MAXTEXT_SIZES,
    ),
    *TPU_RULES,
    Rule(
        scope=("spec", "grpo"),
        field="miniBatchSize",
        message="must divide spec.grpo.batchSize",
        cel="!has(self.miniBatchSize) || self.batchSize % self.miniBatchSize == 0",
        check=lambda g: g.miniBatchSize is None or g.batchSize % g.miniBatchSize == 0,
    ),
    Rule(
        scope=("spec", "grpo"),
        field="microBatchSize",
        message="must divide spec.grpo.miniBatchSize (or batchSize when miniBatchSize is unset)",
        cel="!has(self.microBatchSize) || "
        "(has(self.miniBatchSize) ? self.miniBatchSize : self.batchSize) % self.microBatchSize == 0",
        check=_micro_divides,
    ),
    Rule(
        scope=("spec",),
        field="rewards",
        message="each reward needs exactly one of name (a built-in) or function (module:function)",
        cel="!has(self.rewards) || self.rewards.all(r, has(r.name) != has(r.function))",
        check=lambda s: all((r.name is None) != (r.function is None) for r in s.rewards or ()),
    ),
    Rule(
        scope=("spec",),
        field="rewards",
        message="pattern is required by the regex reward and used by no other",
        cel="!has(self.rewards) || self.rewards.all(r, has(r.pattern) == (has(r.name) && r.name == 'regex'))",
        check=lambda s: all((r.pattern is not None) == (r.name == "regex") for r in s.rewards or ()),
    ),
    Rule(
        scope=("spec",),
        field="rewards",
        message="maxLength is required by the lengthPenalty reward and used by no other",
        cel="!has(self.rewards) || self.rewards.all(r, has(r.maxLength) == (has(r.name) && r.name == 'lengthPenalty'))",
        check=lambda s: all(
            (r.maxLength is not None) == (r.name == "lengthPenalty") for r in s.rewards or ()
        ),
    ),
    Rule(
        scope=("spec",),
        field="rewards",
        message="spec.data and spec.rewards go together: a dataset needs at least one reward, and rewards "
        "need a dataset",
        cel="has(self.data) == has(self.rewards)",
        check=lambda s: (s.data is not None) == (s.rewards is not None),
    ),
    Rule(
        scope=("spec", "metrics"),
        field="port",
        message=f"must not be one of the TPU runtime's ports {', '.join(map(str, RESERVED_TPU_PORTS))}",
        cel=f"!(self.port in {cel_list(RESERVED_TPU_PORTS)})",
        check=lambda m: m.port not in RESERVED_TPU_PORTS,
    ),
    Rule(
        scope=("spec", "metrics"),
        field="port",
        message="must not be a node agent's port on the host network: "
        + ", ".join(f"{port} ({who})" for port, who in NODE_AGENT_PORTS.items()),
        cel=f"!(self.port in {cel_list(tuple(NODE_AGENT_PORTS))})",
        check=lambda m: m.port not in NODE_AGENT_PORTS,
    ),
)


RULES: tuple[Rule, ...] = (*_CORE_RULES, *POD_RULES)

MUTABLE_SPEC_FIELDS: tuple[str, ...] = ("suspend",)
"""Spec fields that may change after creation. Every other spec field is immutable: the operator creates
the JobSet once and never re-applies the spec (Kueue edits it while suspended), so a change would
silently do nothing."""


def _scoped(obj: Any, scope: tuple[str, ...]) -> Any:
    for name in scope:
        obj = getattr(obj, name)
    return obj


def violations(rljob: Any) -> list[str]:
    """Every rule the RLJob breaks, as ``path: message`` lines."""
    return [r.error for r in RULES if not r.check(_scoped(rljob, r.scope))]


def immutable_violations(old_spec: Any, new_spec: Any) -> list[str]:
    """Changes to fields that must not change after creation, as ``path: message`` lines."""
    return [
        f"spec.{name}: is immutable after creation"
        for name in type(new_spec).model_fields
        if name not in MUTABLE_SPEC_FIELDS and getattr(old_spec, name) != getattr(new_spec, name)
    ]
