"""Cross-field rules of the trainer pod's fields (``pod.py``: capacity, env, volumes), in Python and CEL
side by side; ``rules.py`` gathers them with the others.
"""

from __future__ import annotations

from rljob.api import pod
from rljob.api.rule import Rule, cel_list


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
        message=f"with rollout.engine vllm the operator sets {' and '.join(pod.VLLM_ENV)}: not in spec.env",
        cel=f"self.rollout.engine != 'vllm' || !has(self.env) || self.env.all(e, !(e.name in {cel_list(list(pod.VLLM_ENV))}))",
        check=lambda s: s.rollout.engine != "vllm" or not any(e.name in pod.VLLM_ENV for e in s.env),
    ),
    Rule(
        scope=("spec",),
        field="env",
        message="variable names must be unique and not ones the operator, JobSet or GKE set "
        f"({', '.join(pod.RESERVED_ENV)} or {' or '.join(p + '*' for p in pod.RESERVED_ENV_PREFIXES)})",
        cel="!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name) && "
        f"!(e.name in {cel_list(pod.RESERVED_ENV)}) && "
        + " && ".join(f"!e.name.startsWith('{p}')" for p in pod.RESERVED_ENV_PREFIXES)
        + ")",
        check=lambda s: (
            len({e.name for e in s.env}) == len(s.env)
            and not any(
                e.name in pod.RESERVED_ENV or e.name.startswith(pod.RESERVED_ENV_PREFIXES) for e in s.env
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
        f"!(v.name in {cel_list(pod.RESERVED_VOLUMES)}))",
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
