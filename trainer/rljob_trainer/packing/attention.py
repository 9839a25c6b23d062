"""Exact attention over packed rows: causal within a segment, never across segments.

Two implementations with the same semantics (query ``q`` may attend key ``k`` iff
``seg[q] == seg[k] > 0 and k <= q``; padding queries attend nothing and output 0):

* ``segment_causal_mask``: the dense ``[rows, L, L]`` boolean mask, for a model's own non-flash path
  (its ``attention_mask`` argument). Exact on every family, but costs ``L**2`` per row whatever the
  segments are.
* ``blocked_attention``: block-sparse attention in plain JAX. Rows are cut into blocks of ``block``
  tokens; the host lists the (row, query block, key block) pairs where a query's segment can see a key
  (``block_pairs``), and only those pairs are computed. Because segments are contiguous and causal,
  query block ``i`` needs key blocks ``first_block(first segment touching i) .. i``, so the cost follows
  ``sum(len_i**2)`` instead of ``L**2``. The softmax over a query's key blocks is combined exactly
  (shared running max, summed exponentials), so the result equals the dense masked softmax up to fp
  rounding. This is the CPU/GPU analogue of TPU splash attention with segment ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljob_trainer.packing.rows import bucket_rows

_NEG = -1e30  # finite: masked scores never make exp() overflow or inf-inf NaNs in gradients


def segment_causal_mask(segment_ids: jax.Array, kv_segment_ids: jax.Array | None = None) -> jax.Array:
    """``[rows, L, L]`` bool: the query's non-zero segment is the key's, and the key is not after it.

    ``kv_segment_ids`` (default ``segment_ids``): the keys' ids; 0 marks a key nobody attends to.
    """
    L = segment_ids.shape[-1]
    kv = segment_ids if kv_segment_ids is None else kv_segment_ids
    same = (segment_ids[:, :, None] == kv[:, None, :]) & (segment_ids[:, :, None] > 0)
    causal = jnp.arange(L)[:, None] >= jnp.arange(L)[None, :]
    return same & causal[None]


@dataclass(frozen=True)
class BlockPairs:
    """Host-computed (row, query block, key block) triples to compute, padded to a bucketed count.

    Padding pairs have ``valid == False`` and contribute nothing.
    """

    row: np.ndarray
    q: np.ndarray
    k: np.ndarray
    valid: np.ndarray

    @property
    def count(self) -> int:
        return int(self.valid.sum())

    def padded(self, total: int) -> BlockPairs:
        """The same pairs followed by invalid ones up to ``total`` (valid pairs always come first)."""
        n, size = self.count, self.valid.size
        if total < max(n, 1):
            raise ValueError(f"{n} block pairs do not fit in {total}")
        if total <= size:
            return BlockPairs(self.row[:total], self.q[:total], self.k[:total], self.valid[:total])
        pad = np.zeros(total - size, np.int32)
        return BlockPairs(
            np.r_[self.row, pad], np.r_[self.q, pad], np.r_[self.k, pad], np.r_[self.valid, pad.astype(bool)]
        )


def block_pairs(segment_ids: np.ndarray, block: int, *, mantissa_bits: int = 3) -> BlockPairs:
    """The key blocks each query block can see, from contiguous segment ids (``[rows, L]`` numpy).

    Query block ``i`` of a row sees key blocks ``[start block of its first real segment, i]``; blocks
    holding only padding are skipped. The list is padded with invalid pairs to a geometric bucket of the
    count (``BlockPairs.padded`` re-pads it to a shape the train step already compiled).
    """
    rows, L = segment_ids.shape
    if L % block:
        raise ValueError(f"row length {L} must be a multiple of the attention block {block}")
    nb = L // block
    out_r, out_q, out_k = [], [], []
    for r in range(rows):
        seg = segment_ids[r]
        # start column of the segment each column belongs to
        is_start = np.r_[True, seg[1:] != seg[:-1]]
        start = np.maximum.accumulate(np.where(is_start, np.arange(L), 0))
        for i in range(nb):
            qs = seg[i * block : (i + 1) * block]
            real = np.flatnonzero(qs > 0)
            if real.size == 0:
                continue
            first = int(start[i * block + real[0]]) // block
            ks = np.arange(first, i + 1)
            out_r.append(np.full(ks.size, r))
            out_q.append(np.full(ks.size, i))
            out_k.append(ks)
    n = sum(a.size for a in out_r)
    total = bucket_rows(max(n, 1), mantissa_bits=mantissa_bits)
    pad = total - n

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([*parts, np.zeros(pad, np.int64)]).astype(np.int32)

    valid = np.r_[np.ones(n, bool), np.zeros(pad, bool)]
    return BlockPairs(cat(out_r), cat(out_q), cat(out_k), valid)


def blocked_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    pairs: tuple[jax.Array, jax.Array, jax.Array, jax.Array],
    *,
    block: int,
    scale: float,
    kv_segment_ids: jax.Array | None = None,
) -> jax.Array:
    """Block-sparse segment-causal attention (``kv_segment_ids``: as in ``segment_causal_mask``). ``q``: ``[R, L, N, D]``; ``k``, ``v``: ``[R, L, K, D]``
    (grouped-query: ``N`` a multiple of ``K``); ``pairs``: ``(row, q_block, k_block, valid)`` arrays.

    Returns ``[R, L, N, D]`` in ``v``'s dtype; softmax in float32.
    """
    R, L, N, D = q.shape
    K = k.shape[2]
    G = N // K
    nb = L // block
    p_row, p_q, p_k, p_valid = pairs
    qb = _take_blocks(q.reshape(R, nb, block, K, G, D), p_row, p_q)  # [P, T, K, G, D]
    kb = _take_blocks(k.reshape(R, nb, block, K, D), p_row, p_k)  # [P, S, K, D]
    vb = _take_blocks(v.reshape(R, nb, block, K, D), p_row, p_k)
    kv = segment_ids if kv_segment_ids is None else kv_segment_ids
    sq = segment_ids.reshape(R, nb, block)[p_row, p_q]  # [P, T]
    sk = kv.reshape(R, nb, block)[p_row, p_k]  # [P, S]
    tq = p_q[:, None] * block + jnp.arange(block)[None]
    tk = p_k[:, None] * block + jnp.arange(block)[None]
    mask = (
        p_valid[:, None, None]
        & (sq[:, :, None] == sk[:, None, :])
        & (sq[:, :, None] > 0)
        & (tk[:, None, :] <= tq[:, :, None])
    )  # [P, T, S]
    s = jnp.einsum("PTKGD,PSKD->PKGTS", qb, kb) * scale
    s = jnp.where(mask[:, None, None], s.astype(jnp.float32), _NEG)
    group = p_row * nb + p_q
    smax = s.max(-1)
    m = _filled(smax, (R * nb, *smax.shape[1:]), _NEG).at[group].max(smax)  # [R*nb, K, G, T]
    m = jax.lax.stop_gradient(m)
    e = jnp.where(mask[:, None, None], jnp.exp(s - m[group][..., None]), 0.0)
    esum = e.sum(-1)
    denom = _filled(esum, (R * nb, *esum.shape[1:]), 0.0).at[group].add(esum)  # [R*nb, K, G, T]
    pv = jnp.einsum("PKGTS,PSKD->PKGTD", e.astype(vb.dtype), vb).astype(jnp.float32)
    num = _filled(pv, (R * nb, *pv.shape[1:]), 0.0).at[group].add(pv)  # [R*nb, K, G, T, D]
    out = num / jnp.where(denom > 0, denom, 1.0)[..., None]
    out = out.reshape(R, nb, K, G, block, D).transpose(0, 1, 4, 2, 3, 5).reshape(R, L, N, D)
    return out.astype(v.dtype)


def _filled(anchor: jax.Array, shape: tuple[int, ...], value: float) -> jax.Array:
    """``value`` everywhere, as a buffer computed from ``anchor`` (``anchor[0] * 0 + value``).

    Why not ``jnp.full``: XLA merges equal constant broadcasts across layers and schedules the
    per-scatter copies of the merged buffer at the very start of the step, so every layer's scatter
    buffers lived from the first forward op to their use in the backward pass (~142 MiB per layer of
    the real-shape train step, ``bench/packing_memory.py``). Built from ``anchor``, a buffer exists only
    once its layer has run.
    """
    return jnp.broadcast_to(jnp.ravel(anchor)[0] * 0 + value, shape).astype(anchor.dtype)


@jax.custom_vjp
def _take_blocks(x: jax.Array, rows: jax.Array, blocks: jax.Array) -> jax.Array:
    """``x[rows, blocks]`` (``x``: ``[R, nb, ...]``); its backward scatters into a buffer built from
    the cotangent (``_filled``), not into autodiff's constant zeros (same reason)."""
    return x[rows, blocks]


def _take_blocks_fwd(x: jax.Array, rows: jax.Array, blocks: jax.Array) -> tuple[jax.Array, Any]:
    return x[rows, blocks], (x.shape, rows, blocks)


def _take_blocks_bwd(res: Any, g: jax.Array) -> tuple[jax.Array, None, None]:
    shape, rows, blocks = res
    return _filled(g, shape, 0.0).at[rows, blocks].add(g), None, None


_take_blocks.defvjp(_take_blocks_fwd, _take_blocks_bwd)


def dense_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    *,
    scale: float,
    kv_segment_ids: jax.Array | None = None,
) -> jax.Array:
    """Dense segment-causal attention with the same semantics as ``blocked_attention``: the reference in
    tests, and the unpacked arm's kernel in the benchmark (the full ``[L, L]`` scores, as Tunix computes)."""
    R, L, N, D = q.shape
    K = k.shape[2]
    qg = q.reshape(R, L, K, N // K, D)
    s = jnp.einsum("BTKGD,BSKD->BKGTS", qg, k).astype(jnp.float32) * scale
    mask = segment_causal_mask(segment_ids, kv_segment_ids)[:, None, None]
    s = jnp.where(mask, s, _NEG)
    e = jnp.where(mask, jnp.exp(s - s.max(-1, keepdims=True)), 0.0)
    denom = e.sum(-1, keepdims=True)
    p = e / jnp.where(denom > 0, denom, 1.0)
    return jnp.einsum("BKGTS,BSKD->BTKGD", p.astype(v.dtype), v).reshape(R, L, N, D)
