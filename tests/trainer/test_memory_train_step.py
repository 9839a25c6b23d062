"""The train step's own memory (issue 25): no optimizer-state copy before the first step, no gradient
accumulator when there is nothing to accumulate, and neither changes a number.

Real parts: Tunix's RL ``Trainer`` (``PeftTrainer``) with the trainer's optimizer
(``tunix_bridge.optimizer``) and jit (``memory.donate_model_in_train_step``), under a mesh as
``RLCluster.update_actor`` runs it; a small ``nnx`` model with a squared-error loss.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from rljob_trainer import memory, tunix_bridge
from tunix.rl import trainer as rl_trainer
from tunix.sft import peft_trainer

from tests.trainer.test_config_bridge import spec


class Mlp(nnx.Module):
    def __init__(self, dtype: Any, rngs: nnx.Rngs):
        self.a = nnx.Linear(16, 32, param_dtype=dtype, rngs=rngs)
        self.b = nnx.Linear(32, 8, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.b(jax.nn.gelu(self.a(x)))


def _loss(model: Mlp, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x).astype(jnp.float32) - y) ** 2)


def _trainer(dtype: Any, accumulation: int | None, levers: bool) -> Any:
    tx = tunix_bridge.optimizer(spec(grpo={"batchSize": 4, "learningRate": 0.05}))
    cfg = peft_trainer.TrainingConfig(eval_every_n_steps=10**9, gradient_accumulation_steps=accumulation)
    trainer = rl_trainer.Trainer(
        model=Mlp(dtype, nnx.Rngs(0)), optimizer=tx, training_config=cfg, custom_checkpoint_metadata_fn=dict
    )
    with _mesh() as mesh:  # the model on the mesh, as the trainer's checkpoint loader places it
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        nnx.update(trainer.model, jax.device_put(nnx.state(trainer.model), replicated))
    if levers:
        memory.donate_model_in_train_step(trainer)
    return trainer.with_loss_fn(_loss)


def _mesh() -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))


def _batches(n: int) -> list[dict[str, jax.Array]]:
    rng = np.random.default_rng(1)
    return [
        {"x": jnp.asarray(rng.normal(size=(4, 16)), jnp.float32), "y": jnp.asarray(rng.normal(size=(4, 8)))}
        for _ in range(n)
    ]


def _train(trainer: Any, steps: int = 3) -> tuple[list[np.ndarray], int]:
    """(final parameters, how many times the train step compiled), stepping as ``PeftTrainer.train``."""
    with _mesh():
        step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=True)
        for batch in _batches(steps):
            step(batch)
        compiled = step.func.jitted_fn._cache_size()
    return [np.asarray(p) for p in jax.tree.leaves(nnx.state(trainer.model, nnx.Param))], compiled


def _opt_leaves(trainer: Any) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(trainer.optimizer, nnx.optimizer.OptState))


def test_first_step_shards_the_optimizer_without_a_copy() -> None:
    """Tunix's ``_shard_optimizer`` writes a new copy of every optimizer leaf (the old ones still held);
    ours leaves equivalently placed leaves where they are, with the shardings the step compiles for."""
    trainer = _trainer(jnp.bfloat16, None, levers=True)
    before = [x.unsafe_buffer_pointer() for x in _opt_leaves(trainer)]
    with _mesh() as mesh:
        trainer.jit_train_and_eval_step()
    after = _opt_leaves(trainer)
    assert [x.unsafe_buffer_pointer() for x in after] == before
    assert all(x.sharding == jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) for x in after)

    tunix = _trainer(jnp.bfloat16, None, levers=False)  # the copy this avoids, as Tunix makes it
    before = [x.unsafe_buffer_pointer() for x in _opt_leaves(tunix)]
    with _mesh():
        tunix.jit_train_and_eval_step()
    assert not set(x.unsafe_buffer_pointer() for x in _opt_leaves(tunix)) & set(before)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_levers_and_no_accumulator_change_no_number(dtype: Any) -> None:
    """Three steps: Tunix's defaults (``MultiSteps`` of one micro-batch, only the optimizer donated,
    ``_shard_optimizer``) and the trainer's (no wrapper, model donated, in-place sharding) end with
    bit-identical parameters, and each compiles its step once."""
    want, want_compiles = _train(_trainer(dtype, 1, levers=False))
    got_trainer = _trainer(dtype, None, levers=True)
    assert not isinstance(got_trainer.optimizer.tx, optax.MultiSteps)
    got, compiles = _train(got_trainer)
    assert (compiles, want_compiles) == (1, 1)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_one_micro_batch_has_no_accumulator() -> None:
    """``microBatchSize`` = ``miniBatchSize`` (the default): no ``train_micro_batch_size``, so Tunix's
    ``PeftTrainer`` does not wrap the optimizer in ``optax.MultiSteps``, whose float32 copy of the
    gradients (4 bytes per parameter) would otherwise live for the whole run."""
    for grpo in ({"batchSize": 8}, {"batchSize": 8, "miniBatchSize": 4, "microBatchSize": 4}):
        tc = tunix_bridge.training_config(spec(grpo=grpo))
        assert tc.gradient_accumulation_steps is None and tc.train_micro_batch_size is None
    tc = tunix_bridge.training_config(spec(grpo={"batchSize": 8, "miniBatchSize": 4, "microBatchSize": 2}))
    assert (tc.train_micro_batch_size, tc.gradient_accumulation_steps) == (2, 2)
