"""``UnpackedGRPOLearner``: Tunix's GRPO learner, unpacked, with the vocabulary head at completion columns.

What the trainer runs with packing off (``tunix_bridge.learner_class``) on qwen3 / qwen2 / llama3.
Tunix 0.1.7's three actor-side passes (reference, old policy, train loss) each call
``common.compute_per_token_logps``, which runs the vocabulary head and its log-softmax (and, in the
train pass, their backward) over all ``[B, P + Tc]`` columns, though only the ``Tc`` completion columns'
log-probs are ever used; prompts take up to 384 of 1,024 columns in the v5e example. This learner keeps
Tunix's layout (one left-padded sequence per row, Tunix's positions and key mask:
``logps.unpacked_inputs``) and Tunix's loop, and swaps only where the log-probs come from:

1. the cluster's ``get_ref_per_token_logps`` and (vanilla rollout) ``get_old_per_token_logps``
   (instance attributes, so Tunix's learner code calls them unchanged): ``logps.unpacked_completion_logps``
   with the model, temperature and micro-batch slices Tunix would use;
2. the actor trainer's loss fn: the same forward, ``head.completion_head_logps`` with entropies, then
   ``loss.grpo_loss_from_logps`` (Tunix's ``grpo_loss_fn`` line for line).

Same updates as Tunix's learner to fp rounding (tests/trainer/test_unpacked_learner.py: 1e-5). The
old-policy pass of the vLLM rollout is the sampler's own (nothing to compute), and with
``offload_to_cpu`` Tunix's calls stay (they move weights around the pass), as in the packed learner.
Not packed: the recorder counts its tokens as ``[B, P + Tc]`` slots (``instrument.Instrumented``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl import utils as rl_utils
from tunix.rl.grpo.grpo_learner import GRPOLearner
from tunix.rl.rollout import vanilla_rollout
from tunix.sft import sharding_utils

from rljob_trainer.packing.accumulate import accumulated_loss
from rljob_trainer.packing.adapter import BLOCKED_FAMILIES, family_of, resolve_attention
from rljob_trainer.packing.head import auto_vocab_chunk
from rljob_trainer.packing.logps import unpacked_chunks, unpacked_completion_logps, unpacked_inputs
from rljob_trainer.packing.loss import grpo_loss_from_logps, packed_per_token_logps
from rljob_trainer.packing.prewarm import Prewarm, unpacked_input, wait_before_training

log = logging.getLogger(__name__)
ATTENTION = "dense"  # Tunix's unpacked attention: a [B, L, L] causal mask over non-pad keys


def make_unpacked_grpo_loss_fn(
    pad_id: int, vocab_chunk: int = 0, per_chunk: int = 0
) -> Callable[[Any, Any, Any], tuple[jax.Array, dict[str, jax.Array]]]:
    """Tunix's GRPO loss on its unpacked ``TrainExample`` with the head at completion columns only.

    The signature Tunix's actor trainer calls: ``(model, train_example, algo_config)``. ``vocab_chunk``
    > 0: the head over that many completion tokens at a time (``head.chunked_token_logps``).
    ``per_chunk`` > 0 and below the micro-batch: forward/backward over that many sequences at a time,
    the gradients summed into the one update of the whole micro-batch (``accumulate``).
    """

    def loss_fn(model: Any, train_example: Any, algo_config: Any) -> Any:
        if algo_config.policy_loss_fn != "grpo":
            raise ValueError(
                f"the unpacked learner's loss implements policy_loss_fn 'grpo', not {algo_config.policy_loss_fn!r}"
            )

        def forward(m: Any, rows: Any) -> tuple[jax.Array, jax.Array]:
            return packed_per_token_logps(  # type: ignore[return-value]  # entropy=True: never None
                m,
                rows,
                temperature=algo_config.temperature,
                attention=ATTENTION,
                block=0,
                vocab_chunk=vocab_chunk,
                head_at="completions",
            )

        prompt, completion = train_example.prompt_ids, train_example.completion_ids
        if not 0 < per_chunk < prompt.shape[0]:
            logps, entropy = forward(model, unpacked_inputs(prompt, completion, pad_id))
            return grpo_loss_from_logps(logps, entropy, train_example, algo_config)
        chunks, parts = unpacked_chunks(prompt, completion, pad_id, per_chunk)
        return accumulated_loss(
            model,
            chunks,
            parts,
            forward,
            lambda lp, ent, part: grpo_loss_from_logps(lp, ent, train_example, algo_config, part=part),
        )

    return loss_fn


class UnpackedGRPOLearner(GRPOLearner):
    """GRPO learner on Tunix's unpacked rows whose every actor-side pass runs the head at completions only.

    Args beyond ``GRPOLearner``'s:
      vocab_chunk: > 0 computes the head over that many completion tokens at a time (exact, no
        ``[K, V]`` logits); 0 the whole head at once; None (the trainer's default)
        ``head.auto_vocab_chunk`` of the actor's family and vocabulary (256 above 32,768 words).
      token_budget: tokens per chip of one forward/backward: a micro-batch of more sequences (each
        ``max prompt + max completion`` slots in Tunix's layout) runs in chunks of whole sequences,
        every actor-side pass, with one update equal to the unsplit one (``accumulate``). None: one pass.
    """

    UNPACKED: ClassVar[bool] = True  # tunix_bridge.is_packed: tokens counted as Tunix's [B, P + Tc] slots
    FAMILIES: ClassVar[tuple[str, ...]] = BLOCKED_FAMILIES  # forwards that stop at the final norm

    def __init__(
        self,
        rl_cluster: rl_cluster_lib.RLCluster,
        algo_config: Any,
        reward_fns: Any,
        *,
        vocab_chunk: int | None = None,
        token_budget: int | None = None,
        metric_fns: Sequence[Any] | None = None,
        data_shuffle_seed: int | None = None,
    ):
        if rl_cluster.cluster_config.training_config.max_seq_token_per_tpu is not None:
            raise ValueError(
                "UnpackedGRPOLearner trains unpacked: leave Tunix's training_config.max_seq_token_per_tpu unset"
            )
        if algo_config.policy_loss_fn != "grpo":
            raise ValueError(
                f"the unpacked learner implements policy_loss_fn 'grpo', not {algo_config.policy_loss_fn!r}"
            )
        model = rl_cluster.actor_trainer.model
        family = family_of(model)
        if family not in self.FAMILIES:
            raise ValueError(
                f"the head at completion columns needs a family in {BLOCKED_FAMILIES}, not {family!r}"
            )
        resolve_attention(model, ATTENTION)  # raises for a flash-attention model (its mask is ignored)
        super().__init__(
            rl_cluster=rl_cluster,
            algo_config=algo_config,
            reward_fns=reward_fns,
            metric_fns=metric_fns,
            data_shuffle_seed=data_shuffle_seed,
        )
        if vocab_chunk is None:
            vocab = getattr(getattr(model, "config", None), "vocab_size", 0)
            vocab_chunk = auto_vocab_chunk(family, vocab, ATTENTION)
        self.vocab_chunk = vocab_chunk
        rollout = rl_cluster.cluster_config.rollout_config
        rollout = next(iter(rollout.values())) if isinstance(rollout, dict) else rollout
        slots = rollout.max_prompt_length + rollout.max_tokens_to_generate  # one sequence's row
        self.per_chunk = max(1, token_budget // slots) if token_budget else 0
        if self.per_chunk:
            log.info(
                "unpacked: at most %d tokens per pass: chunks of %d sequences", token_budget, self.per_chunk
            )
        log.info(
            "unpacked: Tunix's rows, %s attention, vocabulary head at completion columns only "
            "(reference, old policy, train) in chunks of %s tokens",
            ATTENTION,
            vocab_chunk or "all",
        )
        pad_id = int(self.rl_cluster.rollout.pad_id())
        self.rl_cluster.actor_trainer.with_loss_fn(
            make_unpacked_grpo_loss_fn(pad_id, vocab_chunk, self.per_chunk), has_aux=True
        )
        self._install_logps()
        wait_before_training(self)  # the first update waits for ``self.prewarm``

    def train(self, *args: Any, **kwargs: Any) -> None:
        """Tunix's loop, with the train step compiled beside the first rollout (``prewarm``): its input is
        Tunix's own micro-batch, one shape in every step."""
        self.prewarm = Prewarm(self, unpacked_input)
        super().train(*args, **kwargs)

    def _install_logps(self) -> None:
        """Replace the cluster's reference and old-policy calls (same signatures as Tunix's)."""
        cluster = self.rl_cluster
        if cluster.cluster_config.offload_to_cpu:
            log.warning(
                "unpacked: offload_to_cpu keeps Tunix's reference/old log-prob passes (head over all columns)"
            )
            return
        Role, Mode = rl_cluster_lib.Role, rl_cluster_lib.Mode
        axes = cluster.cluster_config.training_config.data_sharding_axis

        def ref_logps(
            prompt_tokens: Any,
            completion_tokens: Any,
            pad_id: int,
            eos_id: int,
            micro_batch_size: int | None = None,
        ) -> jax.Array:
            with cluster._get_mesh_and_logical_axis_rules_cm(Role.REFERENCE):
                # As Tunix: the inputs sharded like the actor's data (same architecture, same mesh).
                prompt = sharding_utils.shard_input(prompt_tokens, axes)
                completion = sharding_utils.shard_input(completion_tokens, axes)
                model = cluster.inference_worker.get_model("reference")
                temperature = cluster.get_rollout_config(mode=Mode.TRAIN).temperature
                return self._logps(model, prompt, completion, pad_id, temperature, micro_batch_size)

        def old_logps(
            prompt_tokens: Any, completion_tokens: Any, micro_batch_size: int | None = None
        ) -> jax.Array:
            with cluster._get_mesh_and_logical_axis_rules_cm(Role.ROLLOUT):
                # Tunix's VanillaRollout.get_per_token_logps passes no temperature: 1.0.
                pad_id = int(cluster.rollout.pad_id())
                model = cluster.rollout.model()
                return self._logps(model, prompt_tokens, completion_tokens, pad_id, 1.0, micro_batch_size)

        cluster.get_ref_per_token_logps = ref_logps
        if isinstance(cluster.rollout, vanilla_rollout.VanillaRollout):
            cluster.get_old_per_token_logps = old_logps

    def _logps(
        self,
        model: Any,
        prompt_tokens: Any,
        completion_tokens: Any,
        pad_id: int,
        temperature: float,
        micro_batch_size: int | None,
    ) -> jax.Array:
        """``[B, Tc]`` log-probs over Tunix's micro-batch slices (its memory bound per call)."""
        batch = prompt_tokens.shape[0]
        if batch == 0:
            raise ValueError("cannot compute log-probs of an empty batch")
        outs = [
            unpacked_completion_logps(
                model,
                prompt_tokens[s],
                completion_tokens[s],
                pad_id=pad_id,
                temperature=temperature,
                vocab_chunk=self.vocab_chunk,
                head_at="completions",
                per_chunk=self.per_chunk,
            )
            for s in rl_utils.chunk_slices_by_size(stop=batch, step=micro_batch_size or batch)
        ]
        return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)
