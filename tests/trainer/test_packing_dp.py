"""Data-parallel packing: rows balanced across shards, and packed GRPO on a 4-device mesh == unpacked.

The mesh needs several devices, which a CPU JAX process only has when XLA_FLAGS asks before JAX starts,
so the sharded part runs in a subprocess (``--xla_force_host_platform_device_count=4``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rljob_trainer.packing.rows import balance_rows, plan_rows, row_costs, shard_imbalance


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=60),
    shards=st.sampled_from([2, 4, 8]),
)
@example(lengths=[25, 25, 25, 25, 40, 40, 40], shards=2)  # LPT worse than the rows' order (CI, 2026-12-07)
def test_balance_gives_every_shard_the_same_rows_and_no_worse_cost(lengths, shards):
    plan = plan_rows(lengths, 64, multiple_of=shards)
    costs = row_costs(plan, 1 / 64)
    new = balance_rows(costs, shards)
    assert sorted(new.tolist()) == list(range(plan.num_rows))  # a permutation: same rows per shard
    balanced = np.empty_like(costs)
    balanced[new] = costs
    assert shard_imbalance(balanced, shards) <= shard_imbalance(costs, shards) + 1e-12
    # LPT bound: no shard exceeds the mean by more than the largest row.
    loads = balanced.reshape(shards, -1).sum(-1)
    assert loads.max() <= loads.mean() + costs.max() + 1e-9


SCRIPT = textwrap.dedent(
    """
    import json
    import jax, numpy as np
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from rljob_trainer.packing.example import pack_train_example, plan_layout
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.rows import plan_rows, row_costs, shard_imbalance
    from rljob_trainer.packing.testing import EOS_ID, PAD_ID, grpo_config, random_train_example, tiny_model
    from tunix.rl.algo_core import grpo_loss_fn

    assert len(jax.devices()) == 4
    mesh = Mesh(np.array(jax.devices()).reshape(4, 1), ("fsdp", "tp"))
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, 5, 16).tolist()
    completions = np.clip(rng.gamma(2.0, 9.0, 16).astype(int), 1, 60).tolist()
    completions[0] = 60
    ex = random_train_example(prompts, completions, max_prompt=4, max_completion=60, seed=2)
    cfg = grpo_config()
    packed, plan = pack_train_example(ex, 64, pad_id=PAD_ID, attention_block=8, row_multiple=4)
    layout = plan_layout(ex.prompt_ids, ex.prompt_mask, ex.completion_ids, ex.completion_mask, 64,
                         pad_id=PAD_ID, attention_block=8, row_multiple=4)
    unbalanced = shard_imbalance(row_costs(plan_rows(np.asarray(plan.length), 64, multiple_of=4), 1 / 64), 4)

    data = NamedSharding(mesh, P("fsdp"))
    repl = NamedSharding(mesh, P())
    def place(x):
        if x is None or x.ndim == 0 or x.shape[0] % 4 or x.dtype == bool and x.ndim == 1:
            return None if x is None else jax.device_put(x, repl)
        return jax.device_put(x, data)
    packed = jax.tree.map(place, packed)
    assert packed.tokens.sharding.spec == P("fsdp") and packed.advantages.sharding.spec == P("fsdp")
    ex = jax.tree.map(place, ex)
    model = tiny_model("qwen3", seed=1)
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, repl)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=8)

    def value_and_grads(loss):
        f = jax.jit(jax.value_and_grad(lambda s, e: loss(nnx.merge(graphdef, s), e)[0]))
        with mesh:
            v, g = f(state, packed if loss is not unpacked_loss else ex)
        return float(v), jax.tree.leaves(g)

    unpacked_loss = lambda m, e: grpo_loss_fn(m, e, cfg, pad_id=PAD_ID, eos_id=EOS_ID)
    want_v, want_g = value_and_grads(unpacked_loss)
    got_v, got_g = value_and_grads(lambda m, e: fn(m, e, cfg))
    print(json.dumps({
        "loss_err": abs(got_v - want_v),
        "grad_err": max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got_g, want_g)),
        "grad_scale": max(float(np.abs(np.asarray(b)).max()) for b in want_g),
        "rows": int(plan.num_rows), "rows_used": int(plan.rows_used),
        "imbalance": layout.shard_imbalance, "imbalance_unbalanced": unbalanced,
    }))
    """
)


def test_packed_grpo_on_a_four_device_mesh_equals_unpacked():
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(out)
    assert out["rows"] % 4 == 0 and out["rows_used"] < 16
    assert out["grad_scale"] > 1e-4
    assert out["loss_err"] < 1e-5 and out["grad_err"] < 1e-5, out
    assert out["imbalance"] <= out["imbalance_unbalanced"] and out["imbalance"] < 1.3, out
