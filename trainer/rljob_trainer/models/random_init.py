"""Random weights for a model built without a checkpoint: every kernel Tunix leaves at zero, drawn.

Why: Tunix's constructors zero-initialise the MLP projections (``gate_proj``, ``up_proj``, ``down_proj``)
of qwen3, qwen2, llama3 and gemma3; they expect a checkpoint to overwrite them. Built without one (the
demo, the rehearsal, every random-model run), the MLP's output is 0 and so are its gradients (each of the
three kernels' gradients has a factor of the other two), so the MLPs never train: only attention and the
embedding would. Zero biases and zero norm scales (gemma3 scales by ``1 + scale``) are the usual start and
are kept.
"""

from __future__ import annotations

from typing import Any


def draw_zero_kernels(model: Any, seed: int) -> list[str]:
    """Draw, in place, every all-zero parameter of two or more axes at ``normal(0, 1/sqrt(fan_in))`` (the
    first axis is the input, as in ``nnx.Linear``), placed as the zero array was.

    The same ``seed`` draws the same weights, so the actor and the reference built from one seed start
    equal. Returns the drawn parameters' paths, for the log and the tests.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    state = nnx.state(model, nnx.Param)
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    keys = jax.random.split(jax.random.key(seed), len(paths_and_leaves))
    drawn: list[str] = []
    leaves = []
    for key, (path, value) in zip(keys, paths_and_leaves, strict=True):
        if value.ndim >= 2 and not bool(jnp.any(value != 0)):
            draw = value.shape[0] ** -0.5 * jax.random.normal(key, value.shape, jnp.float32)
            # added to the zeros, not put in their place: the sum keeps their placement (sharding, and
            # uncommitted where they were, which Tunix's multi-host reshard needs to move them)
            value = value + draw.astype(value.dtype)
            drawn.append(jax.tree_util.keystr(path))
        leaves.append(value)
    nnx.update(model, jax.tree_util.tree_unflatten(treedef, leaves))
    return drawn
