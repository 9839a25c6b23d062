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
import math
from collections.abc import Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
from flax import nnx

from rljob_trainer.packing.accumulate import chunk_count, chunked_logps
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
    stream_index: jax.Array | None = None
    stream_of_slot: jax.Array | None = None
    part: jax.Array | None = None  # stacked chunks (``chunks``): [C, B]; the forward does not read it

    @property
    def pairs(self) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None:
        if self.pair_row is None:
            return None
        return (self.pair_row, self.pair_q, self.pair_k, self.pair_valid)


@functools.partial(
    jax.jit, static_argnames=("temperature", "attention", "block", "vocab_chunk", "head_at", "window")
)
def _logps(
    graphdef: Any,
    state: Any,
    rows: PackedInputs,
    *,
    temperature: float,
    attention: str,
    block: int,
    vocab_chunk: int = 0,
    head_at: str = "auto",
    window: int = 0,
) -> jax.Array:
    model = nnx.merge(graphdef, state)

    def forward(m: Any, r: PackedInputs) -> tuple[jax.Array, jax.Array | None]:
        return packed_per_token_logps(
            m,
            r,
            temperature=temperature,
            attention=attention,
            block=block,
            entropy=False,
            vocab_chunk=vocab_chunk,
            head_at=head_at,
            window=window,
        )

    logps = chunked_logps(model, rows, rows.part, forward) if chunk_count(rows) else forward(model, rows)[0]
    return jax.lax.stop_gradient(logps)


def packed_completion_logps(
    model: Any,
    layouts: Sequence[PackedLayout],
    *,
    temperature: float,
    attention: str,
    block: int,
    vocab_chunk: int = 0,
    head_at: str = "auto",
    window: int = 0,
) -> jax.Array:
    """``[sum B, Tc]`` per-token log-probs of the completion tokens of consecutive micro-batches.

    What Tunix's ``compute_per_token_logps(prompt, completion, temperature=...)`` returns for the
    concatenated micro-batches, at every real completion token. ``vocab_chunk``, ``head_at``, ``window``:
    see ``loss.packed_per_token_logps`` (by default the head runs at completion columns only).
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
            head_at=head_at,
            window=window,
        )
        for layout in layouts
    ]
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)


def unpacked_inputs(prompt_ids: jax.Array, completion_ids: jax.Array, pad_id: int) -> PackedInputs:
    """Tunix's unpacked ``[B, P + Tc]`` layout (one sequence per row) as ``PackedInputs``.

    Why: the packed forward and ``head.completion_head_logps`` then serve the unpacked path too, so it
    gets the head at completion columns only (Tunix's ``compute_per_token_logps`` runs the head over
    every prompt column). Same positions (``build_positions_from_mask``) and key mask (pads are keys
    nobody attends) as Tunix's ``process_ids``; queries from the first real token on are segment 1,
    leading pads segment 0 (they attend each other only, never a real token: no empty softmax row).
    Needs at least one real prompt token per sequence (left-padded prompts).
    """
    b, p = prompt_ids.shape
    tc = completion_ids.shape[1]
    tokens = jnp.concatenate([prompt_ids, completion_ids], axis=1)
    mask = tokens != pad_id
    started = jnp.cumsum(mask, axis=1) > 0
    cols = jnp.arange(tc, dtype=jnp.int32)[None]
    rows = jnp.arange(b, dtype=jnp.int32)[:, None] * (p + tc)
    return PackedInputs(
        tokens=tokens.astype(jnp.int32),
        positions=jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32),
        segment_ids=started.astype(jnp.int32),
        completion_index=jnp.where(completion_ids != pad_id, rows + p + cols, 0).astype(jnp.int32),
        kv_segment_ids=mask.astype(jnp.int32),
    )


def unpacked_chunks(
    prompt_ids: jax.Array, completion_ids: jax.Array, pad_id: int, per_chunk: int
) -> tuple[PackedInputs, jax.Array]:
    """Tunix's unpacked layout (``logps.unpacked_inputs``) in ``C = ceil(B / per_chunk)`` chunks of
    ``per_chunk`` consecutive sequences, the last filled with all-pad sequences (their queries attend
    each other only; no completion token reads them). Returns the stacked inputs and ``part`` ``[C, B]``."""
    b = prompt_ids.shape[0]
    count = math.ceil(b / per_chunk)
    fill = count * per_chunk - b
    p = jnp.pad(prompt_ids, ((0, fill), (0, 0)), constant_values=pad_id)
    c = jnp.pad(completion_ids, ((0, fill), (0, 0)), constant_values=pad_id)
    p = p.reshape(count, per_chunk, -1)
    c = c.reshape(count, per_chunk, -1)
    stacked = jax.vmap(lambda pi, ci: unpacked_inputs(pi, ci, pad_id))(p, c)
    chunk_of = jnp.arange(b) // per_chunk
    mine = chunk_of[None] == jnp.arange(count)[:, None]  # [C, B]
    # Each chunk's own [per_chunk, Tc] index, scattered to the whole batch's [B, Tc] (0 elsewhere).
    own = stacked.completion_index.reshape(count * per_chunk, -1)[:b]  # [B, Tc], row b from its chunk
    index = jnp.where(mine[:, :, None], own[None], 0)
    part = mine.astype(jnp.float32)
    return stacked.replace(completion_index=index, part=part), part


def unpacked_completion_logps(
    model: Any,
    prompt_ids: jax.Array,
    completion_ids: jax.Array,
    *,
    pad_id: int,
    temperature: float,
    vocab_chunk: int = 0,
    head_at: str = "auto",
    per_chunk: int = 0,
) -> jax.Array:
    """``[B, Tc]`` completion log-probs in Tunix's unpacked layout with dense masked attention (what
    ``common.compute_per_token_logps`` computes), the head at completion columns only by default;
    0 at completion padding (Tunix: the pad token's log-prob; the loss masks both). ``per_chunk`` > 0
    and below ``B``: that many sequences at a time (``unpacked_chunks``; a token budget)."""
    graphdef, state = nnx.split(model)
    prompt_ids, completion_ids = jnp.asarray(prompt_ids), jnp.asarray(completion_ids)
    if 0 < per_chunk < prompt_ids.shape[0]:
        rows = unpacked_chunks(prompt_ids, completion_ids, pad_id, per_chunk)[0]
    else:
        rows = unpacked_inputs(prompt_ids, completion_ids, pad_id)
    return _logps(
        graphdef,
        state,
        rows,
        temperature=float(temperature),
        attention="dense",
        block=0,
        vocab_chunk=vocab_chunk,
        head_at=head_at,
    )
