"""Models loaded from a checkpoint compute in the dtype their weights load in (``families.computing_in``).

Tunix's qwen2/qwen3 configs default to float32 compute whatever the weights, so a Qwen3-0.6B loaded in
bf16 cast its weights and activations up in every layer and the sampler's KV cache was float32: twice the
bytes the checkpoint asks for (docs/tpu.md). Checked here on the named configs' abstract shapes (no 0.6B
checkpoint is written on CPU; the TPU tier loads one): every matmul of the forward pass with a weight
takes bf16 operands and the sampler's cache is bf16 for every family, and a tiny model (the CPU demo, the exactness tests) stays float32.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from rljob_trainer.models import families, rope

from rljob.api.spec import ModelSpec

NAMED = {"qwen3": "0.6b", "qwen2": "0.5b", "llama3": "1b", "gemma3": "1b"}


def _abstract(spec: ModelSpec, monkeypatch: pytest.MonkeyPatch):
    """The family's model at ``spec``'s config, computing as ``build_model`` makes it, with bf16 (or
    float32) parameters as the loader gives them; shapes only."""
    family = families.FAMILIES[spec.family]
    module = importlib.import_module(family.module)
    dtype = families.weights_dtype(spec)
    config = families.computing_in(families.model_config(spec), dtype)
    if spec.family in rope.PATCHED:  # rope is process state; monkeypatch restores Tunix's
        monkeypatch.setattr(module, "apply_rope", module.apply_rope)
        rope.install(spec.family, {"rope_theta": config.rope_theta}, config.head_dim)
    cls = getattr(module, family.model_class)
    graph, state = nnx.split(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0))))
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, dtype), state)
    return config, graph, state


def _weight_matmul_dtypes(graph, state) -> set:
    """The float dtypes of the operands of every matmul with a weight (an operand shaped as a parameter)
    in a forward pass of 2 x 16 tokens, from its jaxpr. (Attention scores may be float32: Tunix's qwen2
    rope promotes q and k.)"""

    def forward(state, tokens):
        model = nnx.merge(graph, state)
        positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
        mask = jnp.tril(jnp.ones((16, 16), bool))[None].repeat(2, 0)
        return model(tokens, positions, None, mask)[0]

    weights = {leaf.shape for leaf in jax.tree.leaves(state) if len(leaf.shape) >= 2}
    jaxpr = jax.make_jaxpr(forward)(state, jax.ShapeDtypeStruct((2, 16), jnp.int32))
    found: set = set()

    def walk(jp) -> None:
        for eqn in jp.eqns:
            if eqn.primitive.name == "dot_general" and any(v.aval.shape in weights for v in eqn.invars):
                found.update(v.aval.dtype for v in eqn.invars)
            for sub in jax.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return found


@pytest.mark.parametrize("family", sorted(NAMED))
def test_a_named_size_computes_in_its_weights_dtype(monkeypatch, family):
    spec = ModelSpec(family=family, size=NAMED[family])
    assert NAMED[family] in families.FAMILIES[family].sizes, f"{family} has no size {NAMED[family]}"
    assert families.weights_dtype(spec) == jnp.bfloat16
    config, graph, state = _abstract(spec, monkeypatch)
    assert _weight_matmul_dtypes(graph, state) == {jnp.dtype(jnp.bfloat16)}
    # Tunix's sampler gives the KV cache the config's compute dtype, else the parameters' (Sampler.dtype)
    assert getattr(config, "dtype", jax.tree.leaves(state)[0].dtype) == jnp.bfloat16


def test_tiny_stays_float32(monkeypatch):
    spec = ModelSpec(family="qwen3", size="tiny")
    config, *_ = _abstract(spec, monkeypatch)
    assert families.weights_dtype(spec) == jnp.float32
    assert config.dtype == jnp.float32
