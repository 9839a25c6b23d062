"""The chunked vocabulary head over the first ``count`` rows only, with a hand-written backward.

Why not ``lax.cond`` inside the ``lax.map`` of ``head.chunked_token_logps``: the cond's weight
cotangent is a second ``[V, D]`` buffer next to the scan's accumulator (measured: the jitted gradient's
temporaries double, 631 -> 1,262 MiB for Qwen3-0.6B's head), so skipping chunks would cost one more
copy of the largest weight. Here the forward and the backward are ``fori_loop``s whose trip count is
the number of real chunks (a while loop at run time: chunks past ``count`` are never computed), the
backward recomputes each chunk's logits (as ``jax.checkpoint`` did) and adds its weight gradient into
one ``[V, D]`` float32 accumulator in place. The derivative is log-softmax's own:
``d logp / d logits = onehot - p`` and ``d H / d logits = -p * (log p + H)``.

Why the backward is one plain matmul and one elementwise pass per chunk: the forward keeps each token's
logsumexp (and entropy), ``[n_chunks, chunk]`` floats, so the backward needs no softmax reductions
(``p = exp(logits - lse)``); the one-hot is an ``iota == target`` compare fused into that pass (not a
scatter); and the entropy term is skipped when its cotangent is a symbolic zero (``symbolic_zeros``:
GRPO's train step returns entropies as a metric only, which the ``lax.map`` head's autodiff prunes
too). The first version recomputed log-softmax in the backward: XLA's CPU backend fused the matmul with
the temperature scale (a ``[chunk, V]`` broadcast written per chunk), the max reduction and the
subtraction into one XNNPACK fusion, then ran the entropy term on zero cotangents and a scatter.

Measured cost (``bench/results/head-loop-cost.json``): per computed chunk this loop now costs what the
checkpointed ``lax.map`` does (0.93-0.95x in CPU seconds, fp32); before, 1.08-1.16x head-only and 1.17x
in the wide train step (docs/packing-bench.md, "Real shape").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero


def _chunks(count: jax.Array, chunk: int, n_chunks: int) -> jax.Array:
    return jnp.minimum((count + chunk - 1) // chunk, n_chunks)


def _logits(xc: jax.Array, w: jax.Array, temperature: float, dtype: Any) -> jax.Array:
    xc = xc if dtype is None else xc.astype(dtype)
    logits = jnp.dot(xc, w.T).astype(jnp.float32)
    if temperature != 0.0 and temperature != 1.0:
        logits = logits / temperature
    return logits


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def counted_token_logps(
    x: jax.Array, w: jax.Array, t: jax.Array, count: jax.Array, temperature: float, entropy: bool, dtype: Any
) -> tuple[jax.Array, jax.Array]:
    """``(logp, entropy)`` ``[n_chunks, chunk]`` of ``x`` ``[n_chunks, chunk, D]`` (targets ``t``) through
    ``w`` ``[V, D]``; rows of chunks starting at or after ``count`` are 0 and cost nothing. ``w`` is
    already in ``dtype`` (the model's compute dtype); entropies are 0 unless ``entropy``."""
    return _forward(x, w, t, count, temperature, entropy, dtype)[:2]


def _forward(
    x: jax.Array, w: jax.Array, t: jax.Array, count: jax.Array, temperature: float, entropy: bool, dtype: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(logp, entropy, logsumexp)``; the backward reuses the logsumexp (no softmax reductions there)."""
    n_chunks, chunk, _ = x.shape

    def body(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        logp_out, ent_out, lse_out = carry
        logits = _logits(x[i], w, temperature, dtype)
        lse = jax.nn.logsumexp(logits, axis=-1)
        logp = jnp.take_along_axis(logits, t[i][:, None], axis=-1)[:, 0] - lse
        if entropy:
            ent_out = ent_out.at[i].set(lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1))
        return logp_out.at[i].set(logp), ent_out, lse_out.at[i].set(lse)

    zeros = jnp.zeros((n_chunks, chunk), jnp.float32)
    return jax.lax.fori_loop(0, _chunks(count, chunk, n_chunks), body, (zeros, zeros, zeros))


def _fwd(x, w, t, count, temperature, entropy, dtype):
    x, w, t, count = (a.value for a in (x, w, t, count))  # symbolic_zeros: inputs come wrapped
    logp, ent, lse = _forward(x, w, t, count, temperature, entropy, dtype)
    return (logp, ent), (x, w, t, count, ent, lse)


def _bwd(temperature: float, entropy: bool, dtype: Any, res: Any, cot: Any) -> Any:
    x, w, t, count, ent, lse = res
    d_logp, d_ent = cot
    n_chunks, chunk, _ = x.shape
    scale = temperature if temperature != 0.0 and temperature != 1.0 else 1.0
    use_logp = not isinstance(d_logp, SymbolicZero)
    use_ent = entropy and not isinstance(d_ent, SymbolicZero)  # GRPO's train step: entropy is aux only
    if not (use_logp or use_ent):
        return jnp.zeros_like(x), jnp.zeros_like(w), None, None

    def body(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        dx, dw = carry
        xc = x[i] if dtype is None else x[i].astype(dtype)
        logp_all = _logits(x[i], w, temperature, dtype) - lse[i][:, None]
        p = jnp.exp(logp_all)
        g = jnp.zeros_like(p)
        if use_logp:
            hit = jax.lax.broadcasted_iota(jnp.int32, p.shape, 1) == t[i][:, None]
            g = d_logp[i][:, None] * (hit.astype(p.dtype) - p)
        if use_ent:
            g = g - d_ent[i][:, None] * p * (logp_all + ent[i][:, None])
        g = (g / scale).astype(w.dtype)
        dx = dx.at[i].set(jnp.dot(g, w).astype(x.dtype))
        dw = dw + jnp.dot(g.T, xc).astype(jnp.float32)
        return dx, dw

    carry = (jnp.zeros_like(x), jnp.zeros(w.shape, jnp.float32))
    dx, dw = jax.lax.fori_loop(0, _chunks(count, chunk, n_chunks), body, carry)
    return dx, dw.astype(w.dtype), None, None


counted_token_logps.defvjp(_fwd, _bwd, symbolic_zeros=True)


def counted_map(
    fn: Callable[[jax.Array], jax.Array], x: jax.Array, count: jax.Array, chunk: int
) -> jax.Array:
    """``fn`` over ``x`` ``[N, D]`` in chunks of ``chunk`` rows; chunks that start at or after ``count``
    are not computed (0 there), in the forward and the backward alike.

    For the per-token end of the forward (``adapter.last_layer_tail``) at the head's gathered states,
    so its cost follows the real completion tokens as the head's does. Unlike the head, ``lax.cond``
    autodiff is fine here: its extra cotangent buffers are the size of one layer's MLP, not ``[V, D]``.
    Each chunk is recomputed in the backward pass, as per-layer remat recomputes the layer it came from,
    so only the ``[N, D]`` input is kept. The checkpoint wraps the whole step, ``cond`` included: inside
    the ``cond`` JAX kept every chunk's MLP activations anyway (the jitted gradient's temporaries at
    Qwen3-0.6B widths, 7,680 rows: 1,218 MiB vs 101 MiB).
    """
    n, d = x.shape
    n_chunks = -(-n // chunk)
    xs = jnp.pad(x, ((0, n_chunks * chunk - n), (0, 0))).reshape(n_chunks, chunk, d)
    out = jax.eval_shape(fn, xs[0])
    real = _chunks(count, chunk, n_chunks)

    def step(carry: None, args: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        i, xc = args
        return carry, jax.lax.cond(i < real, fn, lambda _: jnp.zeros(out.shape, out.dtype), xc)

    _, ys = jax.lax.scan(jax.checkpoint(step), None, (jnp.arange(n_chunks), xs))
    return ys.reshape(n_chunks * chunk, *out.shape[1:])[:n]
