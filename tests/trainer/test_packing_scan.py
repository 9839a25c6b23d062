"""The packed forward's layers in one ``lax.scan`` (``stack.SCAN_LAYERS``): the same loss and gradients
as one copy of the layer per layer, every blocked family, with and without remat, with the last layer
split off for the head at completion columns (``vocab_chunk``) and without. Four random layers, so a scan
that applied the layers in another order, or one layer's weights to all, changes the numbers.

What it buys, compiled for v5e (``bench/tpu_aot.py train --scan-layers``, docs/tpu.md): one layer to trace
and compile instead of 28, and an executable a tenth of the size; what it costs: temporaries.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import stack
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

ROW, BLOCK, LAYERS = 32, 8, 4


def _loss_and_grads(model, packed, vocab_chunk: int) -> tuple[np.ndarray, list[np.ndarray], int]:
    """The packed GRPO loss, its gradients, and the scans of the decoder's length in its program."""
    graph, state = nnx.split(model)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=BLOCK, vocab_chunk=vocab_chunk)
    step = jax.value_and_grad(lambda st: fn(nnx.merge(graph, st), packed, grpo_config())[0])
    scanned = LAYERS - 1 if vocab_chunk else LAYERS  # the last layer runs apart when split off
    scans = len(re.findall(rf"length={scanned}\b", str(jax.make_jaxpr(step)(state))))
    loss, grads = jax.jit(step)(state)
    return np.asarray(loss), [np.asarray(g) for g in jax.tree.leaves(grads)], scans


@pytest.mark.parametrize(
    "family, remat, vocab_chunk, saved",
    [
        ("qwen3", True, 0, "all"),
        ("qwen3", True, 24, None),
        ("qwen2", False, 24, None),
        ("llama3", True, 0, "mlp"),
        ("qwen3", True, 0, "everything"),
    ],
)
def test_scanned_layers_change_no_number(monkeypatch, family, remat, vocab_chunk, saved):
    """The layers in a scan compute what the unrolled layers do; with ``saved`` (``stack.SAVE_DOTS``) the
    scan's backward also recomputes fewer matmuls, keeping their outputs from the forward instead."""
    model = tiny_model(family, num_layers=LAYERS)
    ex = random_train_example([4, 2, 3, 1], [20, 5, 9, 13], max_prompt=4, max_completion=20, seed=1)
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    monkeypatch.setattr(stack, "REMAT_LAYERS", remat)
    monkeypatch.setattr(stack, "SCAN_LAYERS", False)
    want_loss, want, unrolled_scans = _loss_and_grads(model, packed, vocab_chunk)
    monkeypatch.setattr(stack, "SCAN_LAYERS", True)
    if saved:
        recomputed = _dots(model, packed)
        monkeypatch.setattr(stack, "SAVE_DOTS", saved)
        # "mlp" keeps the gate and up projections: two fewer matmuls recomputed a layer; "all" keeps q, k,
        # v, o, gate and up (the down projection's output is never needed by the backward)
        # "everything" keeps those and the blocked attention's two (scores, weighted values): nothing of the
        # layer's forward is recomputed
        assert recomputed - _dots(model, packed) == {"mlp": 2, "all": 6, "everything": 8}[saved]
    loss, got, scans = _loss_and_grads(model, packed, vocab_chunk)
    assert scans > unrolled_scans, (scans, unrolled_scans)  # the layers did run in a scan
    assert abs(loss - want_loss) <= 1e-5 * max(abs(want_loss), 1e-2)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.abs(g - w).max() <= 1e-5 * np.abs(w).max()
    assert all(np.abs(w).max() > 0 for w in want)  # every layer's weights have a gradient to compare


def _dots(model, packed) -> int:
    """Matmuls (``dot_general``) in the packed loss's gradient program: fewer when the scan's backward
    recomputes fewer of them."""
    graph, state = nnx.split(model)
    fn = make_packed_grpo_loss_fn(attention="blocked", block=BLOCK, vocab_chunk=0)
    grad = jax.grad(lambda st: fn(nnx.merge(graph, st), packed, grpo_config())[0])
    return str(jax.make_jaxpr(grad)(state)).count("dot_general")


def test_a_tpu_scans_by_default_and_cpu_unrolls(monkeypatch):
    """``SCAN_LAYERS`` None (the default): the layers scan on a TPU, where the chip timed it (docs/tpu.md,
    2026-12-06 22:25), and stay unrolled on CPU, where the trainer's own remat is what bounds memory."""
    assert stack.SCAN_LAYERS is None
    assert not stack.scans()  # this suite runs on CPU
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert stack.scans()
    # an explicit choice wins (bench/tpu.py --unrolled-layers)
    monkeypatch.setattr(stack, "SCAN_LAYERS", False)
    assert not stack.scans()


def test_the_token_budget_plans_for_the_scanned_layers_as_compiled_for_v5e(monkeypatch):
    """Scanned layers hold more than unrolled ones, growing with the depth (the chip's example fit, but a
    deeper model would not by luck). Compiled for v5e (bench/results/tpu-aot.json, Qwen3-0.6B, 2026-12-06
    23:00) each scanned layer added 147 MB of temporaries at one row of 8,192 tokens and 218 MB at two;
    the plan must cover both, and the chip's example (11.31 GiB free after the state) gets one-row chunks
    where unrolled it gets the two it ran."""
    from rljob_trainer import memory
    from tunix.models.qwen3 import model as qwen3

    config = qwen3.ModelConfig.qwen3_0p6b()
    model = nnx.eval_shape(lambda: qwen3.Qwen3(config, rngs=nnx.Rngs(0)))
    per_layer = sum(x.size for x in jax.tree.leaves(nnx.state(model.layers[0], nnx.Param)))
    for tokens, measured in ((8192, 147e6), (16384, 218e6)):
        planned = memory.SCAN_BYTES_PER_LAYER_PARAMETER * per_layer
        planned += memory.SCAN_VECTORS_PER_LAYER_TOKEN * 4 * config.embed_dim * tokens
        assert measured <= planned <= 1.25 * measured, (tokens, planned)
    free = int(11.31 * 2**30)  # the chip's log: "11.31 GiB free after the training state"
    monkeypatch.setattr(memory, "free_hbm_bytes", lambda: free)
    unrolled, scanned = memory.token_budget(None, model), memory.token_budget(None, model, scan=True)
    assert 2 * 8192 <= unrolled < 3 * 8192, unrolled  # the chip logged 18,524: chunks of 2 rows
    assert 8192 <= scanned < 2 * 8192, scanned
    assert memory.token_budget(4096, model, scan=True) == 4096  # the RLJob's value wins


@pytest.mark.slow
def test_the_trainer_plans_its_budget_for_the_layers_it_scans(monkeypatch):
    """Through the trainer's entry with the layers scanned (a TPU's default, forced here on CPU): the packed
    learner's token budget is planned for the scan (``scan=True``), and two steps train with it."""
    from rljob_trainer import memory
    from rljob_trainer.run import main as trainer_main

    from rljob.api import parse_rljob
    from tests import procs
    from tests.trainer.manifests import tiny_rljob

    planned: list[bool] = []
    budget = memory.token_budget
    monkeypatch.setattr(
        memory, "token_budget", lambda *a, scan=False: planned.append(scan) or budget(*a, scan=scan)
    )
    monkeypatch.setattr(stack, "SCAN_LAYERS", True)
    doc = tiny_rljob(
        maxTargetLength=48,
        rollout={"engine": "vanilla", "temperature": 1.0},
        grpo={"numGenerations": 4, "batchSize": 2, "beta": 0.0, "maxSteps": 2, "maxTokensPerTpu": 256},
        packing={"maxSeqTokenPerTpu": 128},
        metrics={"port": procs.free_port()},
    )
    run = trainer_main.train(parse_rljob(doc))
    assert planned == [True]
    assert [r.step for r in run.recorder.reports] == [1, 2]
    assert all(np.isfinite(r.reward_mean) for r in run.recorder.reports)
