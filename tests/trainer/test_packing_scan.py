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
    "family, remat, vocab_chunk",
    [("qwen3", True, 0), ("qwen3", True, 24), ("qwen2", False, 24), ("llama3", True, 0)],
)
def test_scanned_layers_change_no_number(monkeypatch, family, remat, vocab_chunk):
    model = tiny_model(family, num_layers=LAYERS)
    ex = random_train_example([4, 2, 3, 1], [20, 5, 9, 13], max_prompt=4, max_completion=20, seed=1)
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    monkeypatch.setattr(stack, "REMAT_LAYERS", remat)
    monkeypatch.setattr(stack, "SCAN_LAYERS", False)
    want_loss, want, unrolled_scans = _loss_and_grads(model, packed, vocab_chunk)
    monkeypatch.setattr(stack, "SCAN_LAYERS", True)
    loss, got, scans = _loss_and_grads(model, packed, vocab_chunk)
    assert scans > unrolled_scans, (scans, unrolled_scans)  # the layers did run in a scan
    assert abs(loss - want_loss) <= 1e-5 * max(abs(want_loss), 1e-2)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.abs(g - w).max() <= 1e-5 * np.abs(w).max()
    assert all(np.abs(w).max() > 0 for w in want)  # every layer's weights have a gradient to compare
