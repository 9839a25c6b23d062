"""Model family + size -> a Tunix model (and its tokenizer).

``tiny`` is a random 2-layer, dim-64, vocab-256 model built from a named small config, so demos and
tests run offline on CPU with the built-in tokenizer. Every other size is one of Tunix's named configs
and loads its weights from ``spec.model.checkpointPath`` (a safetensors directory, as published on
the Hugging Face hub) through Tunix's loaders.

``check_model_spec`` is pure Python (no JAX import) so a bad config fails in well under a second with
the field named, before any accelerator is touched.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from rljob.api.spec import ModelSpec
from rljob_trainer import task

TINY = "tiny"


@dataclass(frozen=True)
class Family:
    """Where a model family lives in Tunix and which named configs it offers."""

    module: str  # tunix.models.<family>.model
    model_class: str
    params_module: str  # module with create_model_from_safe_tensors
    sizes: dict[str, str]  # spec.model.size -> ModelConfig classmethod
    tiny: dict[str, Any]  # ModelConfig kwargs of the random demo model


_TINY_COMMON = {
    "num_layers": 2,
    "embed_dim": 64,
    "hidden_dim": 128,
    "num_heads": 4,
    "head_dim": 16,
    "num_kv_heads": 2,
}

# Qwen2 and Qwen3 configs take the same keyword arguments for the tiny model.
_TINY_QWEN = {
    **_TINY_COMMON,
    "vocab_size": task.VOCAB_SIZE,
    "rope_theta": 10_000,
    "norm_eps": 1e-6,
    "use_tied_embedding": True,
}

FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        module="tunix.models.qwen3.model",
        model_class="Qwen3",
        params_module="tunix.models.qwen3.params",
        sizes={
            "0.6b": "qwen3_0p6b",
            "1.7b": "qwen3_1p7b",
            "4b": "qwen3_4b",
            "8b": "qwen3_8b",
            "14b": "qwen3_14b",
            "30b-a3b": "qwen3_30b_a3b",
            "32b": "qwen3_32b",
        },
        tiny=_TINY_QWEN,
    ),
    "qwen2": Family(
        module="tunix.models.qwen2.model",
        model_class="Qwen2",
        params_module="tunix.models.qwen2.params",
        sizes={"0.5b": "qwen2p5_0p5b", "1.5b": "qwen2p5_1p5b", "3b": "qwen2p5_3b", "7b": "qwen2p5_7b"},
        tiny=_TINY_QWEN,
    ),
    "llama3": Family(
        module="tunix.models.llama3.model",
        model_class="Llama3",
        params_module="tunix.models.llama3.params",
        sizes={
            "1b": "llama3p2_1b",
            "3b": "llama3p2_3b",
            "8b": "llama3p1_8b",
            "70b": "llama3p1_70b",
            "405b": "llama3p1_405b",
        },
        tiny={
            **_TINY_COMMON,
            "vocab_size": task.VOCAB_SIZE,
            "rope_theta": 10_000,
            "norm_eps": 1e-6,
            "weight_tying": True,
        },
    ),
    "gemma3": Family(
        module="tunix.models.gemma3.model",
        model_class="Gemma3",
        params_module="tunix.models.gemma3.params_safetensors",
        sizes={
            "270m": "gemma3_270m",
            "1b": "gemma3_1b_pt",
            "4b": "gemma3_4b_pt",
            "12b": "gemma3_12b_pt",
            "27b": "gemma3_27b_pt",
        },
        tiny={**_TINY_COMMON, "num_embed": task.VOCAB_SIZE, "sliding_window_size": 512},
    ),
}


def check_model_spec(model: ModelSpec) -> list[str]:
    """Every problem with spec.model, as ``path: message`` lines (empty when it can be built)."""
    family = FAMILIES.get(model.family)
    if family is None:
        return [f"spec.model.family: unknown family {model.family!r}; known: {', '.join(FAMILIES)}"]
    errors = []
    if model.size != TINY and model.size not in family.sizes:
        known = ", ".join([TINY, *family.sizes])
        errors.append(
            f"spec.model.size: unknown size {model.size!r} for family {model.family}; known: {known}"
        )
        return errors
    if model.size == TINY:
        if model.checkpointPath is not None:
            errors.append(
                "spec.model.checkpointPath: size tiny is a random model; unset checkpointPath or "
                "pick a real size"
            )
        if model.tokenizerPath is not None:
            errors.append(
                "spec.model.tokenizerPath: size tiny uses the built-in 256-token tokenizer; unset it"
            )
        return errors
    if model.checkpointPath is None:
        errors.append(
            f"spec.model.checkpointPath: required for size {model.size} (only size tiny starts from "
            "random weights)"
        )
    elif "://" not in model.checkpointPath:  # local: check now; remote (gs://) is checked by the loader
        path = model.checkpointPath
        if not os.path.isdir(path):
            errors.append(f"spec.model.checkpointPath: {path} is not a directory")
        elif not any(name.endswith(".safetensors") for name in os.listdir(path)):
            errors.append(f"spec.model.checkpointPath: no *.safetensors files in {path}")
    return errors


def is_tiny(model: ModelSpec) -> bool:
    return model.size == TINY


def model_config(model: ModelSpec) -> Any:
    """The Tunix ModelConfig of spec.model (a named config, or the tiny demo config)."""
    family = FAMILIES[model.family]
    config_cls = importlib.import_module(family.module).ModelConfig
    if model.size == TINY:
        import jax.numpy as jnp

        kwargs = dict(family.tiny)
        if "param_dtype" in config_cls.__dataclass_fields__:  # gemma3 defaults to bfloat16; the demo is fp32
            kwargs["param_dtype"] = jnp.float32
        return config_cls(**kwargs)
    return getattr(config_cls, family.sizes[model.size])()


def build_model(model: ModelSpec, mesh: Any, seed: int) -> Any:
    """A fresh Tunix model: random from ``seed`` for tiny, else the checkpoint's weights.

    Called once per role (actor, reference): for tiny the same seed gives identical weights, which is
    what GRPO's reference model must start as.
    """
    from flax import nnx

    family = FAMILIES[model.family]
    config = model_config(model)
    if model.size == TINY:
        model_cls = getattr(importlib.import_module(family.module), family.model_class)
        with mesh:
            return model_cls(config, rngs=nnx.Rngs(params=seed))
    import jax.numpy as jnp

    loader = importlib.import_module(family.params_module)
    return loader.create_model_from_safe_tensors(model.checkpointPath, config, mesh=mesh, dtype=jnp.bfloat16)


def build_tokenizer(model: ModelSpec) -> Any:
    """The built-in tokenizer for tiny; otherwise the Hugging Face tokenizer next to the weights."""
    if model.size == TINY:
        return task.CharTokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model.tokenizerPath or model.checkpointPath)


def vllm_model_path(model: ModelSpec) -> str:
    """What vLLM loads its config (and, with random init, only its config) from."""
    return model.checkpointPath or ""
