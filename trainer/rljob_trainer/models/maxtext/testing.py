"""A tiny random MaxText decoder behind MaxText's Tunix adapter, for tests (MaxText environment only).

Same shape as the Tunix ``tiny`` models (2 layers, dim 64, vocab 256, float32), built the way the
trainer builds it (``maxtext_models``). Like ``packing.testing.tiny_model`` it rescales the embedding so
log-probs are O(1-10) and a 1e-5 tolerance means what it means for the Tunix families.
"""

from __future__ import annotations

from typing import Any

from rljob.api.maxtext import MaxTextSpec
from rljob.api.spec import ModelSpec
from rljob_trainer.models.maxtext import decoders as maxtext_models
from rljob_trainer.packing.testing import PAD_ID

TINY_SPEC = ModelSpec(backend="maxtext", size="tiny", maxtext=MaxTextSpec(modelName="qwen3-0.6b"))


def tiny_maxtext_model(seed: int = 0, max_target_length: int = 64, spec: ModelSpec = TINY_SPEC) -> Any:
    """(adapter model, mesh) for a tiny MaxText decoder with weights from ``seed``."""
    import jax.numpy as jnp

    config = maxtext_models.maxtext_config(spec, max_target_length=max_target_length, seed=seed)
    mesh = maxtext_models.make_mesh(config)
    model = maxtext_models.build_model(config, mesh, pad_id=PAD_ID)
    emb = model.base.token_embedder.embedding
    emb.value = emb.value * (0.1 / jnp.std(emb.value))
    return model, mesh
