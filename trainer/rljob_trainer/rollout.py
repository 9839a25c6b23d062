"""Rollout engines: ``vanilla`` (Tunix's JAX sampler, any backend) and ``vllm`` (Tunix's vLLM rollout on TPU).

The vLLM engine settings rljob controls are built in one place, ``vllm_engine_kwargs``, in vLLM's own
``EngineArgs`` names, so a test can pin them without vLLM installed. ``block_size`` is only present when
``spec.rollout.vllmBlockSize`` is set: vLLM's default is None (the backend derives the page size from the
engine shape), and passing any value would pin it for everyone.

No Tunix import here: ``tunix_bridge`` maps these onto Tunix's RolloutConfig.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rljob.api.spec import RLJobSpec
from rljob_trainer.models import families as models

VANILLA = "vanilla"
VLLM = "vllm"


def engine_name(spec: RLJobSpec) -> str:
    """The Tunix rollout_engine string."""
    return spec.rollout.engine


def model_dtype_name(spec: RLJobSpec) -> str:
    """Weights dtype: float32 for the tiny CPU model, bfloat16 for real checkpoints."""
    return "float32" if models.is_tiny(spec.model) else "bfloat16"


def vllm_engine_kwargs(spec: RLJobSpec) -> dict[str, Any]:
    """vLLM ``EngineArgs`` that rljob sets: memory fraction, dtype and (only when set) the KV block size."""
    kwargs: dict[str, Any] = {
        "gpu_memory_utilization": spec.rollout.hbmUtilization,
        "dtype": model_dtype_name(spec),
    }
    if spec.rollout.vllmBlockSize is not None:
        kwargs["block_size"] = spec.rollout.vllmBlockSize
    return kwargs


def check_rollout_spec(spec: RLJobSpec) -> list[str]:
    """Startup problems with spec.rollout that no retry can fix, as ``path: message`` lines.

    Pure Python (the backend check is separate, see ``check_backend``).
    """
    if spec.rollout.engine != VLLM:
        return []
    errors = []
    if models.is_tiny(spec.model):
        errors.append(
            "spec.rollout.engine: vllm needs a real model size with spec.model.checkpointPath "
            "(vLLM reads the model config from it); use vanilla for size tiny"
        )
    if importlib.util.find_spec("vllm") is None:
        errors.append(
            "spec.rollout.engine: vllm is not installed here; use engine vanilla, or a TPU image with "
            "vllm-tpu==0.25.0 and tpu-inference==0.25.0 (they pin qwix==0.1.2: install with that "
            "override, see docs/trainer.md, 'The TPU image')"
        )
    return errors


def check_backend(spec: RLJobSpec, backend: str) -> list[str]:
    """Tunix's vLLM rollout syncs weights through TPU-worker APIs: it only works on the TPU backend."""
    if spec.rollout.engine == VLLM and backend != "tpu":
        return [f"spec.rollout.engine: vllm runs only on TPU (this host's JAX backend is {backend})"]
    return []
