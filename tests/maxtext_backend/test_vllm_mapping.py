"""vLLM rollout weights of a MaxText actor, mapped with the adapter's mappings, load into an independent
Qwen3 and give the same logits (CPU; vLLM itself cannot run here).

The path is the trainer's and Tunix's own: ``tunix_bridge.rollout_config`` (backend maxtext, engine vllm)
puts ``maxtext_vllm.mapping_config(actor)`` in ``RolloutConfig.rollout_mapping_config``; Tunix's
``VllmRollout`` turns that into its ``MappingConfig`` (``MappingConfig.build``, the same call), and its
``VllmSampler.update_params`` hands the actor's state to ``utils.transfer_state_with_mappings`` with the
mappings, hook functions and transpose keys; that call is made here into a destination state laid out as
tpu-inference's JAX ``Qwen3ForCausalLM`` (the ``vllm_jax`` backend the mappings name: HF names, einsum
layouts ``q_proj`` [D, N, H], ``o_proj`` [N, H, D], ``gate_proj`` [D, F], ``lm_head`` [D, V]).

That state is then written as a Hugging Face checkpoint (``model.safetensors``, torch ``[out, in]`` linear
layout) and loaded by Tunix's own Qwen3 (``tunix.models.qwen3.params.create_model_from_safe_tensors``), a
second implementation of the architecture: its logits must equal the MaxText actor's within fp32
tolerance. Every parameter is perturbed first, so a swapped, transposed or missing tensor shows.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer import tunix_bridge
from rljob_trainer.models import families as models
from tunix.generate import mappings, utils

from rljob.api import load_rljob, parse_rljob

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # fp32 logits of O(1-10) through two attention implementations (seen: 4e-6)


def vllm_spec(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(ROOT)
    doc = load_rljob(str(ROOT / "examples" / "maxtext-tiny-cpu.yaml")).model_dump(
        mode="json", exclude_none=True
    )
    doc["spec"]["rollout"] = {**doc["spec"].get("rollout", {}), "engine": "vllm"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        doc["spec"]["metrics"] = {"port": s.getsockname()[1]}
    return parse_rljob(doc).spec


def perturbed(model: Any, seed: int) -> Any:
    """A copy of ``model`` with seeded noise on every parameter (norm scales start as exact ones)."""
    model = nnx.clone(model)
    rng = np.random.default_rng(seed)
    flat = nnx.state(model, nnx.Param).flat_state()
    for _, variable in flat:
        value = np.asarray(variable.value)
        variable.value = jnp.asarray(value + 0.05 * rng.standard_normal(value.shape), value.dtype)
    nnx.update(model, nnx.State.from_flat_path(flat))
    return model


def vllm_jax_qwen3_shapes(cfg: Any) -> dict[str, tuple[int, ...]]:
    """tpu-inference's JAX Qwen3ForCausalLM parameters as the mappings name them, with their shapes."""
    d, n, k, h, f, v = (
        cfg.emb_dim,
        cfg.num_query_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
        cfg.mlp_dim,
        cfg.vocab_size,
    )
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "model.lm_head": (d, v)}
    for i in range(cfg.num_decoder_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (d, n, h),
            p + "self_attn.k_proj.weight": (d, k, h),
            p + "self_attn.v_proj.weight": (d, k, h),
            p + "self_attn.o_proj.weight": (n, h, d),
            p + "self_attn.q_norm.weight": (h,),
            p + "self_attn.k_norm.weight": (h,),
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (d, f),
            p + "mlp.up_proj.weight": (d, f),
            p + "mlp.down_proj.weight": (f, d),
        }
    return shapes


def hf_tensors(vllm: dict[str, np.ndarray], d: int) -> dict[str, np.ndarray]:
    """vLLM-JAX einsum layouts -> Hugging Face tensors (what tpu-inference's loader reshapes back)."""
    out = {}
    for name, value in vllm.items():
        if value.ndim == 3:  # [D, heads, head_dim] or [heads, head_dim, D] -> [out, in]
            value = value.reshape(d, -1).T if value.shape[0] == d else value.reshape(-1, d).T
        elif value.ndim == 2 and name != "model.embed_tokens.weight":
            value = value.T
        out["lm_head.weight" if name == "model.lm_head" else name] = np.ascontiguousarray(value)
    return out


def test_vllm_weights_give_the_actors_logits(tiny, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from safetensors.numpy import save_file
    from tunix.models.qwen3 import model as qwen3_model
    from tunix.models.qwen3 import params as qwen3_params

    model, mesh = tiny
    actor = perturbed(model, seed=0)
    cfg = actor.base.config
    assert not cfg.scan_layers  # rljob's default: the case the adapter's own mappings miss

    spec = vllm_spec(monkeypatch)
    rollout = tunix_bridge.rollout_config(spec, models.build_tokenizer(None), None, actor)
    config = mappings.MappingConfig.build(  # Tunix's VllmRollout, verbatim
        mapping_obj=rollout.rollout_mapping_config, model=actor, backend="vllm_jax"
    )
    shapes = vllm_jax_qwen3_shapes(cfg)
    dst = nnx.State.from_flat_path(
        {
            tuple(int(p) if p.isdigit() else p for p in name.split(".")): nnx.Param(
                jnp.zeros(shape, jnp.float32)
            )
            for name, shape in shapes.items()
        }
    )
    synced = utils.transfer_state_with_mappings(
        src_state=nnx.state(actor, nnx.Param),
        dst_state=dst,
        key_mappings=config.to_hf_mappings,
        key_mapping_hook_fns=config.to_hf_hook_fns,
        transpose_keys=config.to_hf_transpose_keys,
    )
    vllm = {".".join(map(str, path)): np.asarray(v.value) for path, v in synced.flat_state()}
    assert vllm.keys() == shapes.keys()
    assert [name for name, value in vllm.items() if not value.any()] == []  # every tensor was synced

    save_file(hf_tensors(vllm, cfg.emb_dim), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    independent = qwen3_params.create_model_from_safe_tensors(
        str(tmp_path),
        qwen3_model.ModelConfig(
            num_layers=cfg.num_decoder_layers,
            vocab_size=cfg.vocab_size,
            embed_dim=cfg.emb_dim,
            hidden_dim=cfg.mlp_dim,
            num_heads=cfg.num_query_heads,
            head_dim=cfg.head_dim,
            num_kv_heads=cfg.num_kv_heads,
            rope_theta=int(cfg.rope_max_timescale),
            norm_eps=cfg.normalization_layer_epsilon,
            use_tied_embedding=False,
        ),
    )

    tokens = jnp.asarray(np.random.default_rng(1).integers(1, cfg.vocab_size, (2, 12)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((12, 12), bool)), (2, 12, 12))
    with mesh:
        want, _ = actor(tokens, positions, None, mask)
    got, _ = independent(tokens, positions, None, mask)
    want, got = np.asarray(want), np.asarray(got)
    assert np.abs(want).max() > 1.0
    assert np.abs(got - want).max() < TOLERANCE


def test_vanilla_engine_gets_no_mappings(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = vllm_spec(monkeypatch)
    spec = spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"engine": "vanilla"})})
    rollout = tunix_bridge.rollout_config(spec, models.build_tokenizer(None), None, tiny[0])
    assert rollout.rollout_mapping_config is None
