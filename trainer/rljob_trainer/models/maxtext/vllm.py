"""Weight sync from a MaxText actor to Tunix's vLLM rollout: the Tunix adapter's own mappings, per layer.

MaxText's Tunix adapter (``to_hf_mappings``, ``to_hf_transpose_keys``, ``to_hf_hook_fns``) describes a
*scanned* decoder: one source key per kind of layer parameter (``base.decoder.layers.mlp.wi_0.kernel``)
with a ``layer`` axis in its sharding, which Tunix's ``transfer_state_with_mappings`` unrolls into the
vLLM model's ``model.layers.<i>.mlp.gate_proj.weight``. rljob builds MaxText decoders unscanned by default
(``scan_layers: false``: parameters ``base.decoder.layers_<i>....``). With the adapter's mappings as they
are, Tunix finds no mapping for any layer parameter, logs one error per key and syncs only the embedding,
final norm and head (on the tiny decoder: logits off by 5.7; tests/maxtext_backend/test_vllm_mapping.py).

``mapping_config`` therefore rewrites each scanned entry into one entry per layer (the same target with
``*`` filled in, the sharding without its ``layer`` axis), and hook functions and transpose keys named by
a scanned source key likewise; a model built with ``scan_layers: true`` gets the adapter's mappings
unchanged. LoRA mappings stay as they are (rljob trains no LoRA). Imported only for backend maxtext with the vLLM engine (``tunix_bridge.rollout_config``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

SCANNED = "base.decoder.layers."


def _layer_key(key: str, layer: int) -> str:
    return key.replace(SCANNED, f"base.decoder.layers_{layer}.", 1)


def unscanned_mappings(mappings: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """``{source: (target, sharding)}`` for a scanned decoder -> the same for per-layer parameters."""
    out: dict[str, Any] = {}
    for source, (target, sharding) in mappings.items():
        if sharding and "layer" in sharding:
            rest = tuple(axis for axis in sharding if axis != "layer")
            for layer in range(num_layers):
                out[_layer_key(source, layer)] = (target.replace("*", str(layer), 1), rest)
        else:
            out[source] = (target, sharding)
    return out


def unscanned_keys(table: dict[str, Any] | None, num_layers: int) -> dict[str, Any] | None:
    """Hook functions / transpose axes keyed by scanned source keys -> one entry per layer (others kept)."""
    if not table:
        return table
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key.startswith(SCANNED):
            out.update({_layer_key(key, layer): value for layer in range(num_layers)})
        else:
            out[key] = value
    return out


def mapping_config(model: Any) -> Any:
    """Tunix's ``MappingConfig`` for ``model`` (a ``TunixMaxTextAdapter``), matching its parameter layout."""
    from tunix.generate import mappings

    config = mappings.MappingConfig.build(model=model, backend="vllm_jax")
    maxtext = model.base.config
    if maxtext.scan_layers:
        return config
    n = maxtext.num_decoder_layers
    return dataclasses.replace(
        config,
        to_hf_mappings=unscanned_mappings(config.to_hf_mappings or {}, n),
        to_hf_hook_fns=unscanned_keys(config.to_hf_hook_fns, n),
        to_hf_transpose_keys=unscanned_keys(config.to_hf_transpose_keys, n),
    )
