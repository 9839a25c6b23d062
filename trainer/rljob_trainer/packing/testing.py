"""Tiny random Tunix models and synthetic GRPO mini-batches for packing tests and the benchmark.

Shapes follow the trainer's ``tiny`` demo size (2 layers, dim 64, vocab 256), in float32 so packed and
unpacked results can be compared to 1e-5. ``tiny_model(family)`` works for every family the trainer
supports; ``random_train_example`` builds a Tunix ``TrainExample`` laid out exactly as
``GRPOLearner._generate_and_compute_advantage`` produces it (left-padded prompts, right-padded
completions, pad id 0).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

FAMILIES = ("qwen3", "qwen2", "llama3", "gemma3")
VOCAB = 256
PAD_ID = 0
EOS_ID = 1

_COMMON = {"num_layers": 2, "embed_dim": 64, "hidden_dim": 128, "num_heads": 4, "head_dim": 16,
           "num_kv_heads": 2}
_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3": ("Qwen3", {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6,
                        "use_tied_embedding": True}),
    "qwen2": ("Qwen2", {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6,
                        "use_tied_embedding": True}),
    "llama3": ("Llama3", {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6,
                          "weight_tying": True}),
    # A short sliding window so local layers' banding is exercised on test-sized rows.
    "gemma3": ("Gemma3", {**_COMMON, "num_embed": VOCAB, "sliding_window_size": 8}),
}


def tiny_model(family: str = "qwen3", seed: int = 0, **overrides: Any) -> Any:
    """A random float32 2-layer Tunix model of ``family`` (overrides go to its ModelConfig)."""
    import jax.numpy as jnp
    from flax import nnx

    cls_name, kwargs = _CONFIGS[family]
    mod = importlib.import_module(f"tunix.models.{family}.model")
    cfg = mod.ModelConfig(**{**kwargs, **overrides})
    if hasattr(cfg, "param_dtype"):
        cfg.param_dtype = jnp.float32
    if hasattr(cfg, "dtype"):
        cfg.dtype = jnp.float32
    model = getattr(mod, cls_name)(cfg, rngs=nnx.Rngs(params=seed))
    # Init scales differ by family (near-uniform logits for some, |logp| ~ 300 for qwen2); fix the
    # embedding's scale so log-probs are O(1-10) and a 1e-5 tolerance means the same for every family.
    emb = model.embedder.input_embedding
    emb.value = emb.value * (0.1 / jnp.std(emb.value))
    return model


def random_train_example(
    prompt_lens: Sequence[int],
    completion_lens: Sequence[int],
    *,
    max_prompt: int,
    max_completion: int,
    seed: int = 0,
    beta: bool = True,
    old_logps: bool = True,
) -> Any:
    """A Tunix ``TrainExample`` with the given lengths and random tokens, advantages and log-probs."""
    import jax.numpy as jnp
    from tunix.rl.common import TrainExample

    rng = np.random.default_rng(seed)
    b = len(prompt_lens)
    prompt = np.full((b, max_prompt), PAD_ID, np.int32)
    completion = np.full((b, max_completion), PAD_ID, np.int32)
    for i, (p, c) in enumerate(zip(prompt_lens, completion_lens, strict=True)):
        if p:
            prompt[i, max_prompt - p :] = rng.integers(2, VOCAB, p)
        if c:
            completion[i, :c] = rng.integers(2, VOCAB, c)
            completion[i, c - 1] = EOS_ID if c < max_completion else completion[i, c - 1]
    c_mask = completion != PAD_ID

    def logps() -> jnp.ndarray:
        return jnp.asarray(np.where(c_mask, -rng.uniform(0.5, 6.0, c_mask.shape), 0.0), jnp.float32)

    return TrainExample(
        prompt_ids=jnp.asarray(prompt),
        prompt_mask=jnp.asarray(prompt != PAD_ID),
        completion_ids=jnp.asarray(completion),
        completion_mask=jnp.asarray(c_mask),
        advantages=jnp.asarray(rng.normal(size=b), jnp.float32),
        ref_per_token_logps=logps() if beta else None,
        old_per_token_logps=logps() if old_logps else None,
    )


def grpo_config(**overrides: Any) -> Any:
    """A Tunix ``GRPOConfig`` with the attributes the learner sets at runtime (temperature)."""
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    cfg = GRPOConfig(num_generations=2, beta=0.04, epsilon=0.2, **overrides)
    cfg.temperature = 0.9
    return cfg
