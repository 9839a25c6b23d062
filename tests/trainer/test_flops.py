"""Model FLOPs and MFU against hand calculations (the arithmetic is written out, not recomputed by formula).

Qwen3-0.6B as Tunix configures it (``ModelConfig.qwen3_0p6b``): 28 layers, width 1024, MLP 3072, 16 query
heads and 8 k/v heads of 128, vocabulary 151936, tied embeddings. Qwen's model card gives 0.44 B
non-embedding parameters; the matmul count below is those plus the LM head.
"""

from __future__ import annotations

import pytest
from rljob_trainer.models import families as models
from rljob_trainer.telemetry import flops

from rljob.api import tpu
from rljob.api.spec import ModelSpec

QWEN3_0P6B = flops.ModelShape(
    num_layers=28,
    embed_dim=1024,
    hidden_dim=3072,
    num_heads=16,
    head_dim=128,
    num_kv_heads=8,
    vocab_size=151936,
)


def test_shape_comes_from_tunix_config() -> None:
    config = models.model_config(ModelSpec(family="qwen3", size="0.6b", checkpointPath="gs://b-x/q"))
    assert flops.shape_of(config) == QWEN3_0P6B


def test_qwen3_0p6b_matmul_params_by_hand() -> None:
    # per layer: q 1024 x (16 x 128) = 2,097,152; k and v 2 x 1024 x (8 x 128) = 2,097,152;
    #            o (16 x 128) x 1024 = 2,097,152  -> attention 6,291,456
    #            MLP gate + up + down 3 x 1024 x 3072 = 9,437,184
    #            layer total 15,728,640; x 28 layers = 440,401,920 (the card's 0.44 B non-embedding)
    # LM head 1024 x 151,936 = 155,582,464
    assert flops.matmul_params(QWEN3_0P6B) == 440_401_920 + 155_582_464 == 595_984_384


def test_qwen3_0p6b_flops_per_token_by_hand() -> None:
    # forward at T = 1024: 2 N = 1,191,968,768; attention 4 x 28 x (16 x 128) x 1024 = 234,881,024
    assert flops.forward_flops_per_token(QWEN3_0P6B, 1024) == 1_191_968_768 + 234_881_024 == 1_426_849_792
    # training: 6 N + 12 L H Q T = 3 x forward
    assert flops.train_flops_per_token(QWEN3_0P6B, 1024) == 4_280_549_376


def test_mfu_of_a_v6e_step_by_hand() -> None:
    """A 10 s step on a v6e 2x4 slice (8 chips at 918 TFLOP/s bf16), 4096 real tokens, T = 1024, one
    iteration, passes: rollout (forward), reference (forward), actor update (train)."""
    f = flops.step_flops(
        models.model_config(ModelSpec(family="qwen3", size="0.6b", checkpointPath="gs://b-x/q")),
        seq_len=1024,
        iterations=1,
        chips=8,
        peak=flops.peak_flops("tpu-v6e-slice", "tpu"),
    )
    tokens = 4096
    step = sum(f.phase_flops(p, tokens) for p in ("rollout", "reference", "train", "weight_sync"))
    # 4096 x (4,280,549,376 + 2 x 1,426,849,792) = 4096 x 7,134,248,960 = 29,221,883,740,160 FLOPs
    assert step == 29_221_883_740_160
    # MFU = 29,221,883,740,160 / (10 s x 8 chips x 918e12 FLOP/s) = 29,221,883,740,160 / 7.344e16
    assert f.mfu(step, 10.0) == pytest.approx(3.97901e-4, rel=1e-5)


def test_numiterations_repeat_the_training_pass_only() -> None:
    f = flops.StepFlops(forward_per_token=2, train_per_token=6, iterations=3, chips=1, peak_per_chip=None)
    assert (f.phase_flops("train", 10), f.phase_flops("old_logps", 10), f.phase_flops("weight_sync", 10)) == (
        180,
        20,
        0,
    )

    # by_phase keeps only phases with model passes; the step's total is what MFU divides
    assert f.by_phase(["rollout", "train", "weight_sync"], 10) == {"rollout": 20, "train": 180}


def test_tokens_per_chip_is_absent_for_a_step_of_no_time() -> None:
    f = flops.StepFlops(forward_per_token=2, train_per_token=6, iterations=1, chips=4, peak_per_chip=None)
    assert f.tokens_per_chip(800, 2.0) == 100.0
    assert f.tokens_per_chip(800, 0.0) is None  # the gauge keeps its last value rather than showing 0


def test_moe_counts_the_routed_experts_and_the_router() -> None:
    moe = flops.ModelShape(1, 8, 4, 1, 8, 1, 10, num_experts=16, num_experts_per_tok=2)
    # attention 8x8 + 2x8x8 + 8x8 = 256; experts 2 x (3 x 8 x 4) = 192; router 8 x 16 = 128; head 8 x 10
    assert flops.matmul_params(moe) == 256 + 192 + 128 + 80


def test_peak_only_on_a_tpu_backend_and_every_generation_has_a_sourced_peak() -> None:
    assert flops.peak_flops("tpu-v6e-slice", "cpu") is None  # a CPU run of a TPU RLJob: no MFU
    assert flops.peak_flops("tpu-v6e-slice", "tpu") == 918e12
    assert flops.StepFlops(1, 3, 1, 8, None).mfu(1e12, 1.0) is None
    want = {"v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12, "v7x": 2307e12}
    assert {g.name: g.peak_bf16_flops for g in tpu.GENERATIONS} == want
    for g in tpu.GENERATIONS:
        assert g.peak_source.startswith("https://cloud.google.com/tpu/docs/"), g
