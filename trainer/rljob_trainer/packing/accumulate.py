"""Token-budget micro-batches: one GRPO loss over a micro-batch, its forward/backward cut into chunks.

Why: the actor-side passes ran over all of a micro-batch's tokens at once, so the activations grow with
the batch; on one v5e chip a 4 x 8 step of 768 tokens already failed (issue 40). verl
(``ppo_max_token_len_per_gpu``) and slime (``--max-tokens-per-gpu``) cut micro-batches by a per-device
token budget; so does this module, under Tunix's loss and its single optimizer update.

How the update stays the unsplit one. Tunix's ``aggregate_loss`` is linear in the per-token loss, with
weights that depend only on the whole micro-batch's completion mask (token-mean: ``1 / sum(mask)``;
sequence-mean-token-mean: ``1 / (len_b * rows)``, ...). Every sequence lies in exactly one chunk
(chunks are whole packed rows, or whole sequences unpacked), so with ``part_c`` the chunk's sequences,
``loss = sum_c aggregate(per_token_loss * part_c, full mask)``: each chunk's term is computed with the
FULL mask's normalisers, and the gradients of the terms add up to the gradient of the loss. A
``lax.scan`` runs the chunks one after another (forward and backward each, gradients summed in float32),
so one chunk's activations are alive at a time. The chunk count is fixed per run (``chunks.chunk_layout``
pads with empty chunks, skipped at run time by a ``lax.cond``), so the step compiles once.

How Tunix's train step gets those gradients without being changed: the loss fn returns
``stop_gradient(loss) + sum(G * params) - stop_gradient(sum(G * params))``, whose value is the loss and
whose gradient with respect to the parameters is ``G``, the summed chunk gradients. The loss value and
the aux metrics are Tunix's, computed once on the gathered ``[B, Tc]`` log-probs of all chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

# (model, one chunk's inputs) -> ([B, Tc] log-probs, [B, Tc] entropies), 0 outside the chunk.
ChunkLogps = Callable[[Any, Any], tuple[jax.Array, jax.Array]]
# ([B, Tc] log-probs, [B, Tc] entropies, part [B] or None) -> (loss, aux); part: the chunk's sequences.
PartLoss = Callable[[jax.Array, jax.Array, jax.Array | None], tuple[jax.Array, dict[str, jax.Array]]]


def chunk_count(rows: Any) -> int:
    """Chunks of a stacked input (``tokens`` ``[C, R, L]``), 0 for an unstacked one (``[R, L]``)."""
    return int(rows.tokens.shape[0]) if rows.tokens.ndim == 3 else 0


def _first(chunks: Any) -> Any:
    return jax.tree.map(lambda x: x[0], chunks)


def chunked_logps(model: Any, chunks: Any, parts: jax.Array, logps: ChunkLogps) -> jax.Array:
    """``[B, Tc]`` log-probs of a forward-only pass (reference, old policy) over stacked chunks, one
    chunk at a time (``lax.map``): each position comes from its own chunk, 0 elsewhere. A chunk holding
    no sequence (``parts`` row all 0: the padding of a fixed chunk count) is skipped at run time."""
    shape = jax.eval_shape(lambda c: logps(model, c)[0], _first(chunks))

    def one(xs: tuple[Any, jax.Array]) -> jax.Array:
        chunk, part = xs
        return jax.lax.cond(
            part.any(), lambda c: logps(model, c)[0], lambda c: jnp.zeros(shape.shape, shape.dtype), chunk
        )

    return jax.lax.map(one, (chunks, parts)).sum(axis=0)


def accumulated_loss(
    model: Any, chunks: Any, parts: jax.Array, logps: ChunkLogps, loss: PartLoss
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The loss of the whole micro-batch, its parameter gradient summed over ``chunks`` (see module).

    ``chunks``: the stacked model inputs (leading axis = chunk); ``parts`` ``[C, B]``: 1 where sequence
    ``b`` lies in chunk ``c``. Differentiate the result with respect to the model's ``nnx.Param`` state,
    as Tunix's trainer does.
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    frozen = jax.lax.stop_gradient(params)
    rest = jax.lax.stop_gradient(rest)

    shape = jax.eval_shape(lambda c: logps(nnx.merge(graphdef, frozen, rest), c), _first(chunks))

    def one(acc: Any, xs: tuple[Any, jax.Array]) -> tuple[Any, tuple[jax.Array, jax.Array]]:
        chunk, part = xs

        def term(p: Any) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
            lp, ent = logps(nnx.merge(graphdef, p, rest), chunk)
            return loss(lp, ent, part)[0], (lp, ent)

        def compute(acc: Any) -> tuple[Any, tuple[jax.Array, jax.Array]]:
            (_, out), grads = jax.value_and_grad(term, has_aux=True)(frozen)
            return jax.tree.map(lambda a, g: a + g.astype(jnp.float32), acc, grads), out

        def skip(acc: Any) -> tuple[Any, tuple[jax.Array, jax.Array]]:  # a chunk of padding only
            return acc, tuple(jnp.zeros(s.shape, s.dtype) for s in shape)

        return jax.lax.cond(part.any(), compute, skip, acc)

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), frozen)
    grads, (lps, ents) = jax.lax.scan(one, zeros, (chunks, parts))
    value, aux = loss(lps.sum(axis=0), ents.sum(axis=0), None)
    linear = sum(
        jnp.sum(g.astype(p.dtype).astype(jnp.float32) * p.astype(jnp.float32))
        for g, p in zip(jax.tree.leaves(grads), jax.tree.leaves(params), strict=True)
    )
    return jax.lax.stop_gradient(value) + linear - jax.lax.stop_gradient(linear), aux
