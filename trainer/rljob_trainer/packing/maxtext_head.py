"""MaxText's ``segments`` path stopped before the output head, and MaxText's head on gathered rows.

Why: the head at completion columns only (``head.completion_head_logps``) needs the final-norm hidden
states of the packed rows, but ``TunixMaxTextAdapter.__call__`` returns logits only. MaxText's own
decoder (``NNXDecoder.__call__``) returns ``(logits, hidden_state, kv_caches)``, where ``hidden_state``
is the last layer's output before the final norm; its ``apply_output_head`` then applies
``decoder_norm``, dropout and the head (tied ``attend_on_embedding`` with MaxText's normalisation and
soft cap, or ``logits_dense``), and takes ``normalize_y=False`` for states already normed. So nothing of
MaxText is rewritten here: ``final_hidden`` calls the decoder with the arguments ``Transformer.__call__``
passes and MaxText's ``decoder_norm``; ``apply_head`` is MaxText's ``apply_output_head``. The decoder
still builds its whole-row logits, unused: under ``jit`` (every trainer pass) XLA removes them
(``tests/maxtext_backend/test_head_completions.py`` checks the compiled step has no ``[R, L, V]`` array).

Nothing here imports MaxText: the model is told by its module (``adapter.family_of``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

MODEL_MODE_TRAIN = "train"  # maxtext.common.common_types.MODEL_MODE_TRAIN: the adapter's call mode
ADAPTER_DETERMINISTIC = False  # TunixMaxTextAdapter calls Transformer with enable_dropout=True


def is_maxtext(model: Any) -> bool:
    """A model behind MaxText's Tunix adapter (told by module name, as ``adapter.family_of``)."""
    return type(model).__module__.split(".")[0] == "maxtext"


def refusal(model: Any) -> str | None:
    """Why the head at completions cannot be exact for this MaxText config, or None where it can.

    MTP: ``Transformer.__call__`` runs its multi-token-prediction block on the whole-row states, which
    the decoder call here skips. Dropout > 0: random masks differ between the two heads, so exactness
    is not defined. Vocabulary tiling / vLLM attention: MaxText's decoder returns no logits there (the
    whole-row path does not run either). Explicit sharding: the gathered ``[K, D]`` rows have no
    sharding of MaxText's logical axes (untested).
    """
    cfg = model.base.config
    if getattr(cfg, "mtp_num_layers", 0) > 0:
        return "mtp_num_layers > 0 (MaxText's call runs its MTP block on the whole rows)"
    if cfg.dropout_rate > 0:
        return f"dropout_rate {cfg.dropout_rate} > 0 (the two heads would draw different masks)"
    if cfg.num_vocab_tiling > 1:
        return "num_vocab_tiling > 1 (MaxText's decoder returns no logits in train mode)"
    if cfg.attention in ("vllm_rpa", "vllm_batched_rpa"):
        return f"attention {cfg.attention!r} (MaxText's decoder returns no logits)"
    if str(getattr(cfg.shard_mode, "value", cfg.shard_mode)) != "auto":
        return f"shard_mode {cfg.shard_mode} (gathered rows carry no MaxText sharding)"
    if getattr(cfg, "use_multimodal", False):
        return "use_multimodal (MaxText's call would also run its vision encoder)"
    return None


def final_hidden(model: Any, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """``[R, L, D]`` final-norm hidden states of packed rows, masked by ``segment_ids`` as the adapter's
    own call does (``decoder_segment_ids``; one id array for queries and keys)."""
    base = model.base
    out = base.decoder(
        shared_embedding=base.token_embedder,
        decoder_input_tokens=tokens,
        decoder_positions=positions,
        decoder_segment_ids=segment_ids,
        deterministic=ADAPTER_DETERMINISTIC,
        model_mode=MODEL_MODE_TRAIN,
    )
    hidden = out[1]  # (logits, hidden_state, kv_caches[, expert_indices]); logits unused (see module)
    return base.decoder.decoder_norm(hidden)


def apply_head(model: Any, x: jax.Array) -> jax.Array:
    """MaxText's output head on final-norm states ``[B, N, D]``: ``apply_output_head`` without its norm."""
    base = model.base
    return base.decoder.apply_output_head(
        base.token_embedder, x, ADAPTER_DETERMINISTIC, MODEL_MODE_TRAIN, normalize_y=False
    )


def head_dtype(model: Any) -> Any:
    """The dtype MaxText's head multiplies in (``logits_dot_in_fp32`` or the compute dtype)."""
    cfg = model.base.config
    return jnp.float32 if cfg.logits_dot_in_fp32 else cfg.dtype


def head_weight(model: Any) -> jax.Array:
    """``[V, D]`` matrix of MaxText's head, for the chunked head (``head.chunked_token_logps``).

    Only where the head is a plain matmul: a tied head with ``normalize_embedding_logits`` or a logits
    soft cap, or a quantized head, raises (use the whole head: ``vocab_chunk=0``). The tied table is
    rounded to bfloat16 first, as MaxText's ``attend_on_embedding`` does (``jnp.asarray(table,
    bfloat16)``), but with ``reduce_precision``: under ``jit`` XLA's excess-precision simplification may
    drop a float32 -> bfloat16 -> float32 round trip (the chunked head casts the weight to the compute
    dtype), never a ``reduce_precision``.
    """
    cfg = model.base.config
    if str(getattr(cfg.quantization, "value", cfg.quantization)):
        raise ValueError(f"the chunked head does not support MaxText quantization {cfg.quantization!r}")
    if cfg.logits_via_embedding:
        if cfg.normalize_embedding_logits or cfg.final_logits_soft_cap:
            raise ValueError(
                "the chunked head does not support MaxText's normalize_embedding_logits or "
                "final_logits_soft_cap on a tied head; use vocab_chunk=0"
            )
        table = model.base.token_embedder.embedding[...]
        return jax.lax.reduce_precision(table, exponent_bits=8, mantissa_bits=7)  # bfloat16's
    return model.base.decoder.logits_dense.kernel[...].T  # DenseGeneral kernel: [D, V]
