"""The packed forward's decoder stack: pre-norm residual layers (qwen3, qwen2, llama3), each recomputed in
the backward pass, unrolled or in one ``lax.scan`` (``adapter`` builds each family's forward on it)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from rljob_trainer.packing.remat import checkpoint_layer

# Recompute each decoder layer in the backward pass (``remat.checkpoint_layer``): same math (float
# rounding may differ), cuts the packed train step's activations and float32 weight copies from ~248 to
# ~17 MiB per layer at Qwen3-0.6B width (1,024 tokens), float32 or bf16 activations (see ``decoder``).
# A switch for tests and the bench.
REMAT_LAYERS = True
# Run the decoder layers as one ``lax.scan`` over their stacked weights instead of one copy of the layer
# per layer: JAX traces, and XLA compiles, one layer instead of 28 (issue 42: a start's tracing, compile
# and the compiled program's size), as MaxText's ``scan_layers``. Same math; XLA may fuse differently.
# None (the default): on a TPU, where the chip timed it (docs/tpu.md, 2026-12-06 22:25; the v5e example,
# packed): the train step's executable 852 -> 90 MB, a cold first step 267 -> 129 s, a warm restart's
# 99 -> 67 s, steps 2 and 3 no slower. Its price is temporaries that grow with the depth, which the
# token budget plans for (``memory.SCAN_BYTES_PER_LAYER_PARAMETER``, ``SCAN_VECTORS_PER_LAYER_TOKEN``).
# Unrolled elsewhere: on CPU the trainer's own remat (``checkpoint_layer``) is what keeps XLA's CPU
# scheduler from holding every layer's activations.
SCAN_LAYERS: bool | None = None
# Where the layers scan, which matmul outputs each layer keeps for the backward pass instead of recomputing
# them (issue 40: the recompute is the trainer's fourth forward-sized pass). None: none, every layer is
# recomputed whole. "mlp": the MLP's gate and up projections (``2 F`` values a token a layer), the
# largest share of the recompute. "all": every weight matmul's output
# (``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``); the backward then recomputes only the
# norms, the attention kernel's forward and elementwise work. Off by default: on the chip (docs/tpu.md,
# 2026-12-07 08:05) "all" made the v5e example's train phase 4% faster (5.08 / 5.45 -> 4.87 / 5.24 s) for
# temporaries of 10.39 instead of 4.56 GiB a one-row chunk (compiled for v5e), which the token budget
# does not plan for. "everything": every value the forward computes is kept
# (``jax.checkpoint_policies.everything_saveable``), nothing recomputed: what Tunix's learner does where it
# fits (issue 40's small shape: the trainer's train program 0.216 s of device time there against Tunix's
# 0.131-0.164 s, docs/tpu.md 2026-12-07 18:05); an arm to measure, sized by no budget.
SAVE_DOTS: str | None = None


def scans() -> bool:
    """Whether the packed passes run their layers in one scan: ``SCAN_LAYERS``, or None: on a TPU."""
    return jax.default_backend() == "tpu" if SCAN_LAYERS is None else SCAN_LAYERS


def saved_dots(hidden_dim: int) -> Callable[..., bool] | None:
    """The ``jax.checkpoint`` policy of ``SAVE_DOTS`` for a model whose MLP is ``hidden_dim`` wide."""
    if SAVE_DOTS is None:
        return None
    if SAVE_DOTS == "all":
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    if SAVE_DOTS == "everything":
        return jax.checkpoint_policies.everything_saveable

    def mlp_in(prim: Any, *avals: Any, **params: Any) -> bool:
        # ``nnx.Linear``: ``dot_general(x, kernel [in, out])``; the MLP's gate and up kernels are [D, F]
        if prim is not jax.lax.dot_general_p or any(params["dimension_numbers"][1]):
            return False
        kernel = avals[1]
        return kernel.ndim == 2 and kernel.shape[1] == hidden_dim

    return mlp_in


def decoder(
    model: Any, x: jax.Array, attn_fn: Callable[[Any, jax.Array], jax.Array], split_last: bool = False
) -> jax.Array:
    """Pre-norm residual decoder stack shared by qwen3, qwen2 and llama3 (``split_last``: see
    ``adapter.packed_hidden``); the layers in one ``lax.scan`` where ``scans()`` and they are alike."""

    def one(state: Any, x: jax.Array, graph: Any, stop: bool) -> jax.Array:
        layer = nnx.merge(graph, state)
        h = attn_fn(layer.attn, layer.input_layernorm(x)) + x
        return h if stop else h + layer.mlp(layer.post_attention_layernorm(h))

    # One jitted function per distinct layer (graphs compare equal but do not hash: their config is a
    # dataclass), so JAX traces a layer, its linearization and its transpose once and reuses them for the
    # other layers: remat's backward traces each layer's VJP inside the train step's trace, 1.17 s a layer
    # on the chip's host (28 of them: 33 s of a warm restart, docs/tpu.md). XLA inlines the calls, so the
    # compiled program computes the same numbers (test_packing_remat); halves the packed train step's trace.
    jitted: list[tuple[Any, bool, Callable[..., jax.Array]]] = []

    def traced_once(graph: Any, stop: bool) -> Callable[..., jax.Array]:
        """The jitted layer for ``graph`` (and ``stop``), made once per decoder call."""
        for seen, seen_stop, fn in jitted:
            if seen_stop == stop and seen == graph:
                return fn
        fn = jax.jit(functools.partial(one, graph=graph, stop=stop))
        jitted.append((graph, stop, fn))
        return fn

    def run(graph: Any, state: Any, x: jax.Array, stop: bool = False) -> jax.Array:
        # With bf16 activations XLA's fusions may round the recomputed forward differently, so a few
        # gradient elements move by a bf16 step (test_packing_remat); without remat, a bf16 model keeps
        # every layer's activations to the backward (~124 MiB per layer per 1,024 tokens at 0.6B width).
        if not REMAT_LAYERS:
            return one(state, x, graph=graph, stop=stop)
        return checkpoint_layer(traced_once(graph, stop), state, x)

    layers = [nnx.split(layer) for layer in model.layers]
    body, tail = (layers[:-1], layers[-1:]) if split_last else (layers, [])
    if scans() and len(body) > 1 and all(graph == body[0][0] for graph, _ in body):
        # Inside a scan the backward pass recomputes a layer in its own loop iteration, so plain
        # ``jax.checkpoint`` holds on every backend (``checkpoint_layer``'s custom VJP, which works
        # around XLA's CPU scheduler, leaks its integer closures into the splash kernel's lowering here).
        layer = functools.partial(one, graph=body[0][0], stop=False)
        if REMAT_LAYERS:
            layer = jax.checkpoint(layer, prevent_cse=False, policy=saved_dots(model.config.hidden_dim))
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(state for _, state in body))
        x, _ = jax.lax.scan(lambda h, state: (layer(state, h), None), x, stacked)
    else:
        for graph, state in body:
            x = run(graph, state, x)
    for graph, state in tail:
        x = run(graph, state, x, stop=True)
    return x if split_last else model.final_norm(x)
