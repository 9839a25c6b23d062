"""config.json -> Tunix config: Hub configs of real models are carried (or refused) key by key.

The shapes come from ``spec.model.size`` and must match; every other key comes from config.json. The
real case from Tunix's own config table: ``qwen2`` size ``1.5b`` is Tunix's Qwen2.5-1.5B (rope 1e6,
tied), but DeepSeek-R1-Distill-Qwen-1.5B has the same shapes with rope 1e4 and its own head; it must
build a config with rope 1e4 and an untied head. (The loading itself is exact at tiny widths:
test_checkpoint_reference.py's ``qwen2-untied``.) The config.json texts below are those the Hub repos
publish, in the Hub's spelling (``rope_theta``/``rope_scaling``, not transformers 5's ``rope_parameters``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from rljob_trainer.models import families as models
from rljob_trainer.models import hf_config

from rljob.api.spec import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
QWEN2_1P5B = {
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-06,
    "max_window_layers": 21,
    "sliding_window": 4096,
    "use_sliding_window": False,
    "hidden_act": "silu",
}
DISTILL = {**QWEN2_1P5B, "rope_theta": 10000, "tie_word_embeddings": False}  # DeepSeek-R1-Distill-Qwen-1.5B
QWEN25 = {**QWEN2_1P5B, "rope_theta": 1000000.0, "tie_word_embeddings": True}  # Qwen2.5-1.5B
LLAMA32_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
}
GEMMA3_270M = {
    "model_type": "gemma3_text",
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_attention_heads": 4,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "vocab_size": 262144,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": 512,
    "_sliding_window_pattern": 6,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "hidden_activation": "gelu_pytorch_tanh",
}


def spec(family: str, size: str) -> ModelSpec:
    return ModelSpec(family=family, size=size, checkpointPath="/ckpt")


@pytest.mark.parametrize(("hf", "rope", "tied"), [(DISTILL, 10000, False), (QWEN25, 1e6, True)])
def test_qwen2_1p5b_takes_rope_and_head_from_config_json(hf: dict, rope: float, tied: bool) -> None:
    config = models.config_from_hf(spec("qwen2", "1.5b"), hf)
    assert (config.rope_theta, config.use_tied_embedding) == (rope, tied)
    assert (config.num_layers, config.embed_dim, config.vocab_size) == (28, 1536, 151936)


def test_llama32_rope_scaling_is_carried() -> None:
    from rljob_trainer.models import rope

    config = models.config_from_hf(spec("llama3", "1b"), LLAMA32_1B)
    assert (config.rope_theta, config.norm_eps, config.weight_tying) == (500000.0, 1e-5, True)
    carried = hf_config.carry("llama3", LLAMA32_1B, models.named_fields(spec("llama3", "1b")), "config.json")
    assert carried.rope is not None and carried.rope["rope_type"] == "llama3"
    inv = rope.inverse_frequencies(carried.rope, 64)
    # highest frequency kept, lowest (wavelength past 8192 / 1) divided by the factor 32
    assert inv[0] == pytest.approx(1.0)
    assert inv[-1] == pytest.approx(500000.0 ** (-62 / 64) / 32, rel=1e-5)


def test_gemma3_270m_hub_config_is_carried() -> None:
    config = models.config_from_hf(spec("gemma3", "270m"), {**GEMMA3_270M, "sliding_window": 128})
    assert config.sliding_window_size == 128
    assert (config.local_base_frequency, config.global_base_frequency) == (10000.0, 1e6)


def test_gemma3_linear_rope_scaling_is_carried() -> None:
    hf = {**GEMMA3_270M, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert models.config_from_hf(spec("gemma3", "270m"), hf).global_scale_factor == 8.0


@pytest.mark.parametrize(
    ("family", "size", "hf", "expected"),
    [
        ("qwen2", "1.5b", {**DISTILL, "use_sliding_window": True}, "use_sliding_window is True"),
        ("llama3", "1b", {**LLAMA32_1B, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn'"),
        ("gemma3", "270m", {**GEMMA3_270M, "rope_local_base_freq": 1e6}, None),
        ("gemma3", "270m", {**GEMMA3_270M, "layer_types": ["full_attention"] * 17}, "for each of the 18"),
        ("gemma3", "270m", {**GEMMA3_270M, "rms_norm_eps": 1e-5}, "rms_norm_eps is 1e-05"),
        ("gemma3", "270m", {**GEMMA3_270M, "num_hidden_layers": 26}, "num_hidden_layers is 26, but"),
        ("qwen2", "1.5b", {**DISTILL, "hidden_act": "gelu"}, "hidden_act is 'gelu'"),
    ],
)
def test_hub_config_variants(family: str, size: str, hf: dict, expected: str | None) -> None:
    carried = hf_config.carry(family, hf, models.named_fields(spec(family, size)), "config.json")
    if expected is None:
        assert carried.errors == []
    else:
        assert any(expected in e for e in carried.errors), carried.errors


@pytest.mark.parametrize("family", sorted(models.FAMILIES))
def test_named_sizes_read_from_source_equal_tunix_configs(family: str) -> None:
    """``named_fields`` reads Tunix's source with ast (no JAX): it must agree with the imported configs."""
    info = models.FAMILIES[family]
    config_cls = importlib.import_module(info.module).ModelConfig
    for size, method in info.sizes.items():
        real = getattr(config_cls, method)()
        for key, value in models.named_fields(spec(family, size)).items():
            if key in hf_config.SHAPES.values() or key == "num_embed":
                assert getattr(real, key) == value, (family, size, key)


def test_docs_list_every_key() -> None:
    text = (ROOT / "docs" / "trainer.md").read_text()
    for table in (hf_config.KEYS, hf_config.NO_EFFECT):
        for family, keys in table.items():
            for key, what in keys.items():
                assert f"| {family} | `{key}` | {what} |" in text, (family, key)


TRANSFORMERS_CONFIGS = {  # family -> transformers' config classes whose keys a config.json may hold
    "qwen3": ("Qwen3Config",),
    "qwen2": ("Qwen2Config",),
    "llama3": ("LlamaConfig",),
    "gemma3": ("Gemma3TextConfig", "Gemma3Config"),  # Gemma3Config: a multimodal checkpoint's outer keys
}
HUB_CONFIGS = {"qwen2": [DISTILL, QWEN25], "llama3": [LLAMA32_1B], "gemma3": [GEMMA3_270M]}


def classified(family: str) -> set[str]:
    """config.json keys the tables name for ``family``: ``"a / b.c"`` and ``"a, b"`` name a, b (and b.c's
    top-level b)."""
    rows = [*hf_config.KEYS[family], *hf_config.NO_EFFECT["all"], *hf_config.NO_EFFECT[family]]
    return {part.split(".")[0] for row in rows for part in row.replace(" / ", ", ").split(", ")}


@pytest.mark.parametrize("family", sorted(TRANSFORMERS_CONFIGS))
def test_every_key_of_the_family_is_carried_refused_or_has_no_effect(family: str) -> None:
    """Every key transformers writes for the family (a default instance's ``to_dict()``, the Hub configs
    above, the fixture checkpoints' config.json) is in ``KEYS`` (carried, checked or refused) or in
    ``NO_EFFECT`` with its reason: a key transformers adds fails here until someone reads what it does."""
    import json

    import transformers

    keys = set()
    for name in TRANSFORMERS_CONFIGS[family]:
        keys |= set(getattr(transformers, name)().to_dict())
    for hf in HUB_CONFIGS.get(family, []):
        keys |= set(hf)
    for path in (ROOT / "tests" / "trainer" / "fixtures" / "checkpoints").glob(f"{family}-*/config.json"):
        keys |= set(json.loads(path.read_text()))
    assert keys - classified(family) == set()
    both = [
        k for k in hf_config.KEYS[family] if k in hf_config.NO_EFFECT["all"] | hf_config.NO_EFFECT[family]
    ]
    assert both == []


def test_rope_install_reaches_programs_jitted_before_it() -> None:
    """A program jitted before ``rope.install`` (Tunix's module-level ``nnx.jit`` log-prob passes) rotates
    by the installed frequencies after it, and by Tunix's again after ``restore``: a jit cache is keyed by
    shapes, not by the module function it traced, so the swap must drop it (CI once compared a pass cached
    under one checkpoint's rope with a fresh one under Tunix's: 1.02 apart)."""
    import importlib

    import jax
    import jax.numpy as jnp
    import numpy as np
    from rljob_trainer.models import rope

    module = importlib.import_module("tunix.models.qwen3.model")
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5, 2, 16)), jnp.float32)
    positions = jnp.arange(5)[None, :]
    rotate = jax.jit(lambda x, p: module.apply_rope(x, p, head_dim=16))
    tunix = np.asarray(rotate(x, positions))
    try:
        rope.install("qwen3", {"rope_theta": 100.0}, head_dim=16)
        want = np.asarray(module.apply_rope(x, positions, head_dim=16))
        assert np.abs(want - tunix).max() > 0.1  # the two rotations differ
        np.testing.assert_allclose(np.asarray(rotate(x, positions)), want, atol=1e-6)
    finally:
        rope.restore("qwen3")
    np.testing.assert_allclose(np.asarray(rotate(x, positions)), tunix, atol=1e-6)
