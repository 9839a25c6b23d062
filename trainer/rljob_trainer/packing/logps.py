"""Reference and old-policy log-probs on packed rows: the same rows (one plan per micro-batch) as the
train step, so every actor-side pass gets packing's speed-up and the same compiled shapes.

Tunix 0.1.7 computes both unpacked (``common.compute_per_token_logps`` over ``[B, P + Tc]``): measured on
the benchmark shape, the unpacked reference pass alone took longer than the packed train step. Here the
model runs once over the micro-batch's ``[R, L]`` rows and the completion tokens' log-probs are gathered
back to Tunix's ``[B, Tc]`` layout, so the values equal Tunix's to fp rounding at every completion token
(padding positions hold 0 here and the pad token's log-prob in Tunix; the loss masks both out).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
from flax import nnx

from rljob_trainer.packing.example import PackedLayout
from rljob_trainer.packing.loss import packed_per_token_logps


@flax.struct.dataclass(frozen=True)
class PackedInputs:
    """The model-side fields of ``PackedTrainExample`` (what a forward pass over packed rows needs)."""

    tokens: jax.Array
    positions: jax.Array
    segment_ids: jax.Array
    completion_index: jax.Array
    kv_segment_ids: jax.Array | None = None
    pair_row: jax.Array | None = None
    pair_q: jax.Array | None = None
    pair_k: jax.Array | None = None
    pair_valid: jax.Array | None = None

    @property
    def pairs(self) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None:
        if self.pair_row is None:
            return None
        return (self.pair_row, self.pair_q, self.pair_k, self.pair_valid)


@functools.partial(jax.jit, static_argnames=("temperature", "attention", "block", "vocab_chunk"))
def _logps(
    graphdef: Any,
    state: Any,
    rows: PackedInputs,
    *,
    temperature: float,
    attention: str,
    block: int,
    vocab_chunk: int = 0,
) -> jax.Array:
    model = nnx.merge(graphdef, state)
    logps, _ = packed_per_token_logps(
        model,
        rows,
        temperature=temperature,
        attention=attention,
        block=block,
        entropy=False,
        vocab_chunk=vocab_chunk,
    )
    return jax.lax.stop_gradient(logps)


def packed_completion_logps(
    model: Any,
    layouts: Sequence[PackedLayout],
    *,
    temperature: float,
    attention: str,
    block: int,
    vocab_chunk: int = 0,
) -> jax.Array:
    """``[sum B, Tc]`` per-token log-probs of the completion tokens of consecutive micro-batches.

    What Tunix's ``compute_per_token_logps(prompt, completion, temperature=...)`` returns for the
    concatenated micro-batches, at every real completion token. ``vocab_chunk``: see
    ``loss.packed_per_token_logps``.
    """
    graphdef, state = nnx.split(model)
    outs = [
        _logps(
            graphdef,
            state,
            PackedInputs(**layout.device_rows()),
            temperature=float(temperature),
            attention=attention,
            block=block,
            vocab_chunk=vocab_chunk,
        )
        for layout in layouts
    ]
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)
