"""A micro-batch's model inputs cut into chunks of at most a token budget per chip (``accumulate``).

Packed: a chunk is a set of whole rows (a sequence never spans two rows), ``C`` chunks of ``Rc`` rows
stacked as ``[C, Rc, L]``; each chunk's rows are then ordered for its data-parallel shards as the
unchunked rows are (``rows.balance_rows``). ``completion_index`` becomes ``[C, B, Tc]`` (each token's
flat index inside its own chunk, 0 in the others) and ``part`` ``[C, B]`` says which chunk holds each
sequence. Host-side (numpy), as the rows' planning. The unpacked layout's chunks (whole sequences):
``logps.unpacked_chunks``.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from rljob_trainer.packing.attention import BlockPairs, block_pairs
from rljob_trainer.packing.example import PackedLayout
from rljob_trainer.packing.rows import balance_rows, row_costs

log = logging.getLogger(__name__)


# The fewest tokens a chunk holds per chip where the budget allows more than one row. Why not as many rows
# as the budget allows: a chunk holding no row is skipped, but a chunk's empty rows are computed, so a
# micro-batch using u rows computes ceil(u / r) * r of them. On the chip (docs/tpu.md, 2026-12-07 08:05)
# issue 40's small shape (8 sequences of up to 512 tokens, rows of 2,048) had chunks of 4 rows for the 2
# a micro-batch uses: 8,192 slots computed for 2,936 real tokens. Each chunk also pays a fixed cost (its
# float32 gradient added to the sum, the weights read in each of its passes: ~10 ms at Qwen3-0.6B on
# v5e, against ~110 ms for a row of 2,048), which is what makes rows much shorter than this worth grouping.
MIN_CHUNK_TOKENS = 2048


def rows_per_chunk(budget_tokens: int, row_len: int, row_multiple: int = 1) -> int:
    """Rows of one chunk per chip: as few as hold ``MIN_CHUNK_TOKENS`` (at least one: a row must hold the
    longest sequence), at most what ``budget_tokens`` per chip holds; times ``row_multiple``, the
    data-parallel chips."""
    per_chip = budget_tokens // row_len
    if per_chip < 1:
        log.warning(
            "packing: a token budget of %d per chip is below one row (%d tokens): one row per chip",
            budget_tokens,
            row_len,
        )
    return max(1, min(per_chip, math.ceil(MIN_CHUNK_TOKENS / row_len))) * row_multiple


def max_chunks(sequences: int, longest: int, row_len: int, rows: int) -> int:
    """Chunks of ``rows`` rows that any micro-batch of ``sequences`` sequences of at most ``longest``
    tokens can need: the planner is best-fit (``rows.plan_rows``), which never leaves two rows at most
    half full, so it uses at most ``2 * tokens / row_len + 1`` rows (and never more than one a sequence).
    Padding every micro-batch to this count makes its chunked shape one per run."""
    bound = min(sequences, 2 * math.ceil(sequences * longest / row_len) + 1)
    return math.ceil(bound / rows)


def chunk_layout(
    layout: PackedLayout,
    rows: int,
    *,
    count: int = 0,
    row_multiple: int = 1,
    attention_block: int | None = None,
) -> PackedLayout:
    """``layout``'s used rows in ``ceil(rows used / rows)`` chunks of ``rows`` rows (module doc), then
    empty chunks up to ``count`` (``max_chunks``; skipped at run time, ``accumulate``), if larger.

    Without ``count``, returned unchanged when one chunk holds them all. Rows go to the used chunks
    longest-processing-time first (``balance_rows`` with the chunks as shards), so their costs are near
    equal; the bucket's empty rows are dropped. Block pairs are listed per chunk, padded to one count;
    the token stream is not used (it gathers across rows).
    """
    plan, row_len = layout.plan, layout.tokens.shape[1]
    used = math.ceil(plan.rows_used / rows)
    if used <= 1 and not count:
        return layout
    if count and used > count:
        log.warning(
            "packing: %d chunks needed, more than the %d the run compiled for: a new shape", used, count
        )
    count = max(used, count)
    total = used * rows
    have = layout.tokens.shape[0]
    costs = np.zeros(max(have, total))
    costs[:have] = row_costs(plan, 1.0 / row_len)
    keep = np.argsort(-costs, kind="stable")[:total]  # every used row (cost > 0), then empty ones
    slot = balance_rows(costs[keep], used)  # chunk c holds slots c*rows .. (c+1)*rows
    for c in range(used):  # then each chunk's rows in contiguous blocks of near-equal cost per shard
        at = np.flatnonzero(slot // rows == c)
        order = np.argsort(slot[at])
        inner = balance_rows(costs[keep[at[order]]], row_multiple) if row_multiple > 1 else np.arange(rows)
        slot[at[order]] = c * rows + inner
    where = np.full(costs.size, -1)
    where[keep] = slot

    def moved(a: np.ndarray) -> np.ndarray:
        out = np.zeros((count * rows, row_len), a.dtype)  # the chunks past the used ones stay empty
        real = keep[keep < have]
        out[where[real]] = a[real]
        return out.reshape(count, rows, row_len)

    tokens = moved(layout.tokens)  # the dropped bucket rows and the added ones are empty (segment 0)
    segment_ids = moved(layout.segment_ids)
    ci = layout.completion_index
    new_row = where[ci // row_len]
    chunk_of = new_row // rows
    local = (new_row % rows) * row_len + ci % row_len
    index = np.where((ci > 0)[None] & (chunk_of[None] == np.arange(count)[:, None, None]), local[None], 0)
    seq_chunk = where[plan.row] // rows
    part = (seq_chunk[None] == np.arange(count)[:, None]).astype(np.float32)
    pairs = None
    if attention_block is not None:
        each = [block_pairs(seg, attention_block) for seg in segment_ids]
        size = max(bp.valid.size for bp in each)
        each = [bp.padded(size) for bp in each]
        pairs = BlockPairs(*(np.stack([getattr(bp, f) for bp in each]) for f in ("row", "q", "k", "valid")))
    return dataclasses.replace(
        layout,
        tokens=tokens,
        positions=moved(layout.positions),
        segment_ids=segment_ids,
        kv_segment_ids=moved(layout.kv_segment_ids),
        completion_index=index.astype(np.int32),
        pairs=pairs,
        stream=None,
        part=part,
    )
