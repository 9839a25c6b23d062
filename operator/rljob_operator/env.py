"""Environment of the trainer container: identity from the downward API plus a few RLJob facts.

What is deliberately absent: ``TPU_WORKER_ID`` / ``TPU_WORKER_HOSTNAMES`` (GKE's webhook injects them for
Indexed Jobs that request ``google.com/tpu``, and ``jax.distributed.initialize()`` reads them) and
``JAX_COORDINATOR_ADDRESS`` (must not be set on TPU). Everything else the trainer needs is in its config
file, so the env stays small and never disagrees with it.
"""

from __future__ import annotations

from typing import Any

from rljob.api.pod import VLLM_ENV
from rljob.api.spec import RLJob
from rljob_operator import names
from rljob_operator.slices import SliceShape

_DOWNWARD_LABELS: tuple[tuple[str, str], ...] = (
    ("JOBSET_NAME", names.JOBSET_NAME_LABEL),
    ("REPLICATED_JOB_NAME", names.REPLICATED_JOB_LABEL),
    ("JOB_INDEX", names.JOB_INDEX_LABEL),
    ("POD_INDEX", names.COMPLETION_INDEX_LABEL),
)


def _from_label(name: str, label: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def _value(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def trainer_env(job: RLJob, shape: SliceShape) -> list[dict[str, Any]]:
    """The container's env list, in a fixed order (goldens and diffs stay stable): identity, RLJob facts,
    engine settings, then ``spec.env``."""
    env = [_from_label(n, label) for n, label in _DOWNWARD_LABELS]
    env += [
        _value("RLJOB_NAME", job.metadata.name),
        _value("RLJOB_CONFIG", names.CONFIG_PATH),
        _value("RLJOB_METRICS_PORT", job.spec.metrics.port),
        _value("RLJOB_NUM_SLICES", shape.slices),
        _value("RLJOB_HOSTS_PER_SLICE", shape.hosts),
        _value("RLJOB_CHIPS_PER_HOST", shape.chips_per_host),
    ]
    if job.spec.rollout.engine == "vllm":
        # vLLM in the trainer's process (Tunix's vllm rollout): JAX must keep a CPU backend for host-side
        # arrays, and vLLM must not fork engine processes that would each try to grab the TPU.
        env += [_value(name, value) for name, value in VLLM_ENV.items()]
    # the user's last (``spec.env``): the API refuses names that clash with the ones above (pod.RESERVED_ENV,
    # RESERVED_ENV_PREFIXES, VLLM_ENV with this engine; tests/operator/test_render.py checks every engine)
    env += [e.model_dump(mode="json", exclude_none=True) for e in job.spec.env]
    return env
