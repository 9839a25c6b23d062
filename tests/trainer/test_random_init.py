"""A model built without a checkpoint trains every weight: no kernel left at Tunix's zero init.

Tunix zero-initialises the MLP projections and expects a checkpoint to overwrite them; at zero the MLP
outputs 0 and its gradients are 0, so a random-weight run (the demo, the rehearsal) would never train them.
"""

from __future__ import annotations

from typing import Any

import pytest
from rljob_trainer.models import families

from rljob.api.spec import ModelSpec


def _build(family: str, seed: int) -> Any:
    from rljob_trainer import tunix_bridge

    return families.build_model(ModelSpec(family=family, size="tiny"), tunix_bridge.make_mesh(), seed)


def _kernels(tree: Any) -> dict[str, Any]:
    """The arrays of two or more axes in ``tree`` (a model's params or their gradients), by path."""
    import jax
    from flax import nnx

    state = nnx.state(tree, nnx.Param) if isinstance(tree, nnx.Module) else tree
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(p): v for p, v in flat if v.ndim >= 2}


@pytest.mark.parametrize("family", sorted(families.FAMILIES))
def test_no_kernel_is_zero_and_the_mlp_gets_a_gradient(family: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    model = _build(family, seed=0)
    zero = [name for name, v in _kernels(model).items() if not bool(jnp.any(v != 0))]
    assert zero == []
    gate = next(v for name, v in _kernels(model).items() if "gate_proj" in name)
    assert float(jnp.std(gate)) == pytest.approx(gate.shape[0] ** -0.5, rel=0.2)  # drawn at 1/sqrt(fan_in)

    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 200, (2, 12)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
    mask = jnp.tril(jnp.ones((12, 12), jnp.bool_))[None].repeat(2, 0)

    def loss(m: Any) -> Any:
        logits, _ = m(tokens, positions, None, mask)
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1))

    grads = nnx.grad(loss)(model)
    mlp = {k: v for k, v in _kernels(grads).items() if "mlp" in k}
    assert mlp and all(float(jnp.max(jnp.abs(g))) > 0 for g in mlp.values()), "an MLP kernel gets no gradient"


def test_one_seed_builds_equal_actor_and_reference_and_another_seed_differs() -> None:
    import numpy as np

    a, b, c = _kernels(_build("qwen3", 3)), _kernels(_build("qwen3", 3)), _kernels(_build("qwen3", 4))
    mlp = [k for k in a if "mlp" in k]
    assert mlp and all(np.array_equal(a[k], b[k]) for k in a)
    assert not any(np.array_equal(a[k], c[k]) for k in mlp)
