"""Cross-field rules of the RLJob API, each written once in Python and once in CEL, side by side.

The Python ``check`` runs in the model (``RLJob`` validation, ``rljob validate``, the trainer); the ``cel``
expression is emitted into the CRD as an ``x-kubernetes-validations`` entry at ``scope`` so the apiserver
rejects the same specs at admission. ``tests/api/test_cel.py`` evaluates both on the same cases, so they
cannot drift apart. Single-field bounds (ranges, patterns, enums) live on the fields in ``spec.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rljob.api import pod, tpu
from rljob.api.maxtext import MAXTEXT_SIZES
from rljob.api.tpu import RESERVED_TPU_PORTS

MAX_NAME_LENGTH = 40
"""Longest RLJob name. The JobSet (same name) gives pods ``<name>-slice-<job>-<pod>-<5 random>``; with
up to 3 digits of slice index and 4 of host index that is name + 20 characters, and pod names (hostnames
on the host network) must stay <= 63. 40 leaves a margin for JobSet's own suffixes."""

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A DNS-1035 label: the name becomes a JobSet, a headless Service and pod hostnames."""

PACKED_ROW_MULTIPLE = 128
"""A packed row's length must be a multiple of this. TPU splash attention tiles a row into query and key
blocks that are multiples of 128 (the TPU lane width) and must divide the row; the trainer picks the
largest of 1024/512/256/128 that divides it."""


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


def _cel_list(items: tuple[Any, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" if isinstance(i, str) else str(i) for i in items) + "]"


def _dim(i: int) -> str:
    return f"int(self.topology.split('x')[{i}])"


def _topology_rule(gen: tpu.Generation) -> Rule:
    """GKE's rule for one generation (``tpu.Generation``): its listed shapes, and for 3D generations any
    ``AxBxC`` with A <= B <= C, all multiples of 4, up to ``max_chips`` chips.

    The CEL uses ``split`` (Kubernetes' strings extension); the ``matches`` guard comes first, and CEL's
    ``&&`` is false as soon as one side is, so a 2D topology never reaches the ``int`` calls.
    """
    listed = f"self.topology in {_cel_list(gen.shapes)}"
    if gen.dims == 2:
        message = f"for {gen.accelerator} must be one of {', '.join(gen.shapes)}"
        cel = f"self.accelerator != '{gen.accelerator}' || {listed}"
    else:
        e = tpu.CUBE_EDGE
        message = (
            f"for {gen.accelerator} must be one of {', '.join(gen.shapes)}, or AxBxC with A <= B <= C, "
            f"all multiples of {e}, at most {gen.max_chips} chips"
        )
        cube = " && ".join(
            [
                f"self.topology.matches('{tpu.CUBE_PATTERN}')",
                *(f"{_dim(i)} % {e} == 0" for i in range(3)),
                f"{_dim(0)} <= {_dim(1)}",
                f"{_dim(1)} <= {_dim(2)}",
                f"{_dim(0)} * {_dim(1)} * {_dim(2)} <= {gen.max_chips}",
            ]
        )
        cel = f"self.accelerator != '{gen.accelerator}' || {listed} || ({cube})"
    return Rule(
        scope=("spec", "tpu"),
        field="topology",
        message=message,
        cel=cel,
        check=lambda t, g=gen: t.accelerator != g.accelerator or tpu.topology_ok(g.accelerator, t.topology),
    )


_EIGHT_CHIP = tuple(g.accelerator for g in tpu.GENERATIONS if g.eight_chip_host)
_SINGLE_HOST = tuple(
    sorted({t for g in tpu.GENERATIONS for t in g.shapes if tpu.hosts_per_slice(g.accelerator, t) == 1})
)
"""Single-host topologies at the default chips per host (every shape from one cube up is multi-host)."""
_SINGLE_CHIP = tuple(t for t in _SINGLE_HOST if tpu.chips(t) == 1)


def _chips_per_host_ok(t: Any) -> bool:
    # Stated like the CEL; on valid topologies it equals tpu.allowed_chips_per_host (tests/api/test_tpu.py).
    return (
        t.chipsPerHost is None
        or t.chipsPerHost == (1 if t.topology in _SINGLE_CHIP else 4)
        or (t.chipsPerHost == 8 and t.topology == "2x4" and t.accelerator in _EIGHT_CHIP)
    )


def _multislice_ok(t: Any) -> bool:
    # Stated like the CEL (which cannot multiply topology dimensions); equal to "hosts > 1" on valid slices.
    return t.slices == 1 or (t.topology not in _SINGLE_HOST and t.chipsPerHost != 8)


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
        cel=f"self.backend != 'maxtext' || self.size in {_cel_list(MAXTEXT_SIZES)}",
        check=lambda m: m.backend != "maxtext" or m.size in MAXTEXT_SIZES,
    ),
    *(_topology_rule(g) for g in tpu.GENERATIONS),
    Rule(
        scope=("spec", "tpu"),
        field="chipsPerHost",
        message=f"must match the slice: 1 for topology {' or '.join(_SINGLE_CHIP)}, 8 only for 2x4 on "
        f"{' or '.join(_EIGHT_CHIP)}, else 4",
        cel="!has(self.chipsPerHost) || "
        f"self.chipsPerHost == (self.topology in {_cel_list(_SINGLE_CHIP)} ? 1 : 4) || "
        f"(self.chipsPerHost == 8 && self.topology == '2x4' && self.accelerator in {_cel_list(_EIGHT_CHIP)})",
        check=_chips_per_host_ok,
    ),
    Rule(
        scope=("spec", "tpu"),
        field="slices",
        message="multislice (slices > 1) needs a multi-host slice; "
        f"{', '.join(_SINGLE_HOST)} and 8-chip hosts are single-host",
        cel=f"self.slices == 1 || (!(self.topology in {_cel_list(_SINGLE_HOST)}) && "
        "!(has(self.chipsPerHost) && self.chipsPerHost == 8))",
        check=_multislice_ok,
    ),
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
        cel=f"!(self.port in {_cel_list(RESERVED_TPU_PORTS)})",
        check=lambda m: m.port not in RESERVED_TPU_PORTS,
    ),
)


# --- trainer pod: capacity, env, volumes (rljob/api/pod.py) ----------------------------------------------
def _one_of_cel(var: str, fields: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"has({var}.{f})" for f in fields) + "].exists_one(x, x)"


def _outside(path: str, reserved: str) -> bool:
    return not (path == reserved or path.startswith(reserved + "/") or reserved.startswith(path + "/"))


def _outside_cel(var: str, reserved: str) -> str:
    return (
        f"!({var} == '{reserved}' || {var}.startsWith('{reserved}/') || '{reserved}'.startsWith({var} + '/'))"
    )


_RESERVED_PATHS = (pod.CONFIG_DIR, pod.SHM_DIR)

POD_RULES: tuple[Rule, ...] = (
    Rule(
        scope=("spec", "tpu", "capacity"),
        field="reservation",
        message="is required with type Reservation and only allowed with it (Spot and FlexStart VMs do not "
        "consume reservations)",
        cel="(self.type == 'Reservation') == has(self.reservation)",
        check=lambda c: (c.type == "Reservation") == (c.reservation is not None),
    ),
    Rule(
        scope=("spec", "tpu", "capacity"),
        field="reservationProject",
        message="needs a reservation (it names the project that shares it)",
        cel="!has(self.reservationProject) || has(self.reservation)",
        check=lambda c: c.reservationProject is None or c.reservation is not None,
    ),
    Rule(
        scope=("spec", "tpu", "capacity"),
        field="maxRunDurationSeconds",
        message="is only for type FlexStart",
        cel="!has(self.maxRunDurationSeconds) || self.type == 'FlexStart'",
        check=lambda c: c.maxRunDurationSeconds is None or c.type == "FlexStart",
    ),
    Rule(
        scope=("spec",),
        field="env",
        message="each variable needs exactly one of value and valueFrom, and valueFrom exactly one of "
        "secretKeyRef and configMapKeyRef",
        cel="!has(self.env) || self.env.all(e, has(e.value) != has(e.valueFrom) && "
        "(!has(e.valueFrom) || has(e.valueFrom.secretKeyRef) != has(e.valueFrom.configMapKeyRef)))",
        check=lambda s: all(
            (e.value is None) != (e.valueFrom is None)
            and (
                e.valueFrom is None
                or (e.valueFrom.secretKeyRef is None) != (e.valueFrom.configMapKeyRef is None)
            )
            for e in s.env
        ),
    ),
    Rule(
        scope=("spec",),
        field="env",
        message="variable names must be unique and not the operator's own "
        f"({', '.join(pod.RESERVED_ENV)} or {pod.RESERVED_ENV_PREFIX}*)",
        cel="!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name) && "
        f"!(e.name in {_cel_list(pod.RESERVED_ENV)}) && !e.name.startsWith('{pod.RESERVED_ENV_PREFIX}'))",
        check=lambda s: (
            len({e.name for e in s.env}) == len(s.env)
            and not any(
                e.name in pod.RESERVED_ENV or e.name.startswith(pod.RESERVED_ENV_PREFIX) for e in s.env
            )
        ),
    ),
    Rule(
        scope=("spec",),
        field="volumes",
        message="each volume needs exactly one source "
        f"({', '.join(pod.VOLUME_SOURCES)}) and a unique name other than {' and '.join(pod.RESERVED_VOLUMES)}",
        cel=f"!has(self.volumes) || self.volumes.all(v, {_one_of_cel('v', pod.VOLUME_SOURCES)} && "
        "self.volumes.exists_one(w, w.name == v.name) && "
        f"!(v.name in {_cel_list(pod.RESERVED_VOLUMES)}))",
        check=lambda s: (
            all(sum(getattr(v, f) is not None for f in pod.VOLUME_SOURCES) == 1 for v in s.volumes)
            and len({v.name for v in s.volumes}) == len(s.volumes)
            and not any(v.name in pod.RESERVED_VOLUMES for v in s.volumes)
        ),
    ),
    Rule(
        scope=("spec",),
        field="volumeMounts",
        message="each mount must name a volume of spec.volumes",
        cel="!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
        "self.volumes.exists(v, v.name == m.name))",
        check=lambda s: all(any(v.name == m.name for v in s.volumes) for m in s.volumeMounts),
    ),
    Rule(
        scope=("spec",),
        field="volumeMounts",
        message=f"mount paths must be unique and keep clear of {' and '.join(_RESERVED_PATHS)} "
        "(the trainer's config and shared memory)",
        cel="!has(self.volumeMounts) || "
        "self.volumeMounts.all(m, self.volumeMounts.exists_one(n, n.mountPath == m.mountPath) && "
        + " && ".join(_outside_cel("m.mountPath", r) for r in _RESERVED_PATHS)
        + ")",
        check=lambda s: (
            len({m.mountPath for m in s.volumeMounts}) == len(s.volumeMounts)
            and all(_outside(m.mountPath, r) for m in s.volumeMounts for r in _RESERVED_PATHS)
        ),
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
