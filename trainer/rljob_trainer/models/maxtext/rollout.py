"""Rollout for MaxText models with ``rollout.engine: vanilla``: sampling by full forward passes.

Why not Tunix's vanilla sampler: it drives the model with Tunix's KV-cache protocol (``cache`` in and
out of ``__call__``, and ``config.num_layers`` etc. to size the cache); MaxText's Tunix adapter takes no
cache (MaxText decodes through its own engine, or vLLM on TPU). This engine recomputes the whole window
for every generated token: O(window^2) per token, fine for the tiny CPU demo and tests, not for real
models (use ``rollout.engine: vllm`` on TPU, which maps weights with the adapter's mappings).

It is a Tunix ``BaseRollout`` (``ClusterConfig.rollout_engine`` takes the class), shares the actor's
module (Tunix gives non-vanilla engines the training actor), and follows the vanilla sampler's
conventions: BOS + prompt, left-padded to ``max_prompt_length``; completions stop at an EOS id (kept);
sampling with ``temperature`` from ``PRNGKey(rollout_config.seed)``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.generate import tokenizer_adapter
from tunix.rl import common
from tunix.rl.rollout import base_rollout


class FullForwardRollout(base_rollout.BaseRollout):
    """Samples completions from a MaxText adapter model without a KV cache."""

    def __init__(self, rollout_actor: Any, tokenizer: Any, mesh: Any, rollout_config: Any):
        self._model = rollout_actor
        self._tokenizer = tokenizer_adapter.TokenizerAdapter(tokenizer)
        # Compiled once per engine, closing over the graph definition (MaxText's holds its config, which
        # is not hashable, so it cannot be a static jit argument); weights come in as the state argument.
        self._step: Any = None

    def _prompt_tokens(self, prompts: list[str], length: int) -> np.ndarray:
        bos = self._tokenizer.bos_id()
        out = np.full((len(prompts), length), self.pad_id(), np.int32)
        for i, text in enumerate(prompts):
            ids = ([bos] if bos is not None else []) + list(self._tokenizer.encode(text))
            if len(ids) > length:
                raise ValueError(
                    f"prompt of {len(ids)} tokens (BOS included) exceeds max_prompt_length {length}"
                )
            out[i, length - len(ids) :] = ids
        return out

    def generate(self, prompts: list[str], rollout_config: Any, **kwargs: Any) -> base_rollout.RolloutOutput:
        prompt = self._prompt_tokens(list(prompts), rollout_config.max_prompt_length)
        eos = np.asarray(sorted(set(rollout_config.eos_tokens or [self.eos_id()])), np.int32)
        graphdef, state = nnx.split(self._model)
        if self._step is None:
            self._step = jax.jit(partial(_step, graphdef), static_argnums=(7, 8, 9))
        seed = rollout_config.seed if rollout_config.seed is not None else 0
        steps, batch, pad = int(rollout_config.max_tokens_to_generate), prompt.shape[0], self.pad_id()
        window = jnp.asarray(np.concatenate([prompt, np.full((batch, steps), pad, np.int32)], axis=1))
        real = window != pad
        done, key = jnp.zeros((batch,), bool), jax.random.PRNGKey(int(seed))
        for t in range(steps):
            window, real, done, key = self._step(
                state,
                window,
                real,
                done,
                key,
                jnp.int32(t),
                jnp.asarray(eos),
                float(rollout_config.temperature),
                prompt.shape[1],
                pad,
            )
            if bool(done.all()):
                break
        tokens = window
        completions = []
        for row in np.asarray(tokens)[:, prompt.shape[1] :]:
            stop = np.flatnonzero(np.isin(row, eos))
            completions.append(row[: stop[0] + 1] if stop.size else row)
        return base_rollout.RolloutOutput(
            text=[self._tokenizer.decode(c.tolist()) for c in completions],
            logits=None,
            tokens=completions,
            left_padded_prompt_tokens=prompt,
            logprobs=None,
        )

    def get_per_token_logps(self, prompt_tokens: jax.Array, completion_tokens: jax.Array) -> jax.Array:
        graphdef, state = nnx.split(self._model)
        return common.compute_per_token_logps(
            graphdef,
            state,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            pad_id=self.pad_id(),
            eos_id=self.eos_id(),
            stop_gradient=True,
            return_logits=False,
        )

    def update_params(self, params: Any, filter_types: Any = None) -> None:
        nnx.update(self._model, params)  # usually the actor's own module already: a no-op copy

    def pad_id(self) -> int:
        return int(self._tokenizer.pad_id())

    def eos_id(self) -> int:
        return int(self._tokenizer.eos_id())

    def model(self) -> Any:
        return self._model


def _step(
    graphdef: Any,
    state: Any,
    window: jax.Array,
    real: jax.Array,
    done: jax.Array,
    key: jax.Array,
    t: jax.Array,
    eos: jax.Array,
    temperature: float,
    plen: int,
    pad_id: int,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Sample token ``t`` of every sequence: one forward pass over the whole ``[B, P + steps]`` window
    with segment ids 1 for real tokens and 0 for padding (MaxText masks by segment and causality) and
    positions counting real tokens only. A sequence that has emitted an EOS id gets padding from then on.

    One jitted step driven from Python rather than a ``lax.fori_loop``: MaxText's decoder updates its
    layers' variables during the call, which NNX refuses inside a loop body's trace.
    """
    model = nnx.merge(graphdef, state)
    positions = jnp.maximum(jnp.cumsum(real, axis=1) - 1, 0)
    logits, _ = model(window, positions, None, None, segment_ids=real.astype(jnp.int32))
    last = jax.lax.dynamic_index_in_dim(logits, plen + t - 1, axis=1, keepdims=False)
    key, sub = jax.random.split(key)
    token = jax.random.categorical(sub, last.astype(jnp.float32) / temperature).astype(window.dtype)
    token = jnp.where(done, pad_id, token)
    window = jax.lax.dynamic_update_index_in_dim(window, token, plen + t, axis=1)
    real = jax.lax.dynamic_update_index_in_dim(real, ~done, plen + t, axis=1)
    return window, real, done | jnp.isin(token, eos), key
