"""Per-layer remat of the blocked packed forward (``packing.remat``): exact, and it really cuts memory.

Same math: the packed GRPO loss and every gradient equal those without remat up to float rounding (float32
and bf16 parameters, every blocked family, whole and chunked head). Not bit for bit: XLA fuses the
recomputed attention differently from the forward's, so attention gradients differ by ~1e-7 of their
largest value in float32 (test: 1e-5). Models computing in bf16 (every named size loaded from a checkpoint,
``families.computing_in``) round their recomputed activations differently, so most gradient elements move
(by ~2.5% of the leaf's largest): remat must be as close to float32 math as the plain pass is. Memory: XLA's own buffer assignment of the packed train step at Qwen3-0.6B width (vocabulary cut to 4,096
so it compiles in seconds) grows by less than a quarter per layer of what it grows without remat
(measured ~17 vs ~248 MiB per layer computing in float32), and so it does computing in bf16. Plain
``jax.checkpoint``/``nnx.remat`` fails the memory test on CPU (see ``remat``'s docstring).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import stack
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

ROW, BLOCK = 32, 8


def _grads(model, packed, *, remat: bool, vocab_chunk: int, monkeypatch) -> tuple:
    monkeypatch.setattr(stack, "REMAT_LAYERS", remat)
    graph, state = nnx.split(model)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=BLOCK, vocab_chunk=vocab_chunk)
    step = jax.jit(jax.value_and_grad(lambda st: fn(nnx.merge(graph, st), packed, grpo_config())[0]))
    loss, grads = step(state)
    return np.asarray(loss), [np.asarray(g) for g in jax.tree.leaves(grads)]


# Every pair of the three factors (family x dtype, family x head, dtype x head) in 6 cases, not all 12
# combinations: each case compiles two train steps (CI time, docs/cluster.md).
PAIRWISE = [
    ("qwen3", jnp.float32, 0),
    ("qwen3", jnp.bfloat16, 24),
    ("qwen2", jnp.float32, 24),
    ("qwen2", jnp.bfloat16, 0),
    ("llama3", jnp.float32, 0),
    ("llama3", jnp.bfloat16, 24),
]


@pytest.mark.parametrize(("family", "dtype", "vocab_chunk"), PAIRWISE)
def test_remat_changes_no_number(monkeypatch, family, dtype, vocab_chunk):
    # every parameter random, the MLP's too; bf16: computing in bf16 as a named size's checkpoint does
    model = tiny_model(family, dtype=None if dtype == jnp.float32 else dtype)
    ex = random_train_example([4, 2, 3, 1], [20, 5, 9, 13], max_prompt=4, max_completion=20, seed=1)
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    loss, grads = _grads(model, packed, remat=True, vocab_chunk=vocab_chunk, monkeypatch=monkeypatch)
    want_loss, want_grads = _grads(
        model, packed, remat=False, vocab_chunk=vocab_chunk, monkeypatch=monkeypatch
    )
    # The GRPO loss sums terms of either sign (advantages are zero-mean per group), so float32 rounding
    # follows the terms' scale (~1e-2 here), not their sum's (2e-3 for one case).
    assert abs(loss - want_loss) <= 1e-5 * max(abs(want_loss), 1e-2)
    assert len(grads) == len(want_grads)
    if dtype != jnp.float32:  # computing in bf16: as close to float32 math with remat as without
        state = nnx.split(model)[1]
        exact = nnx.merge(
            nnx.split(tiny_model(family))[0], jax.tree.map(lambda x: x.astype(jnp.float32), state)
        )
        _, ref = _grads(exact, packed, remat=False, vocab_chunk=vocab_chunk, monkeypatch=monkeypatch)
    nonzero = 0
    for i, (got, want) in enumerate(zip(grads, want_grads, strict=True)):
        got, want = got.astype(np.float32), want.astype(np.float32)
        if dtype == jnp.float32:  # float32 rounding, relative to the leaf's largest gradient
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
        else:  # the recomputed forward rounds its bf16 activations differently (XLA fuses it differently),
            # so most elements move by up to ~2.5% of the leaf's largest gradient: as far as bf16 compute
            # is from float32 math anyway (measured per leaf, against the float32 pass: 0.5-4.1% with or
            # without remat). A wrong or missing layer is off by the gradient's own size.
            scale = np.abs(ref[i]).max()
            assert np.abs(want - ref[i]).max() <= 2.0**-4 * scale  # bf16 compute's own error
            assert np.abs(got - ref[i]).max() <= 2.0**-4 * scale
        nonzero += bool(np.abs(want).max() > 0)
    assert nonzero == len(grads)


def _train_step_temp(layers: int, remat: bool, compute: jnp.dtype, monkeypatch) -> int:
    """Bytes of XLA's temp buffers of the packed train step, Qwen3-0.6B width, 4 x 256 tokens in a
    1,024-token row, bf16 parameters, activations in ``compute``; compiled only."""
    from rljob_trainer.models import families as models
    from rljob_trainer.models import rope
    from rljob_trainer.packing.learner import pick_attention_block
    from tunix.models.qwen3 import model as q3

    from rljob.api.spec import ModelSpec

    monkeypatch.setattr(stack, "REMAT_LAYERS", remat)
    config = models.model_config(ModelSpec(family="qwen3", size="0.6b"))
    config = dataclasses.replace(config, num_layers=layers, vocab_size=4096, dtype=compute)
    # Tunix's qwen3 rope is process state (models.rope.install, done by models.build_model): an earlier
    # test's tiny model leaves its head_dim installed. Install this config's rope; monkeypatch restores.
    monkeypatch.setattr(q3, "apply_rope", q3.apply_rope)
    rope.install("qwen3", {"rope_theta": config.rope_theta}, config.head_dim)
    graph, state = nnx.split(nnx.eval_shape(lambda: q3.Qwen3(config, rngs=nnx.Rngs(0))))
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), state)
    ex = random_train_example([192] * 4, [64] * 4, max_prompt=192, max_completion=64, seed=0)
    block = pick_attention_block(1024)
    packed, _ = pack_train_example(ex, 1024, pad_id=PAD_ID, attention_block=block)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=block, vocab_chunk=256)
    step = jax.jit(jax.value_and_grad(lambda st: fn(nnx.merge(graph, st), packed, grpo_config())[0]))
    return step.lower(state).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.slow
@pytest.mark.parametrize("compute", [jnp.float32, jnp.bfloat16])
def test_remat_cuts_train_step_memory_per_layer(monkeypatch, compute):
    per_layer = {
        remat: (
            _train_step_temp(6, remat, compute, monkeypatch)
            - _train_step_temp(2, remat, compute, monkeypatch)
        )
        / 4
        for remat in (False, True)
    }
    assert per_layer[False] > 60 * 2**20  # activations (and float32 weight copies) of every layer
    assert per_layer[True] < per_layer[False] / 4, per_layer


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
def test_the_train_step_traces_a_layer_once_whatever_the_depth(monkeypatch, family):
    """A warm restart traces the train step again (the persistent cache skips only the compile), and the
    chip's host spent 33 s of it tracing remat's backward once per layer (docs/tpu.md). The stack traces
    one layer, forward and backward, and reuses it: tracing the step runs a layer's Python as often for 6
    layers as for 2 (every layer's own trace would make it 3x)."""
    monkeypatch.setattr(stack, "REMAT_LAYERS", True)
    monkeypatch.setattr(stack, "SCAN_LAYERS", False)
    ex = random_train_example([4, 2, 3, 1], [20, 5, 9, 13], max_prompt=4, max_completion=20, seed=1)
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=BLOCK, vocab_chunk=0)
    calls = []
    for layers in (2, 6):
        model = tiny_model(family, num_layers=layers)
        mlp = type(model.layers[0].mlp)
        call = mlp.__call__
        monkeypatch.setattr(
            mlp,
            "__call__",
            lambda self, *a, _call=call, _n=layers, **k: calls.append(_n) or _call(self, *a, **k),
        )
        graph, state = nnx.split(model)
        step = jax.value_and_grad(lambda st, g=graph: fn(nnx.merge(g, st), packed, grpo_config())[0])
        jax.make_jaxpr(step)(state)
        monkeypatch.setattr(mlp, "__call__", call)
    assert calls.count(2) > 0
    assert calls.count(6) == calls.count(2), (calls.count(2), calls.count(6))
