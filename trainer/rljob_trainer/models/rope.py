"""Rope frequencies from config.json for Tunix's qwen3 and llama3, which hard-code them.

Tunix 0.1.7's ``qwen3`` and ``llama3`` attention call their module's ``apply_rope(x, positions,
head_dim=...)`` without the config's ``rope_theta``, so every model of those families rotates with theta
1e6 and no scaling, whatever the checkpoint says (Llama 3.2: theta 5e5 with ``llama3`` scaling). The
packed forward (``packing/adapter.py``) calls the same module function. ``install`` replaces that
function with one rotating by the config's frequencies (same half-split rotation as Tunix's), so both
paths follow config.json.

It is process state, one rope per family: ``models.build_model`` installs it each time it builds a
model, and a trainer process builds one model geometry (actor and reference share it). qwen2 and gemma3
read their config's rope themselves and are left alone.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

PATCHED = ("qwen3", "llama3")


def inverse_frequencies(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """float32 inverse frequencies as ``transformers`` computes them: ``1 / theta ** (2i / d)``, then, for
    ``llama3`` scaling (Meta's Llama 3.1 rule), long wavelengths divided by ``factor``, short ones kept and
    a smooth blend between."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = (np.float32(1.0) / np.float32(rope["rope_theta"]) ** exponents).astype(np.float32)
    if rope.get("rope_type") != "llama3":
        return inv
    factor = np.float32(rope["factor"])
    low, high = np.float32(rope["low_freq_factor"]), np.float32(rope["high_freq_factor"])
    original = np.float32(rope["original_max_position_embeddings"])
    wavelen = np.float32(2 * np.pi) / inv
    scaled = np.where(wavelen > original / low, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < original / high) & ~(wavelen > original / low)
    return np.where(medium, blended, scaled).astype(np.float32)


def install(family: str, rope: dict[str, Any], head_dim: int) -> None:
    """Make ``tunix.models.<family>.model.apply_rope`` rotate by ``rope`` (qwen3 and llama3 only)."""
    if family not in PATCHED:
        return
    module = importlib.import_module(f"tunix.models.{family}.model")
    if getattr(module.apply_rope, "rljob_rope", None) == (rope, head_dim):
        return  # already rotating so: keep what is compiled
    inv = inverse_frequencies(rope, head_dim)

    def apply_rope(
        inputs: jax.Array, positions: jax.Array, head_dim: int = head_dim, rope_theta: Any = None
    ) -> jax.Array:
        """Tunix's rotation (first half / second half) with config.json's frequencies."""
        angles = (
            positions[..., jnp.newaxis].astype(jnp.float32) * jnp.asarray(inv)[jnp.newaxis, jnp.newaxis, :]
        )
        angles = angles[..., jnp.newaxis, :]
        sin, cos = jnp.sin(angles), jnp.cos(angles)
        first, second = jnp.split(inputs, 2, axis=-1)
        out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
        return out.astype(inputs.dtype)

    apply_rope.rljob_rope = (rope, head_dim)  # type: ignore[attr-defined]
    module.__dict__.setdefault("tunix_apply_rope", module.apply_rope)  # Tunix's own, for ``restore``
    _swap(module, apply_rope)


def restore(family: str) -> None:
    """Tunix's own rotation back in ``tunix.models.<family>.model`` (a no-op if never installed): the
    install is process state, and a process that builds models of different checkpoints in turn (the
    tests) must not carry one's frequencies to the next."""
    module = sys.modules.get(f"tunix.models.{family}.model")
    if module is not None and hasattr(module, "tunix_apply_rope"):
        _swap(module, module.tunix_apply_rope)


def _swap(module: Any, apply_rope: Any) -> None:
    """Put ``apply_rope`` in ``module`` and, if that changes it, drop JAX's compiled programs: a function
    jitted before the swap (Tunix's module-level ``nnx.jit`` log-prob passes) would otherwise keep the
    rotation it was traced with, since a jit cache is keyed by shapes, not by the globals it called."""
    if module.apply_rope is apply_rope:
        return
    module.apply_rope = apply_rope
    jax.clear_caches()
