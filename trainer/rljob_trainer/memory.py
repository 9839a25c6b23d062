"""Memory levers on Tunix's RL cluster that change no number (measured in ``bench/memory.py``).

* ``drop_anchor_copy``: Tunix 0.1.7's ``RLCluster`` keeps ``_anchor_policy_state``, a full copy of the
  actor's state on ``pinned_host`` memory, made at start and after every weight sync. Only the agentic
  learner reads it (``get_actor_per_token_logps``); GRPO's old log-probs come from the rollout model or,
  with one iteration, are the current ones under ``stop_gradient``. On a CPU host (and on a TPU host's
  RAM) the copy is one more policy: 4 bytes per parameter in float32.
* ``donate_model_in_train_step``: Tunix jits the train step with only the optimizer donated, so the
  update writes new parameters beside the old ones (one more policy at the step's peak). Donating the
  model too lets XLA update them in place. Safe here because nothing keeps the old arrays: the vanilla
  rollout reads the actor's own variables, and the anchor copy is gone.
* ``shard_optimizer_in_place`` (used by the above): Tunix's ``PeftTrainer._shard_optimizer`` runs
  ``jax.lax.with_sharding_constraint`` on the whole optimizer state outside jit before the first step;
  under a mesh that is a jitted identity per leaf, which writes a NEW copy of every leaf while the old
  ones are still held: one more optimizer state at the first train step (4.44 GiB for Qwen3-0.6B with
  Tunix's ``MultiSteps`` accumulator; docs/trainer.md, "Memory").
  ``jax.device_put`` to the same shardings, one leaf at a time with the leaf donated, gives the same
  shardings (so the step still compiles once) without the copy: zero-copy where the sharding is
  equivalent, and at most one leaf in flight where it is not.

* ``token_budget``: the token budget per chip of one actor-side pass (``spec.grpo.maxTokensPerTpu``),
  unset chosen from the chip's free HBM once the training state exists (``packing.accumulate``).
* ``rollout_prompts``: prompts per call of the JAX sampler, so its KV cache fits beside the training
  state (Tunix's ``rollout_micro_batch_size``; the same tokens, drawn in several calls).

Imports JAX, Flax and Tunix: only from ``tunix_bridge``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.interpreters import pxla

log = logging.getLogger(__name__)

# Share of the free HBM the automatic token budget plans for; the rest is left to XLA's temporaries
# that the estimate below does not count (the vocabulary head's chunks, the optimizer update).
BUDGET_SHARE = 0.5
# Share of the free HBM one sampler call may take at its peak: its KV cache and the decode program's
# temporaries beside it. With the caches in ``decode.KV_LAYOUT`` 0.8 gives the v5e example 8 prompts (64
# sequences) a call: the chip ran it at 11.65 GiB of the runtime's peak (docs/tpu.md, 2026-12-06 19:00).
ROLLOUT_SHARE = 0.8
# The decode program's temporaries, in KV caches of its call, with Tunix's cache layout: about one more.
# On one v5e chip (2026-12-06) loading that decode loop for 64 sequences x 1,024 positions of Qwen3-0.6B
# (a 7.0 GiB cache) asked for 7.26 GiB more while the cache was held, and failed with 4.31 GiB free; XLA
# copied every layer's cache into the order its attention reads (compiled offline for 32 sequences:
# 3.24 GiB of temporaries beside a 3.5 GiB cache, bench/results/tpu-aot.json).
DECODE_TEMPORARY_CACHES = 1.0
# The same with the caches in ``decode.KV_LAYOUT`` (no copies): 0.29 GiB beside the 3.5 GiB cache compiled
# offline (0.08), rounded up; at it the chip loaded and ran the 64-sequence call above.
KV_LAYOUT_TEMPORARY_CACHES = 0.1
# The packed passes' layers in one scan (``packing.stack.scans()``, a TPU's default) hold more than the
# unrolled stack, growing with the depth: compiled for v5e (bench/tpu_aot.py train, Qwen3-0.6B at 4 and 8
# layers, one and two rows of 8,192; bench/results/tpu-aot.json, 2026-12-06 23:00) the temporaries grow by
# ~76 MB a layer plus ~8.7 KB a token a layer (unrolled: ~11 MB a layer in all). By the sizes, the stacked
# weights' float32 gradient (4 bytes a parameter) and two float32 ``[tokens, D]`` a layer. Planned as 6
# bytes a layer parameter and two float32 vectors of the model width a token a layer (upper estimates).
SCAN_BYTES_PER_LAYER_PARAMETER = 6
SCAN_VECTORS_PER_LAYER_TOKEN = 2


def drop_anchor_copy(cluster: Any) -> None:
    """Free the anchor copy now and after every weight sync (GRPO never reads it)."""
    cluster._anchor_policy_state = None
    sync = cluster.sync_weights

    @functools.wraps(sync)
    def sync_weights(*args: Any, **kwargs: Any) -> Any:
        out = sync(*args, **kwargs)
        cluster._anchor_policy_state = None
        return out

    cluster.sync_weights = sync_weights


def donate_model_in_train_step(trainer: Any) -> None:
    """Make ``trainer`` (a Tunix ``PeftTrainer``) jit its train step with model AND optimizer donated.

    Mirrors ``PeftTrainer.jit_train_and_eval_step`` of Tunix 0.1.7 except for ``donate_argnames``.
    """
    original = trainer.jit_train_and_eval_step

    def jit_train_and_eval_step(skip_jit: bool = False, cache_nnx_graph: bool = False) -> tuple[Any, Any]:
        if skip_jit:
            return original(skip_jit, cache_nnx_graph)
        if trainer._jitted_train_step_fn is None:
            shard_optimizer_in_place(trainer, pxla.thread_resources.env.physical_mesh)
            train = nnx.jit(trainer.create_train_step_fn(), donate_argnames=("model", "optimizer"))
            evaluate = nnx.jit(trainer.create_eval_step_fn())
            if cache_nnx_graph:
                bind: Any = lambda f, *a: functools.partial(nnx.cached_partial(f, *a))  # noqa: E731
            else:
                bind = functools.partial
            trainer._jitted_train_step_fn = bind(train, trainer.model, trainer.optimizer)
            trainer._jitted_eval_step_fn = bind(evaluate, trainer.model)
        return trainer._jitted_train_step_fn, trainer._jitted_eval_step_fn

    trainer.jit_train_and_eval_step = jit_train_and_eval_step


def shard_optimizer_in_place(trainer: Any, mesh: jax.sharding.Mesh) -> None:
    """Tunix's ``PeftTrainer._shard_optimizer`` (the optimizer state on its partition specs, so the train
    step compiles once) without its copy of the whole state: leaf by leaf, donated."""
    if mesh.empty:
        return
    state = nnx.state(trainer.optimizer, nnx.optimizer.OptState)
    pspecs = nnx.get_partition_spec(state)

    def place(leaf: Any, spec: Any) -> Any:
        target = jax.sharding.NamedSharding(mesh, spec)
        if not isinstance(leaf, jax.Array) or leaf.sharding == target:
            return leaf
        return jax.device_put(leaf, target, donate=True)

    nnx.update(trainer.optimizer, jax.tree.map(place, state, pspecs))


def free_hbm_bytes() -> int | None:
    """Bytes the first local device can still allocate, or None where the backend reports no memory
    statistics (CPU)."""
    stats = jax.local_devices()[0].memory_stats()
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats["bytes_in_use"])


def hbm_usage() -> tuple[int, int] | None:
    """(bytes in use, peak bytes in use) of the first local device, or None without memory statistics
    (CPU): ``StepRecorder.memory_probe``, read at the end of every phase."""
    stats = jax.local_devices()[0].memory_stats()
    if not stats or "bytes_in_use" not in stats:
        return None
    return int(stats["bytes_in_use"]), int(stats.get("peak_bytes_in_use", stats["bytes_in_use"]))


def bytes_per_token(config: Any) -> int | None:
    """Estimated device bytes one token of the train pass holds (None if the config does not say).

    Each layer's input kept for the rematerialised backward (``layers x D``) and one layer's working
    set, forward and backward (projections ``~4 D``, MLP ``3 F``, twice), all float32 at worst: an upper
    estimate, checked against the chip's measured peaks in docs/tpu.md.
    """
    layers, d, f = (getattr(config, k, None) for k in ("num_layers", "embed_dim", "hidden_dim"))
    if not (layers and d and f):
        return None
    return 4 * (layers * d + 2 * 2 * (3 * f + 4 * d))


def token_budget(requested: int | None, model: Any, scan: bool = False) -> int | None:
    """``requested`` (``spec.grpo.maxTokensPerTpu``), else ``BUDGET_SHARE`` of the free HBM over
    ``bytes_per_token``; None (one pass over a whole micro-batch) where neither is known. ``scan``: the
    packed passes run the layers in one scan, which holds ``SCAN_BYTES_PER_LAYER_PARAMETER`` a layer
    parameter (taken from the free HBM first) and ``SCAN_VECTORS_PER_LAYER_TOKEN`` more a token."""
    if requested:
        return requested
    config = getattr(model, "config", None)
    free, per_token = free_hbm_bytes(), bytes_per_token(config)
    if free is None or per_token is None:
        return None
    if scan:
        layers = nnx.state(model.layers, nnx.Param)
        free -= SCAN_BYTES_PER_LAYER_PARAMETER * sum(x.size for x in jax.tree.leaves(layers))
        per_token += SCAN_VECTORS_PER_LAYER_TOKEN * 4 * config.embed_dim * config.num_layers
    budget = max(256, int(BUDGET_SHARE * free) // per_token)
    log.info(
        "token budget: %d tokens per chip per pass (%.2f GiB free after the training state%s, ~%d KiB a token)",
        budget,
        free / 2**30,
        ", less the layer scan's share per layer" if scan else "",
        per_token // 1024,
    )
    return budget


def kv_bytes_per_sequence(config: Any, tokens: int, dtype_bytes: int = 2) -> int | None:
    """The sampler's KV cache of one sequence of ``tokens`` (keys and values of every layer)."""
    layers, heads, dim = (getattr(config, k, None) for k in ("num_layers", "num_kv_heads", "head_dim"))
    if not (layers and heads and dim):
        return None
    return tokens * layers * 2 * heads * dim * dtype_bytes


def rollout_prompts(
    batch: int,
    micro: int,
    generations: int,
    tokens: int,
    model: Any,
    cache_factor: float = 1.0,
    kv_layout: bool = False,
) -> int | None:
    """The most prompts per sampler call (a divisor of ``batch``, as Tunix requires, at most the train
    micro-batch ``micro``, Tunix's default) whose peak fits ``ROLLOUT_SHARE`` of the free HBM: the KV
    cache of ``generations`` sequences of ``tokens``, times ``cache_factor`` (the decode loop's largest
    cache over one, ``decode.peak_cache_factor``) plus the decode's temporaries (``kv_layout``: the caches
    in ``decode.KV_LAYOUT``, ``KV_LAYOUT_TEMPORARY_CACHES``; else ``DECODE_TEMPORARY_CACHES``); None where
    ``micro`` fits or the backend reports no memory (CPU).

    Each call draws with its own seed (``tunix_bridge``: from seed, step and call), so a chunked step
    samples other tokens than an unchunked one would, from the same distribution, reproducibly."""
    config = getattr(model, "config", None)
    dtype_bytes = jnp.dtype(getattr(config, "dtype", None) or jnp.bfloat16).itemsize
    free, per_seq = free_hbm_bytes(), kv_bytes_per_sequence(config, tokens, dtype_bytes)
    if free is None or per_seq is None:
        return None
    peak = cache_factor + (KV_LAYOUT_TEMPORARY_CACHES if kv_layout else DECODE_TEMPORARY_CACHES)  # in caches
    fits = int(ROLLOUT_SHARE * free / peak) // (per_seq * generations)
    best = max([d for d in range(1, micro + 1) if batch % d == 0 and d <= fits], default=1)
    if best >= micro:
        return None
    log.info(
        "rollout: %d of %d prompts per sampler call (%.2f GiB a call at its peak: KV cache and "
        "decode temporaries; %.2f GiB free)",
        best,
        batch,
        best * generations * per_seq * peak / 2**30,
        free / 2**30,
    )
    return best
