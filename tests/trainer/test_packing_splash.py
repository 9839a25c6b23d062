"""The TPU path: Tunix's own splash attention (Pallas; interpret mode on CPU, the real kernel on the chip
through tests/tpu) on packed rows.

The trainer runs packed qwen3/qwen2 with ``attention="splash"`` on a TPU: the model's flash path,
switched on while the call traces with a block dividing the row; by default each layer's own attention
block up to the final norm and the head at completion columns only (``adapter.packed_hidden(splash=True)``). Here the very same Pallas
kernel runs in interpret mode (``make_splash_mha(interpret=True)``), so its numerics are checked on CPU:
packed per-token log-probs, the GRPO loss and its gradients equal Tunix's unpacked ones within 1e-5, with
Tunix's causal mask over the row and with the mask narrowed to the longest sequence (``flash_attention``'s
window).
"""

from __future__ import annotations

import functools
import importlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel
from rljob_trainer.packing.adapter import resolve_attention
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps
from rljob_trainer.packing.splash import flash_attention, splash_block
from rljob_trainer.packing.testing import EOS_ID, PAD_ID, random_train_example, tiny_model
from tunix.rl import common

from tests.trainer.tolerance import within

ROW, MAX_P, MAX_C, TEMP = 256, 4, 124, 0.9
# Rows of 256 with splash blocks of 128: segments straddle the block boundary, and a row holds several.
PROMPTS = [4, 2, 3, 1, 4, 2, 1]
COMPLETIONS = [124, 50, 90, 1, 30, 61, 7]


@pytest.fixture(autouse=True)
def interpret_splash(monkeypatch):
    """Run the TPU Pallas kernel in interpret mode off TPU (on the chip, the TPU tier: the real kernel),
    inside a mesh (Tunix's flash path shard_maps)."""
    if jax.default_backend() != "tpu":
        make = splash_attention_kernel.make_splash_mha
        monkeypatch.setattr(
            splash_attention_kernel, "make_splash_mha", functools.partial(make, interpret=True)
        )
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    with mesh:
        yield


def example(seed=0, prompts=PROMPTS, completions=COMPLETIONS):
    return random_train_example(prompts, completions, max_prompt=MAX_P, max_completion=MAX_C, seed=seed)


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_splash_logps_equal_unpacked(family):
    model = tiny_model(family, seed=3)
    ex = example()
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID)
    assert plan.rows_used < len(PROMPTS) and splash_block(ROW) == 256
    graphdef, state = nnx.split(model)
    want = np.asarray(
        common.compute_per_token_logps(
            graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=TEMP
        )
    )
    mask = np.asarray(ex.completion_mask)
    # "completions": the layers' own splash blocks up to the final norm, the head at completion columns
    # only (the trainer's default on TPU), whole or in chunks of 64 tokens (the trainer's chunks on a
    # real vocabulary); "rows": the model's own call, head at every column. Window 128: the mask causal
    # within the longest sequence (4 + 124 tokens; the trainer's default when rows hold more), exact. A
    # window two tokens shorter fails here (checked): the longest sequence's second-to-last column, the
    # last that predicts a token, loses its first token.
    cases = [(128, "completions", 0), (256, "completions", 0), (128, "completions", 64), (128, "rows", 0)]
    cases = [(*case, 0) for case in cases] + [(128, "completions", 0, 128), (128, "rows", 0, 128)]
    assert max(p + c for p, c in zip(PROMPTS, COMPLETIONS, strict=True)) == 128
    for block, head_at, chunk, window in cases:  # block 128: across blocks
        logps = jax.jit(
            lambda m, p, b=block, h=head_at, c=chunk, w=window: packed_per_token_logps(
                m, p, temperature=TEMP, attention="splash", block=b, head_at=h, vocab_chunk=c, window=w
            )[0]
        )
        got = np.asarray(logps(model, packed))
        assert within(np.abs(np.where(mask, got - want, 0.0)).max(), 1e-5), (block, head_at, chunk, window)
    assert not model.config.use_flash_attention  # switched on only while the packed call traced


@pytest.mark.slow  # ~1-3 min: interpret-mode Pallas backward kernels
def test_splash_grpo_loss_and_grads_equal_unpacked(grpo_case):
    # One row, three segments across both blocks (interpret-mode VJP kernels are slow on CPU).
    ex = example(seed=2, prompts=[4, 3, 1], completions=[124, 90, 7])
    case = grpo_case("qwen3", ex, row=ROW, attention_block=None)
    assert case.plan.rows_used == 1
    # window 128: the longest sequence (the trainer's default on rows longer than it; splash.flash_attention)
    case.assert_loss_and_grads_equal_unpacked(
        make_packed_grpo_loss_fn(attention="splash", block=128, window=128)
    )


def test_splash_block_divides_the_row_and_families():
    assert [splash_block(n) for n in (128, 384, 512, 1536, 8192)] == [128, 128, 512, 512, 512]
    with pytest.raises(ValueError, match=r"maxSeqTokenPerTpu=200 must be a multiple of 128"):
        splash_block(200)
    assert resolve_attention(tiny_model("qwen2"), "splash") == "splash"
    with pytest.raises(ValueError, match="does not support model family 'llama3'"):
        resolve_attention(tiny_model("llama3"), "splash")


def test_flash_is_on_only_for_the_thread_tracing_the_packed_call():
    """On the chip the train step traced by the prewarm thread beside the first rollout turned the shared
    model's flash path on for the sampler's prefill, which failed (``q_block_size=1024 should divide
    q_seq_len=384``). Here one thread holds ``flash_attention`` open (block 128, window 64) while this one
    calls the model as the sampler's prefill does (16 tokens: splash would refuse them), and the two
    threads leave in the other order than they came."""
    model = tiny_model("qwen3", seed=1)
    module = importlib.import_module(type(model).__module__)  # Tunix's qwen3 model, its ``mask_lib``
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, 100, (2, 16)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((16, 16), bool)), (2, 16, 16))
    prefill = jax.jit(lambda m, t: m(t, positions, None, causal)[0])
    want = np.asarray(prefill(model, tokens))
    prefill = jax.jit(lambda m, t: m(t, positions, None, causal)[0])  # traced again, below
    inside, leave = threading.Event(), threading.Event()
    seen = {}

    def packed_call() -> None:
        with flash_attention(model, 128, 64):
            seen["block"] = model.config.flash_attention_block_size
            inside.set()
            leave.wait(timeout=60)
            seen["after_other_left"] = (
                model.config.use_flash_attention,
                model.config.flash_attention_block_size,
            )
            seen["mask"] = type(module.mask_lib.CausalMask((256, 256))).__name__

    other = threading.Thread(target=packed_call)
    with flash_attention(model, 256):
        other.start()
        assert inside.wait(timeout=60)
        assert (model.config.use_flash_attention, model.config.flash_attention_block_size) == (True, 256)
        assert type(module.mask_lib.CausalMask((256, 256))).__name__ == "CausalMask"  # no window here
    assert not model.config.use_flash_attention  # the other thread is still inside
    got = np.asarray(prefill(model, tokens))  # the sampler's prefill, traced now: Tunix's own attention
    leave.set()
    other.join(timeout=60)
    assert seen == {"block": 128, "after_other_left": (True, 128), "mask": "LocalMask"}
    assert np.array_equal(got, want)
    assert (model.config.use_flash_attention, model.config.flash_attention_block_size) == (False, 1024)
    assert type(module.mask_lib.CausalMask((16, 16))).__name__ == "CausalMask"
