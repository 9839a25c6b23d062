"""Tunix ``TrainExample`` (one micro-batch) -> ``PackedTrainExample`` (its rows, one ``[R, L]`` batch).

Why the per-token GRPO inputs stay unpacked: the loss must aggregate exactly as Tunix's GRPO loss does
(``aggregate_loss`` over ``[batch, completion_len]``: sequence-mean-token-mean by default). So only the
model's input moves into packed rows; ``completion_index`` maps every completion token back to the
packed column that predicts it, and advantages, masks and reference/old log-probs keep Tunix's
``[B]``/``[B, Tc]`` layout. The loss gathers the packed per-token log-probs into that layout and then
runs the same aggregation code on the same shapes, which is what makes packed == unpacked.

Layout assumptions (Tunix's GRPO rollout guarantees them when the pad id is also an EOS id): prompts are
left-padded (real tokens a suffix of ``prompt_ids``), completions right-padded (a prefix). Anything
else is refused: a hole would make the unpacked positions and the packed ones differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np

from rljob_trainer.packing.attention import BlockPairs, block_pairs
from rljob_trainer.packing.rows import (
    RowPlan,
    ShapeCache,
    balance_rows,
    pack_rows,
    plan_rows,
    row_costs,
    shard_imbalance,
    token_stream,
)


@flax.struct.dataclass(frozen=True)
class PackedTrainExample:
    """One micro-batch packed into ``[R, L]`` rows, plus the unpacked GRPO inputs of its sequences.

    ``completion_index[b, j]`` is the flat index (into ``R * L``) of completion token ``j`` of sequence
    ``b``; the log-prob of that token comes from the packed logits one column earlier. Padding
    completion positions point at 0 and are masked by ``completion_mask`` exactly as in Tunix.
    """

    tokens: jax.Array  # [R, L] int32
    positions: jax.Array  # [R, L] int32, restarting at 0 per sequence
    segment_ids: jax.Array  # [R, L] int32, 1..k per row, 0 = padding
    completion_index: jax.Array  # [B, Tc] int32
    completion_mask: jax.Array  # [B, Tc]
    advantages: jax.Array  # [B] (or [B, Tc])
    ref_per_token_logps: jax.Array | None  # [B, Tc]
    old_per_token_logps: jax.Array | None  # [B, Tc]
    sampler_is_weights: jax.Array | None = None  # [B, Tc]
    # Key segment ids: ``segment_ids`` with pad tokens inside completions set to 0 (nobody attends them).
    kv_segment_ids: jax.Array | None = None
    # Block-sparse attention pairs (row, q block, k block, valid); None for dense / splash attention.
    pair_row: jax.Array | None = None
    pair_q: jax.Array | None = None
    pair_k: jax.Array | None = None
    pair_valid: jax.Array | None = None
    # The real tokens as one stream (``rows.token_stream``): per-token layers skip the padding columns.
    stream_index: jax.Array | None = None  # [S] flat slot of each stream token
    stream_of_slot: jax.Array | None = None  # [R * L] stream position of each slot (S = padding)
    # Token-budget chunks (``chunks.chunk_layout``): the row fields are [C, Rc, L], completion_index
    # [C, B, Tc], and part [C, B] says which chunk holds each sequence; None: one [R, L] batch.
    part: jax.Array | None = None

    @property
    def pairs(self) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None:
        if self.pair_row is None:
            return None
        return (self.pair_row, self.pair_q, self.pair_k, self.pair_valid)


def _real_lengths(prompt_mask: np.ndarray, completion_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real prompt tokens (a suffix) and the completion's span up to its last real token.

    A completion may hold pad tokens before its end: Tunix's vLLM sampler stops only on EOS, so a
    sampled pad id stays in the completion and Tunix's mask (``!= pad``) has a hole there. The span
    keeps the hole in the packed row (``_holes`` masks it exactly as the unpacked pass does).
    """
    p_len = prompt_mask.sum(-1).astype(np.int64)
    P, C = prompt_mask.shape[1], completion_mask.shape[1]
    suffix = np.arange(P)[None] >= (P - p_len)[:, None]
    if not np.array_equal(suffix, prompt_mask):
        raise ValueError("packing needs left-padded prompts (real prompt tokens a suffix of prompt_ids)")
    if (p_len == 0).any():
        raise ValueError("packing needs at least one prompt token (e.g. BOS) per sequence")
    last = np.where(completion_mask.any(-1), C - np.argmax(completion_mask[:, ::-1], axis=-1), 0)
    return p_len, last.astype(np.int64)


def _holes(
    plan: RowPlan, rows: Any, p_len: np.ndarray, c_len: np.ndarray, c_mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Positions and key segment ids of rows whose completions hold pad tokens, as unpacked Tunix sees them.

    Unpacked, a pad inside a completion is a key nobody attends to (``make_causal_attn_mask`` masks keys
    by ``!= pad``) and takes no position (``build_positions_from_mask``: cumsum of the mask - 1), while
    its own query still attends to the real tokens before it (its logits predict the next token). Packed
    the same: the hole's key segment id is 0 (no query matches it) and positions skip it.
    """
    positions, kv = rows.positions, rows.segment_ids
    holed = [i for i in range(len(c_len)) if not c_mask[i, : c_len[i]].all()]
    if not holed:
        return positions, kv
    positions, kv = positions.copy(), kv.copy()
    for i in holed:
        r, o, n = int(plan.row[i]), int(plan.offset[i]), int(plan.length[i])
        valid = np.r_[np.ones(p_len[i], bool), c_mask[i, : c_len[i]]]
        positions[r, o : o + n] = np.cumsum(valid) - 1
        kv[r, o : o + n] = np.where(valid, kv[r, o : o + n], 0)
    return positions, kv


@dataclasses.dataclass(frozen=True)
class PackedLayout:
    """Where one micro-batch's sequences sit in packed rows (host arrays): ONE plan per micro-batch,
    shared by the reference pass, the old-policy pass and the train step, so all three compile and run
    the same ``[R, L]`` shape."""

    plan: RowPlan
    tokens: np.ndarray  # [R, L]
    positions: np.ndarray  # [R, L]
    segment_ids: np.ndarray  # [R, L]
    kv_segment_ids: np.ndarray  # [R, L]: segment_ids with pad tokens inside completions set to 0
    completion_index: np.ndarray  # [B, Tc] flat index into R * L (0 for padding)
    pairs: BlockPairs | None  # block-sparse attention only
    shard_imbalance: float = 1.0  # max / mean estimated cost over data-parallel shards (rows.row_costs)
    stream: tuple[np.ndarray, np.ndarray] | None = None  # rows.token_stream: (index, of_slot)
    part: np.ndarray | None = None  # chunks.chunk_layout: [C, B], the row fields stacked per chunk

    @property
    def computed_rows(self) -> int:
        """Rows the passes compute: the plan's (its bucket's empty rows included), or with token-budget
        chunks the rows of the chunks holding a sequence (a chunk holding none is skipped at run time, a
        used chunk's empty rows are not)."""
        if self.part is None:
            return self.plan.num_rows
        return int(np.asarray(self.part).any(axis=1).sum()) * int(self.tokens.shape[1])

    def device_rows(self) -> dict[str, jax.Array]:
        """The model inputs as device arrays, keyed like ``PackedTrainExample``'s fields."""
        out = {
            "tokens": jnp.asarray(self.tokens),
            "positions": jnp.asarray(self.positions),
            "segment_ids": jnp.asarray(self.segment_ids),
            "kv_segment_ids": jnp.asarray(self.kv_segment_ids),
            "completion_index": jnp.asarray(self.completion_index),
        }
        if self.pairs is not None:
            bp = self.pairs
            out.update(
                pair_row=jnp.asarray(bp.row),
                pair_q=jnp.asarray(bp.q),
                pair_k=jnp.asarray(bp.k),
                pair_valid=jnp.asarray(bp.valid),
            )
        if self.stream is not None:
            out.update(stream_index=jnp.asarray(self.stream[0]), stream_of_slot=jnp.asarray(self.stream[1]))
        if self.part is not None:
            out["part"] = jnp.asarray(self.part)
        return out


def plan_layout(
    prompt_ids: Any,
    prompt_mask: Any,
    completion_ids: Any,
    completion_mask: Any,
    row_len: int,
    *,
    pad_id: int,
    attention_block: int | None = None,
    row_multiple: int = 1,
    shapes: ShapeCache | None = None,
    attention_weight: float | None = None,
    stream: bool = False,
) -> PackedLayout:
    """Best-fit-decreasing rows for one micro-batch (see ``pack_train_example`` for the arguments).

    With ``row_multiple`` > 1 (the data-parallel width) the rows are then ordered so each shard's block
    of rows has near-equal cost ``len + attention_weight * len**2`` (default ``1 / row_len``: a full-row
    sequence's attention counts as much as its per-token work). ``stream``: also lay the real tokens out
    as one stream (``rows.token_stream``, granules of ``row_len`` sized by ``shapes.fit_stream``) so the
    blocked and dense forwards run their per-token layers without the padding columns; left out where
    it would be as long as the rows. Single data shard only: the stream gathers across rows.
    """
    if stream and row_multiple > 1:
        raise ValueError(
            "the token stream gathers across rows: it needs a single data shard (row_multiple 1)"
        )
    attention_weight = 1.0 / row_len if attention_weight is None else attention_weight
    p_ids, c_ids = np.asarray(prompt_ids), np.asarray(completion_ids)
    c_mask = np.asarray(completion_mask).astype(bool)
    p_len, c_len = _real_lengths(np.asarray(prompt_mask).astype(bool), c_mask)
    P = p_ids.shape[1]
    seqs = [np.concatenate([p_ids[i, P - p_len[i] :], c_ids[i, : c_len[i]]]) for i in range(len(p_ids))]
    plan = plan_rows(p_len + c_len, row_len, multiple_of=row_multiple)
    rows = pack_rows(plan, seqs, pad_id)
    bp = block_pairs(rows.segment_ids, attention_block) if attention_block is not None else None
    if shapes is not None:
        # Pad to a shape the train step has already compiled (or a new, covering one): see ShapeCache.
        num_rows, num_pairs = shapes.fit(plan.rows_used, max(bp.count, 1) if bp else 0, max_rows=len(seqs))
        if num_rows != plan.num_rows:
            plan = dataclasses.replace(plan, num_rows=num_rows)
            rows = pack_rows(plan, seqs, pad_id)
        if bp is not None:
            bp = bp.padded(num_pairs)
    costs = row_costs(plan, attention_weight)
    if row_multiple > 1:  # data-parallel shards: equal row counts, near-equal cost (rows.balance_rows)
        new_row = balance_rows(costs, row_multiple)
        plan = dataclasses.replace(plan, row=new_row[plan.row].astype(np.int32))
        rows = pack_rows(plan, seqs, pad_id)
        costs = costs[np.argsort(new_row)]
        if bp is not None:
            bp = dataclasses.replace(bp, row=np.where(bp.valid, new_row[bp.row], 0).astype(np.int32))
    base = plan.row.astype(np.int64) * row_len + plan.offset + p_len  # flat index of completion token 0
    cols = np.arange(c_ids.shape[1])[None]
    completion_index = np.where(c_len[:, None] > cols, base[:, None] + cols, 0).astype(np.int32)
    positions, kv_segment_ids = _holes(plan, rows, p_len, c_len, c_mask)
    return PackedLayout(
        plan,
        rows.tokens,
        positions,
        rows.segment_ids,
        kv_segment_ids,
        completion_index,
        bp,
        shard_imbalance(costs, row_multiple),
        _stream(rows.segment_ids, row_len, shapes) if stream else None,
    )


def _stream(
    segment_ids: np.ndarray, row_len: int, shapes: ShapeCache | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The token stream in granules of a row, sized by the run's cache; None where it would skip no row."""
    need = max(1, -(-int((segment_ids > 0).sum()) // row_len))
    granules = shapes.fit_stream(need) if shapes is not None else need
    return token_stream(segment_ids, row_len, granules) if granules < len(segment_ids) else None


def pack_train_example(
    example: Any,
    row_len: int,
    *,
    pad_id: int,
    attention_block: int | None = None,
    row_multiple: int = 1,
    shapes: ShapeCache | None = None,
    layout: PackedLayout | None = None,
) -> tuple[PackedTrainExample, RowPlan]:
    """Pack one Tunix ``TrainExample`` into rows of ``row_len`` tokens (best-fit decreasing).

    ``attention_block`` set: also list the block pairs for ``blocked_attention`` (``row_len`` must be a
    multiple of it). ``row_multiple``: the row count is a multiple of this (the data-parallel width).
    ``shapes``: the run's ``ShapeCache`` (made with the same ``row_multiple``); rows and pairs are padded
    to one of its shapes so consecutive micro-batches reuse the compiled train step. Without it the rows
    and pairs are only bucketed (one compile per distinct bucket). ``layout``: the micro-batch's plan
    already made for its reference/old-policy passes (then the other arguments are not used).
    Raises ``RowTooShortError`` (naming ``spec.packing.maxSeqTokenPerTpu``) if a sequence does not fit.
    """
    if getattr(example, "segment_ids", None) is not None:
        raise ValueError("example is already packed (Tunix pack_sequences): turn off max_seq_token_per_tpu")
    if layout is None:
        layout = plan_layout(
            example.prompt_ids,
            example.prompt_mask,
            example.completion_ids,
            example.completion_mask,
            row_len,
            pad_id=pad_id,
            attention_block=attention_block,
            row_multiple=row_multiple,
            shapes=shapes,
        )
    packed = PackedTrainExample(
        **layout.device_rows(),
        completion_mask=jnp.asarray(example.completion_mask),
        advantages=jnp.asarray(example.advantages),
        ref_per_token_logps=example.ref_per_token_logps,
        old_per_token_logps=example.old_per_token_logps,
        sampler_is_weights=getattr(example, "sampler_is_weights", None),
    )
    return packed, layout.plan
