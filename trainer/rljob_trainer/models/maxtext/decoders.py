"""spec.model with ``backend: maxtext`` -> MaxText decoders wrapped in MaxText's Tunix adapter.

MaxText (PyPI ``maxtext``, Python >= 3.12) lives in its own environment (``.venv-maxtext``, built by
``hack/venv-maxtext.sh``; versions in docs/maxtext.md). This module is imported only when
``spec.model.backend == "maxtext"``: importing MaxText's adapter replaces ``jax.lax.with_sharding_constraint``
and ``jax.lax.top_k`` process-wide, which the Tunix-native path must never see
(``tests/maxtext_backend/test_backend_isolation.py``).

Why the adapter: ``TunixMaxTextAdapter`` gives a MaxText ``Transformer`` Tunix's call signature and
passes Tunix's ``segment_ids`` straight to MaxText's ``decoder_segment_ids``, so packed rows are masked
by MaxText's own segment-aware attention (``dot_product`` on CPU, splash on TPU), and it carries the
MaxText -> Hugging Face weight mappings Tunix's vLLM rollout uses for weight sync.

``check_overrides`` is pure Python apart from reading MaxText's config field names, so a bad key exits
2 before any model is built.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from rljob.api import RLJobError
from rljob.api.spec import ModelSpec
from rljob_trainer.workload import sources, task

# The tiny demo decoder (2 layers, dim 64, 4 heads x 16, 2 KV heads, vocab 256, float32), as MaxText
# overrides of the named model's architecture. The named model still picks the decoder block (qwen3,
# llama3, ...) and the adapter's weight mappings.
TINY_OVERRIDES: dict[str, Any] = {
    "base_emb_dim": 64,
    "base_num_query_heads": 4,
    "base_num_kv_heads": 2,
    "head_dim": 16,
    "base_mlp_dim": 128,
    "base_num_decoder_layers": 2,
    "vocab_size": task.VOCAB_SIZE,  # the built-in tokenizer's
    # Untied output head: with MaxText's tied embedding a random tiny decoder predicts its own input token
    # (a rollout of "emit a:" is ":::::"), so every completion scores 0 and GRPO has no signal.
    "logits_via_embedding": False,
    "dtype": "float32",
    "weight_dtype": "float32",
    "matmul_precision": "highest",
}

# Set by rljob, not by users: the trainer owns these (distributed init, checkpoints, lengths, seeds).
RESERVED_OVERRIDES = frozenset(
    {
        "model_name",
        "load_parameters_path",
        "max_target_length",
        "max_prefill_predict_length",
        "init_weights_seed",
        "skip_jax_distributed_system",
        "enable_checkpointing",
        "run_name",
        "base_output_directory",
        "override_model_config",
    }
)


def config_fields() -> frozenset[str]:
    """Every MaxText config key (the fields of MaxText's pydantic ``MaxTextConfig``)."""
    from maxtext.configs import types

    return frozenset(types.MaxTextConfig.model_fields)


def check_overrides(model: ModelSpec, known: frozenset[str] | None = None) -> list[str]:
    """``path: message`` lines for override keys MaxText does not know or rljob sets itself."""
    if model.maxtext is None:
        return []
    known = config_fields() if known is None else known
    errors = []
    for key in sorted(model.maxtext.overrides):
        path = f"spec.model.maxtext.overrides.{key}"
        if key in RESERVED_OVERRIDES:
            errors.append(f"{path}: set by rljob from the RLJob spec; remove it")
        elif key not in known:
            errors.append(f"{path}: not a MaxText config key (maxtext.configs.types.MaxTextConfig)")
    return errors


def maxtext_config(model: ModelSpec, *, max_target_length: int, seed: int) -> Any:
    """MaxText's ``HyperParameters`` for spec.model: base.yml, the named model, then overrides."""
    from maxtext.configs import pyconfig

    assert model.maxtext is not None  # the API requires it for backend maxtext
    kwargs: dict[str, Any] = {
        "model_name": model.maxtext.modelName,
        "max_target_length": max_target_length,
        "init_weights_seed": seed,
        "skip_jax_distributed_system": True,  # rljob_trainer.run.distributed initialises JAX
        "enable_checkpointing": False,  # rljob_trainer.run.checkpoint owns checkpoints
        "run_name": "rljob",
        "scan_layers": False,  # per-layer parameters, as the adapter's weight mappings expect
    }
    if model.size == "tiny":
        kwargs.update(TINY_OVERRIDES, override_model_config=True)
    if model.checkpointPath is not None:
        kwargs["load_parameters_path"] = model.checkpointPath
    kwargs.update(model.maxtext.overrides)
    base = os.path.join(os.path.dirname(pyconfig.__file__), "base.yml")
    try:
        return pyconfig.initialize(["rljob", base], **kwargs)
    except ValueError as exc:  # pydantic's ValidationError too: a value MaxText refuses is a config error
        raise RLJobError(
            [f"spec.model.maxtext.overrides: MaxText refuses the config: {str(exc)[:400]}"]
        ) from None


def flops_config(config: Any) -> Any:
    """MaxText's config under the Tunix ModelConfig names ``flops.shape_of`` reads (the metrics' FLOPs per
    token). MaxText counts a dense MLP as one expert; its routed experts are ``moe_mlp_dim`` wide."""
    moe = config.num_experts > 1
    return SimpleNamespace(
        num_layers=config.num_decoder_layers,
        embed_dim=config.emb_dim,
        hidden_dim=config.moe_mlp_dim if moe else config.mlp_dim,
        num_heads=config.num_query_heads,
        head_dim=config.head_dim,
        num_kv_heads=config.num_kv_heads,
        vocab_size=config.vocab_size,
        num_experts=config.num_experts if moe else 0,
        num_experts_per_tok=config.num_experts_per_tok if moe else 0,
    )


def make_mesh(config: Any) -> Any:
    """MaxText's device mesh for ``config`` (its own axis names; every role shares it)."""
    import jax
    from maxtext.utils import maxtext_utils

    return maxtext_utils.get_mesh_from_config(config, jax.devices())


def build_model(config: Any, mesh: Any, pad_id: int) -> Any:
    """A MaxText decoder wrapped in ``TunixMaxTextAdapter``: random from ``init_weights_seed``, or the
    parameters at ``load_parameters_path``. Same config twice gives identical weights (reference model).
    MaxText reads a ``gs://`` path itself through Orbax (gcsfs + TensorStore); against a GCS emulator
    TensorStore must be pointed at it, as for rljob's own checkpoints (without: the read hangs retrying).
    """
    from maxtext.utils import model_creation_utils

    if sources.kind(str(config.load_parameters_path or "")) == "gs":
        sources.point_tensorstore_at_emulator()
    return model_creation_utils.from_pretrained(
        config, mesh=mesh, wrap_with_tunix_adapter=True, tokenizer_pad_id=pad_id
    )


def is_maxtext_model(model: Any) -> bool:
    """True for a model wrapped in MaxText's Tunix adapter (checked by module, without importing it)."""
    return type(model).__module__.startswith("maxtext.")
