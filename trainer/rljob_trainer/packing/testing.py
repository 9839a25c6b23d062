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
# The project's own forward (blocked and dense attention) on each family it covers, tied and untied heads.
FORWARD_CASES = [  # family, attention, config overrides
    ("qwen3", "blocked", {}),
    ("qwen3", "dense", {"use_tied_embedding": False}),
    ("qwen2", "blocked", {"use_tied_embedding": False}),
    ("qwen2", "dense", {}),
    ("llama3", "blocked", {"weight_tying": False}),
    ("llama3", "dense", {}),
]

_COMMON = {
    "num_layers": 2,
    "embed_dim": 64,
    "hidden_dim": 128,
    "num_heads": 4,
    "head_dim": 16,
    "num_kv_heads": 2,
}
_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3": (
        "Qwen3",
        {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6, "use_tied_embedding": True},
    ),
    "qwen2": (
        "Qwen2",
        {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6, "use_tied_embedding": True},
    ),
    "llama3": (
        "Llama3",
        {**_COMMON, "vocab_size": VOCAB, "rope_theta": 10_000, "norm_eps": 1e-6, "weight_tying": True},
    ),
    # A short sliding window so local layers' banding is exercised on test-sized rows.
    "gemma3": ("Gemma3", {**_COMMON, "num_embed": VOCAB, "sliding_window_size": 8}),
}


def tiny_model(family: str = "qwen3", seed: int = 0, dtype: Any = None, **overrides: Any) -> Any:
    """A random 2-layer Tunix model of ``family`` (overrides go to its ModelConfig): float32, or with
    ``dtype`` its parameters in ``dtype`` and computing in it (as ``families.computing_in`` makes a model
    loaded from a named size's checkpoint)."""
    import jax
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
    if dtype is not None:
        graph, state = nnx.split(model)
        if hasattr(cfg, "dtype"):  # the layers read it at construction: rebuild the graph computing in dtype
            cfg.dtype = dtype
            graph, _ = nnx.split(getattr(mod, cls_name)(cfg, rngs=nnx.Rngs(params=seed)))
        model = nnx.merge(graph, jax.tree.map(lambda x: x.astype(dtype), state))
    # Init scales differ by family (near-uniform logits for some, |logp| ~ 300 for qwen2); fix the
    # embedding's scale so log-probs are O(1-10) and a 1e-5 tolerance means the same for every family.
    emb = model.embedder.input_embedding
    emb.value = emb.value * (0.1 / jnp.std(emb.value))
    _draw_zero_params(model, seed)
    return model


def _draw_zero_params(model: Any, seed: int) -> None:
    """Every parameter Tunix initialises to zeros drawn at random instead, in place.

    Why: Tunix zero-initialises every MLP projection (and qwen2's attention biases, gemma3's norm
    scales). At zero the MLP outputs 0 and gets no gradient, so a test could not tell whether it ran,
    or at which tokens. Kernels are drawn at ``1/sqrt(fan_in)`` (their first axis is the input), the
    rest at 0.1, so each such parameter moves the output by as much as the others do.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    state = nnx.state(model, nnx.Param)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(seed), len(leaves))

    def draw(key: Any, value: Any) -> Any:
        if bool(jnp.any(value != 0)):
            return value
        scale = value.shape[0] ** -0.5 if value.ndim >= 2 else 0.1
        return (scale * jax.random.normal(key, value.shape, jnp.float32)).astype(value.dtype)

    nnx.update(model, jax.tree.unflatten(treedef, [draw(k, v) for k, v in zip(keys, leaves, strict=True)]))


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


class TinyTokenizer:
    """Byte tokenizer with Tunix's duck-typed interface; ids 0/1/2 are pad/EOS/BOS."""

    def encode(self, text: str, **_: Any) -> list[int]:
        return [3 + (ord(c) % (VOCAB - 3)) for c in text]

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(chr(32 + (i % 90)) for i in np.asarray(ids).reshape(-1).tolist() if i > 2)

    def bos_id(self) -> int:
        return 2

    def eos_id(self) -> int:
        return EOS_ID

    def pad_id(self) -> int:
        return PAD_ID


def tiny_cluster(
    family: str = "qwen3",
    *,
    max_prompt: int,
    max_completion: int,
    mini_batch: int | None = None,
    micro_batch: int | None = None,
    beta: float = 0.0,
    optimizer: Any = None,
    seed: int = 0,
    max_steps: int = 100,
    **model_overrides: Any,
) -> Any:
    """A Tunix ``RLCluster`` on CPU with a tiny model and the vanilla rollout (actor = rollout weights).

    Follows the recipe in ``shared/reference/packing.md``: a plain ``Mesh``, the pad id among the EOS
    ids, a fixed rollout seed. ``optimizer`` defaults to SGD so packed/unpacked parameter comparisons
    are not distorted by Adam's normalisation of near-zero gradients. ``model_overrides`` go to
    ``tiny_model`` (e.g. a larger ``vocab_size``).
    """
    import jax
    import optax
    from flax import nnx
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout

    Role = rl_cluster_lib.Role
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def on_mesh(model: Any) -> Any:
        # Already on the cluster's mesh, so RLCluster does not reshard (and donate) the weights the
        # vanilla sampler has captured.
        nnx.update(model, jax.device_put(nnx.state(model), replicated))
        return model

    actor = on_mesh(tiny_model(family, seed=seed, **model_overrides))
    reference = on_mesh(tiny_model(family, seed=seed, **model_overrides)) if beta else None
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer or optax.sgd(1e-2),
        eval_every_n_steps=1_000_000_000,
        max_steps=max_steps,
        mini_batch_size=mini_batch,
        train_micro_batch_size=micro_batch,
        pbar_description=None,
    )
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=max_completion,
        max_prompt_length=max_prompt,
        kv_cache_size=max_prompt + max_completion,
        temperature=0.9,
        top_p=1.0,
        top_k=None,
        eos_tokens=[EOS_ID, PAD_ID],
        seed=seed,  # an int: a key array would be donated by the first generate call
    )
    config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={Role.ACTOR: mesh, Role.REFERENCE: mesh, Role.ROLLOUT: mesh},
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=training,
        rollout_config=rollout,
    )
    return rl_cluster_lib.RLCluster(
        actor=actor, reference=reference, tokenizer=TinyTokenizer(), cluster_config=config
    )


def length_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """A deterministic reward that varies across a group: shorter completions score higher."""
    return [1.0 / (1 + len(c)) + 0.01 * (sum(map(ord, c)) % 7) for c in completions]
