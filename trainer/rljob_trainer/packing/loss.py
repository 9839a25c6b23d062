"""GRPO loss on a packed micro-batch, with exactly Tunix 0.1.7's aggregation and normalisation.

Why this is its own function rather than Tunix's ``grpo_loss_fn`` on a packed example: Tunix's packed
mode (``pack_sequences``) turns the whole row into one "sequence", so ``aggregate_loss`` becomes a token
mean over the row. Here the model runs on the packed rows (one ``[R, L]`` forward/backward), its per-token
log-probs and entropies are gathered back to ``[B, Tc]`` (``PackedTrainExample.completion_index``), and
from there the code below follows ``tunix.rl.algo_core.grpo_loss_fn`` line for line (clipping, dual
clip, GSPO-token, sampler IS weights, KL, ``common.aggregate_loss`` on the same shapes). Per-sequence and
per-token normalisation are therefore those of the unpacked loss, and so are the gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from tunix.rl import common
from tunix.rl.algo_core import masked_mean

from rljob_trainer.packing import maxtext_head
from rljob_trainer.packing.accumulate import accumulated_loss, chunk_count
from rljob_trainer.packing.adapter import (
    BLOCKED_FAMILIES,
    SEGMENT_FAMILIES,
    SPLASH_FAMILIES,
    family_of,
    last_layer_tail,
    packed_hidden,
    packed_logits,
)
from rljob_trainer.packing.example import PackedTrainExample
from rljob_trainer.packing.head import chunked_token_logps, completion_head_logps, head_weight

HEAD_AT = ("auto", "completions", "rows")
# The fields of a packed example that a forward reads, stacked per chunk under a token budget.
ROW_FIELDS = (
    "tokens",
    "positions",
    "segment_ids",
    "kv_segment_ids",
    "completion_index",
    "pair_row",
    "pair_q",
    "pair_k",
    "pair_valid",
)
# With the chunked head at completion columns on the blocked/dense forward, the last layer's MLP and the
# final norm run there too (``adapter.last_layer_tail``). A switch for tests and the bench's A/B.
TAIL_AT_COMPLETIONS = True


def head_at_completions(model: Any, attention: str, head_at: str = "auto") -> bool:
    """Whether the head runs at completion columns only (``head.completion_head_logps``).

    ``auto``: yes wherever the forward stops at the final norm (blocked/dense attention on
    qwen3/qwen2/llama3; splash on qwen3/qwen2, each layer's own attention block; MaxText's segments
    unless ``maxtext_head.refusal`` names a config it cannot match); gemma3 runs the model's own call,
    head included.
    ``completions`` where that is impossible raises; ``rows``: the whole-row head (for comparisons).
    """
    if head_at not in HEAD_AT:
        raise ValueError(f"head_at must be one of {HEAD_AT}, not {head_at!r}")
    family = family_of(model)
    if attention == "segments" and family in SEGMENT_FAMILIES:
        why = maxtext_head.refusal(model)
        possible = why is None
    else:
        possible = (attention in ("blocked", "dense") and family in BLOCKED_FAMILIES) or (
            attention == "splash" and family in SPLASH_FAMILIES
        )
        why = f"needs blocked/dense attention on {BLOCKED_FAMILIES}, splash on {SPLASH_FAMILIES} or MaxText's segments"
    if head_at == "completions" and not possible:
        raise ValueError(f"the head at completions only: {why}, not {attention!r} on {family!r}")
    return possible and head_at != "rows"


def packed_per_token_logps(
    model: Any,
    ex: Any,
    *,
    temperature: float,
    attention: str,
    block: int,
    entropy: bool = True,
    vocab_chunk: int = 0,
    head_at: str = "auto",
    window: int = 0,
) -> tuple[jax.Array, jax.Array | None]:
    """Per-token log-probs and entropies of the completion tokens, ``[B, Tc]`` each, from packed rows.

    ``ex`` has the row fields of ``PackedTrainExample`` (tokens, positions, segment_ids, pairs,
    completion_index). Column ``t`` of a row predicts token ``t + 1``; a completion token is never the
    first of its segment (prompts have >= 1 token), so its predicting column is always inside its own
    sequence. ``entropy=False`` (reference / old-policy passes) skips the entropies (returns None).
    ``vocab_chunk`` > 0 (blocked/dense attention, qwen3/qwen2/llama3): the head runs over that many
    tokens at a time (``head.chunked_token_logps``) instead of materialising ``[R, L, V]`` logits.
    ``head_at`` (``head_at_completions``): by default the head sees the completion columns only.
    ``window`` (splash): the longest sequence a row holds (``splash.flash_attention``).
    """
    flat = lambda x: jnp.pad(x, ((0, 0), (1, 0))).reshape(-1)  # noqa: E731 - column t -> token t
    index = getattr(ex, "stream_index", None)  # the layout's token stream (example.plan_layout)
    stream = (index, ex.stream_of_slot) if index is not None and attention in ("blocked", "dense") else None

    def final_hidden(split_last: bool = False) -> jax.Array:
        """``[R, L, D]`` final-norm hidden states of the rows (the forward without the head), or with
        ``split_last`` the last layer's attention residual (``adapter.last_layer_tail`` does the rest)."""
        pairs = ex.pairs if attention == "blocked" else None
        return packed_hidden(
            model,
            ex.tokens,
            ex.positions,
            ex.segment_ids,
            pairs,
            block=block,
            kv=ex.kv_segment_ids,
            splash=attention == "splash",
            stream=stream,
            split_last=split_last,
            window=window,
        )

    if head_at_completions(model, attention, head_at):
        # The chunked head on the blocked/dense forward also takes the last layer's MLP and the final
        # norm to the completion columns (chunked, so their cost follows the real count as the head's).
        split = TAIL_AT_COMPLETIONS and bool(vocab_chunk) and attention in ("blocked", "dense")
        return completion_head_logps(
            model,
            final_hidden(split_last=split),
            ex.tokens,
            ex.completion_index,
            temperature=temperature,
            chunk=vocab_chunk,
            entropy=entropy,
            chunked=chunked_token_logps,  # looked up here so tests can spy on it
            tail=last_layer_tail(model) if split else None,
        )
    if vocab_chunk:
        if attention not in ("blocked", "dense"):
            raise ValueError(f"a chunked vocabulary head needs blocked or dense attention, not {attention!r}")
        hidden = final_hidden()[:, :-1]
        token_logp, token_entropy = chunked_token_logps(
            hidden,
            ex.tokens[:, 1:],
            head_weight(model),
            temperature=temperature,
            chunk=vocab_chunk,
            entropy=entropy,
            dtype=getattr(model.config, "dtype", None),
        )
        logps = flat(token_logp)[ex.completion_index]
        return logps, (flat(token_entropy)[ex.completion_index] if entropy else None)
    logits = packed_logits(
        model,
        ex.tokens,
        ex.positions,
        ex.segment_ids,
        ex.pairs,
        attention=attention,
        block=block,
        kv_segment_ids=ex.kv_segment_ids,
        stream=stream,
        window=window,
    )[:, :-1]
    if temperature != 0.0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    token_logp = jnp.take_along_axis(logp_all, ex.tokens[:, 1:, None], axis=-1)[..., 0]
    if not entropy:
        return flat(token_logp)[ex.completion_index], None
    token_entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return flat(token_logp)[ex.completion_index], flat(token_entropy)[ex.completion_index]


def grpo_loss_from_logps(
    per_token_logps: jax.Array,
    token_entropy: jax.Array,
    ex: Any,
    algo_config: Any,
    part: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Tunix 0.1.7 ``grpo_loss_fn`` from the point where per-token log-probs exist (same math).

    ``part`` ``[B]`` (``accumulate.accumulated_loss``): the loss terms of these sequences only, with the
    whole micro-batch's normalisers; the terms of a partition of the sequences add up to the loss.
    """
    beta = algo_config.beta
    epsilon = algo_config.epsilon
    epsilon_high = getattr(algo_config, "epsilon_high", epsilon)
    epsilon_c = getattr(algo_config, "epsilon_c", None)
    mode = algo_config.loss_agg_mode
    completion_mask = ex.completion_mask

    per_token_logps = per_token_logps.astype(jnp.float32)
    advantages = ex.advantages.astype(jnp.float32)
    if ex.old_per_token_logps is None:
        old_per_token_logps = jax.lax.stop_gradient(per_token_logps)
    else:
        old_per_token_logps = ex.old_per_token_logps.astype(jnp.float32)

    seq_importance_ratio = per_token_logps - old_per_token_logps
    ppo_kl = masked_mean(-seq_importance_ratio, completion_mask)
    seq_importance_ratio = jnp.clip(seq_importance_ratio, max=20.0, min=-20.0)
    if algo_config.loss_algo == "gspo-token":
        seq_importance_ratio = (seq_importance_ratio * completion_mask).sum(axis=-1) / jnp.clip(
            completion_mask.sum(-1), min=1
        )
        seq_importance_ratio = (
            per_token_logps
            - jax.lax.stop_gradient(per_token_logps)
            + jnp.expand_dims(jax.lax.stop_gradient(seq_importance_ratio), axis=-1)
        )
        seq_importance_ratio = jnp.clip(seq_importance_ratio, max=10.0)
    is_ratio = jnp.exp(seq_importance_ratio)
    adv = advantages if advantages.ndim == 2 else jnp.expand_dims(advantages, 1)

    pg_loss_1 = -adv * is_ratio
    pg_loss_2 = -adv * jnp.clip(is_ratio, 1 - epsilon, 1 + epsilon_high)
    per_token_loss = jnp.maximum(pg_loss_1, pg_loss_2).astype(jnp.float32)
    clipped_fraction = masked_mean(jnp.greater(pg_loss_2, pg_loss_1), completion_mask)
    pg_loss_3 = -epsilon_c * adv if epsilon_c is not None else per_token_loss
    unreduced_lower = ((per_token_loss > pg_loss_3) & (adv < 0.0)).astype(jnp.float32)
    pg_clipfrac_lower = common.aggregate_loss(unreduced_lower, completion_mask, mode)
    per_token_loss = jnp.where(adv < 0.0, jnp.minimum(pg_loss_3, per_token_loss), per_token_loss)
    sampler_is_weights = getattr(ex, "sampler_is_weights", None)
    if sampler_is_weights is not None:
        per_token_loss = per_token_loss * sampler_is_weights.astype(jnp.float32)
    only = (lambda x: x) if part is None else (lambda x: x * part[:, None].astype(x.dtype))
    loss = common.aggregate_loss(only(per_token_loss), completion_mask, mode)

    adv_b = jnp.broadcast_to(adv, completion_mask.shape)
    real = completion_mask > 0
    aux: dict[str, jax.Array] = {
        "kl": jnp.float32(0.0),
        "kl_loss": jnp.float32(0.0),
        "pg_loss": loss,
        "pg_clipfrac": clipped_fraction,
        "ppo_kl": ppo_kl,
        "pg_clipfrac_lower": pg_clipfrac_lower,
        "is_ratio/mean": masked_mean(is_ratio, completion_mask),
        "is_ratio/max": jnp.max(jnp.where(real, is_ratio, 0.0)),
        "is_ratio/min": jnp.min(jnp.where(real, is_ratio, jnp.inf)),
        "log_ratio/abs_mean": masked_mean(jnp.abs(seq_importance_ratio), completion_mask),
        "pg_loss/unclipped_mean": masked_mean(pg_loss_1, completion_mask),
        "pg_loss/clipped_mean": masked_mean(pg_loss_2, completion_mask),
        "advantage/abs_mean": masked_mean(jnp.abs(adv_b), completion_mask),
        "advantage/max": jnp.max(jnp.where(real, adv_b, -jnp.inf)),
        "advantage/min": jnp.min(jnp.where(real, adv_b, jnp.inf)),
        "advantage/nonzero_frac": masked_mean((jnp.abs(adv_b) > 1e-8).astype(jnp.float32), completion_mask),
    }
    if sampler_is_weights is not None:
        sis = sampler_is_weights.astype(jnp.float32)
        aux["sampler_is/weight_mean"] = masked_mean(sis, completion_mask)
        aux["sampler_is/weight_min"] = jnp.min(jnp.where(real, sis, jnp.inf))
    else:
        aux["sampler_is/weight_mean"] = jnp.float32(1.0)
        aux["sampler_is/weight_min"] = jnp.float32(1.0)
    if ex.ref_per_token_logps is not None:
        kl = common.compute_kl_divergence(
            per_token_logps,
            ex.ref_per_token_logps,
            algo_config.kl_loss_mode,
            clamp_value=getattr(algo_config, "kl_clamp_value", None),
        )
        aux["kl"] = ((kl * completion_mask).sum() / jnp.clip(completion_mask.sum(), min=1)).astype(
            jnp.float32
        )
        kl_loss = common.aggregate_loss(only(kl), completion_mask, mode)
        aux["kl_loss"] = kl_loss
        if beta is not None and beta != 0.0:
            loss = loss + beta * kl_loss
    aux["entropy"] = common.aggregate_loss(token_entropy, completion_mask, mode)
    return loss, aux


def make_packed_grpo_loss_fn(
    *, attention: str, block: int, vocab_chunk: int = 0, head_at: str = "auto", window: int = 0
) -> Callable[[Any, PackedTrainExample, Any], tuple[jax.Array, dict[str, jax.Array]]]:
    """A loss fn with the signature Tunix's actor trainer calls: ``(model, train_example, algo_config)``.

    ``attention`` is a resolved implementation (``adapter.resolve_attention``); ``block`` the attention
    block size used when the examples were packed; ``vocab_chunk``, ``head_at``, ``window``: see
    ``packed_per_token_logps``.
    """

    def loss_fn(model: Any, train_example: PackedTrainExample, algo_config: Any) -> Any:
        if algo_config.policy_loss_fn != "grpo":
            raise ValueError(
                f"packed loss implements policy_loss_fn 'grpo', not {algo_config.policy_loss_fn!r}"
            )

        def forward(m: Any, rows: Any) -> tuple[jax.Array, jax.Array]:
            return packed_per_token_logps(  # type: ignore[return-value]  # entropy=True: never None
                m,
                rows,
                temperature=algo_config.temperature,
                attention=attention,
                block=block,
                vocab_chunk=vocab_chunk,
                head_at=head_at,
                window=window,
            )

        if not chunk_count(train_example):
            return grpo_loss_from_logps(*forward(model, train_example), train_example, algo_config)
        return accumulated_loss(
            model,
            {f: getattr(train_example, f) for f in ROW_FIELDS if getattr(train_example, f) is not None},
            train_example.part,
            lambda m, fields: forward(m, train_example.replace(**fields)),
            lambda lp, ent, part: grpo_loss_from_logps(lp, ent, train_example, algo_config, part=part),
        )

    return loss_fn
