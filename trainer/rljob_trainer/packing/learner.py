"""``PackedGRPOLearner``: Tunix's GRPO learner with packing owned by us, overriding only two things.

1. ``_process_accumulated_batches``: after Tunix has produced the micro-batch ``TrainExample``s
   (rollout, rewards, advantages: unchanged), each one is packed into one ``[rows, row_len]``
   ``PackedTrainExample``. Packing happens per micro-batch, the unit Tunix's loss aggregates over and
   ``optax.MultiSteps`` accumulates, so mini-batches, gradient accumulation and the number of optimizer
   updates are exactly the unpacked ones.
2. The actor trainer's loss fn: ``loss.make_packed_grpo_loss_fn`` (one forward/backward over all rows,
   Tunix's GRPO aggregation on ``[B, Tc]``).
3. The cluster's reference and old-policy log-prob calls (instance attributes, so Tunix's learner code
   calls them unchanged): they plan the micro-batches' rows (``example.plan_layout``, one plan per
   micro-batch, kept for step 1) and run ``logps.packed_completion_logps`` with the model and
   temperature Tunix would use. The old-policy pass is packed for the vanilla rollout (Tunix recomputes
   it with the rollout model at temperature 1.0, which is mirrored); vLLM's old log-probs are the
   sampler's own, with nothing to compute, so Tunix's call stays. With ``offload_to_cpu`` Tunix's calls
   stay too (they move weights around the pass).

Tunix's own ``max_seq_token_per_tpu`` must stay unset: its ``pack_sequences`` (next-fit, one row per
micro-step and optimizer update, silent drop of long sequences) would run on top of ours.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo.grpo_learner import GRPOLearner
from tunix.rl.rollout import vanilla_rollout

from rljob_trainer.packing.adapter import BLOCKED_FAMILIES, family_of, resolve_attention
from rljob_trainer.packing.chunks import chunk_layout, max_chunks, rows_per_chunk
from rljob_trainer.packing.example import PackedLayout, PackedTrainExample, pack_train_example, plan_layout
from rljob_trainer.packing.head import auto_vocab_chunk
from rljob_trainer.packing.logps import packed_completion_logps
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.prewarm import Prewarm, packed_input, wait_before_training
from rljob_trainer.packing.rows import ROW_FIELD, RowPlan, RowTooShortError, ShapeCache
from rljob_trainer.packing.splash import splash_block

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PackingStats:
    """Running packing figures, for the console and metrics."""

    micro_batches: int = 0
    sequences: int = 0
    real_tokens: int = 0
    rows_used: int = 0
    rows_padded: int = 0
    row_len: int = 0
    last_utilization: float = 0.0
    last_shard_imbalance: float = 1.0  # max / mean estimated row cost over data-parallel shards
    host_seconds: float = 0.0  # row planning, index building and host-to-device transfers, all passes
    streamed: int = 0  # micro-batches whose per-token layers ran on the token stream (skipped a row)

    def add(self, plan: RowPlan, computed_rows: int | None = None) -> None:
        """One micro-batch; ``computed_rows`` (``PackedLayout.computed_rows``): what its passes compute,
        where that is not the plan's row count (token-budget chunks)."""
        self.micro_batches += 1
        self.sequences += int(plan.length.size)
        self.real_tokens += plan.real_tokens
        self.rows_used += plan.rows_used
        self.rows_padded += plan.num_rows if computed_rows is None else computed_rows
        self.row_len = plan.row_len
        self.last_utilization = plan.utilization

    @property
    def utilization(self) -> float:
        """Real tokens / slots of the used rows, over all micro-batches so far (goal >= 0.97)."""
        return self.real_tokens / max(1, self.rows_used * self.row_len)

    @property
    def padded_utilization(self) -> float:
        """Real tokens / slots of the rows computed: the bucket's empty rows included, with token-budget
        chunks the used chunks' rows (what the compute sees)."""
        return self.real_tokens / max(1, self.rows_padded * self.row_len)


def check_row_length(row_len: int, max_sequence: int) -> None:
    """Startup check: a row must hold the longest prompt+completion (``maxTargetLength``)."""
    if row_len < max_sequence:
        raise RowTooShortError(
            f"{ROW_FIELD}={row_len} is shorter than the longest sequence the rollout can produce "
            f"({max_sequence} = max prompt + max completion tokens, spec.maxTargetLength); set it >= that"
        )


def pick_attention_block(row_len: int, preferred: int = 128) -> int:
    """Largest power of two <= ``preferred`` dividing ``row_len`` (>= 8), else raise."""
    block = preferred
    while block >= 8:
        if row_len % block == 0:
            return block
        block //= 2
    raise ValueError(f"{ROW_FIELD}={row_len} must be a multiple of 8 for block-sparse packed attention")


class PackedGRPOLearner(GRPOLearner):
    """GRPO learner that trains on packed rows with the unpacked step's exact optimizer updates.

    Args beyond ``GRPOLearner``'s:
      row_tokens: tokens per packed row (``spec.packing.maxSeqTokenPerTpu``).
      attention: ``auto`` (splash on TPU flash models, block-sparse for qwen3/qwen2/llama3, else a dense
        segment mask), or one of ``splash`` / ``blocked`` / ``dense``. The trainer passes ``splash`` on a
        TPU backend (qwen3/qwen2): Tunix's splash kernel with segment ids, block = ``splash_block(row)``.
      attention_block: preferred block size of the block-sparse attention.
      row_multiple: rows per micro-batch are a multiple of this (the data-parallel width).
      vocab_chunk: > 0 computes the per-token log-probs through the vocabulary head that many tokens
        at a time (``head.chunked_token_logps``: exact, no ``[R, L, V]`` logits; on splash with the
        head at completion columns, its default);
        0 the whole head; None (the trainer's default) ``head.auto_vocab_chunk`` of the actor model's
        family, vocabulary and the attention chosen here (256 above 32,768 words).
      token_budget: tokens per chip of one forward/backward: a micro-batch with more rows runs in
        chunks of whole rows (``chunks.chunk_layout``), every actor-side pass, with one update equal
        to the unsplit one (``accumulate``). None: one pass over all rows.
    """

    def __init__(
        self,
        rl_cluster: rl_cluster_lib.RLCluster,
        algo_config: Any,
        reward_fns: Any,
        *,
        row_tokens: int,
        attention: str = "auto",
        attention_block: int = 128,
        row_multiple: int = 1,
        vocab_chunk: int | None = None,
        token_budget: int | None = None,
        metric_fns: Sequence[Any] | None = None,
        data_shuffle_seed: int | None = None,
    ):
        training_config = rl_cluster.cluster_config.training_config
        if training_config.max_seq_token_per_tpu is not None:
            raise ValueError(
                "PackedGRPOLearner owns packing: leave Tunix's training_config.max_seq_token_per_tpu unset"
            )
        if algo_config.policy_loss_fn != "grpo":
            raise ValueError(f"packing implements policy_loss_fn 'grpo', not {algo_config.policy_loss_fn!r}")
        rollout_configs = rl_cluster.cluster_config.rollout_config
        configs = list(rollout_configs.values()) if isinstance(rollout_configs, dict) else [rollout_configs]
        for cfg in configs:
            check_row_length(row_tokens, cfg.max_prompt_length + cfg.max_tokens_to_generate)
        longest = max(cfg.max_prompt_length + cfg.max_tokens_to_generate for cfg in configs)
        super().__init__(
            rl_cluster=rl_cluster,
            algo_config=algo_config,
            reward_fns=reward_fns,
            metric_fns=metric_fns,
            data_shuffle_seed=data_shuffle_seed,
        )
        self.row_len = row_tokens
        self.row_multiple = row_multiple
        self.attention = resolve_attention(rl_cluster.actor_trainer.model, attention)  # type: ignore[arg-type]
        self.attention_block = 0
        if self.attention == "splash":
            self.attention_block = splash_block(row_tokens)
        elif self.attention == "blocked":
            try:
                self.attention_block = pick_attention_block(row_tokens, attention_block)
            except ValueError:
                if attention != "auto":
                    raise
                log.warning(
                    "%s=%d is not a multiple of 8: packed attention falls back to a dense mask",
                    ROW_FIELD,
                    row_tokens,
                )
                self.attention = "dense"
        if vocab_chunk is None:
            model = rl_cluster.actor_trainer.model
            vocab = getattr(getattr(model, "config", None), "vocab_size", 0)  # gemma3: num_embed
            vocab_chunk = auto_vocab_chunk(family_of(model), vocab, self.attention)
        # The token stream (``rows.token_stream``): per-token layers skip the rows' padding columns. It
        # gathers across rows, so a single data shard only, and it needs the project's own forward.
        self.stream = (
            row_multiple == 1
            and self.attention in ("blocked", "dense")
            and family_of(rl_cluster.actor_trainer.model) in BLOCKED_FAMILIES
        )
        log.info(
            "packing: rows of %d tokens, %s attention (block %d), vocabulary head in chunks of %s tokens, "
            "token stream %s",
            row_tokens,
            self.attention,
            self.attention_block,
            vocab_chunk or "all",
            "on" if self.stream else "off",
        )
        self.vocab_chunk = vocab_chunk
        self.chunk_rows = rows_per_chunk(token_budget, row_tokens, row_multiple) if token_budget else 0
        self.longest = longest  # the longest sequence: bounds the rows a micro-batch can need
        # splash: attend within the longest sequence, not the whole row (splash.flash_attention's window)
        self.window = longest if self.attention == "splash" and longest < row_tokens else 0
        if self.window:
            log.info(
                "packing: splash attends within the last %d positions (the longest sequence)", self.window
            )
        if self.chunk_rows:
            log.info(
                "packing: at most %d tokens per chip in one pass: chunks of %d rows",
                token_budget,
                self.chunk_rows,
            )
        self.packing_stats = PackingStats()
        # One cache per run: micro-batches reuse compiled (rows, pairs) shapes instead of recompiling.
        nb = row_tokens // self.attention_block if self.attention == "blocked" else 0
        self.shapes = ShapeCache(multiple_of=row_multiple, max_pairs_per_row=nb * (nb + 1) // 2)
        self.rl_cluster.actor_trainer.with_loss_fn(
            make_packed_grpo_loss_fn(
                attention=self.attention,
                block=self.attention_block,
                vocab_chunk=vocab_chunk,
                window=self.window,
            ),
            has_aux=True,
        )
        self._micro_sizes: list[int] = []
        self._planned: tuple[Any, Any, list[PackedLayout]] | None = None  # (prompts, completions, plans)
        self._install_packed_logps()
        wait_before_training(self)  # the first update waits for ``self.prewarm``

    def train(self, *args: Any, **kwargs: Any) -> None:
        """Tunix's loop, with the train step compiled beside the first rollout where its shape is known
        (``prewarm``)."""
        self.prewarm = Prewarm(self, packed_input)
        super().train(*args, **kwargs)

    def _install_packed_logps(self) -> None:
        cluster = self.rl_cluster
        if cluster.cluster_config.offload_to_cpu:
            log.warning("packing: offload_to_cpu keeps Tunix's unpacked reference/old log-prob passes")
            return
        Role, Mode = rl_cluster_lib.Role, rl_cluster_lib.Mode

        def ref_logps(prompt_tokens: Any, completion_tokens: Any, pad_id: int, eos_id: int, **_: Any) -> Any:
            with cluster._get_mesh_and_logical_axis_rules_cm(Role.REFERENCE):
                model = cluster.inference_worker.get_model("reference")
                temperature = cluster.get_rollout_config(mode=Mode.TRAIN).temperature
                return self._packed_logps(model, prompt_tokens, completion_tokens, temperature)

        def old_logps(prompt_tokens: Any, completion_tokens: Any, **_: Any) -> Any:
            with cluster._get_mesh_and_logical_axis_rules_cm(Role.ROLLOUT):
                # Tunix's VanillaRollout.get_per_token_logps passes no temperature: 1.0.
                return self._packed_logps(cluster.rollout.model(), prompt_tokens, completion_tokens, 1.0)

        cluster.get_ref_per_token_logps = ref_logps
        if isinstance(cluster.rollout, vanilla_rollout.VanillaRollout):
            cluster.get_old_per_token_logps = old_logps

    def _layouts(self, prompt_tokens: Any, completion_tokens: Any) -> list[PackedLayout]:
        """One plan per micro-batch of the batch Tunix is scoring (made once, reused by every pass)."""
        if self._planned and self._planned[0] is prompt_tokens and self._planned[1] is completion_tokens:
            return self._planned[2]
        pad = self.rl_cluster.rollout.pad_id()
        p, c = np.asarray(prompt_tokens), np.asarray(completion_tokens)
        sizes = self._micro_sizes if sum(self._micro_sizes) == len(p) else [len(p)]
        layouts, start = [], 0
        for n in sizes:
            sl = slice(start, start + n)
            layouts.append(self._plan(p[sl], p[sl] != pad, c[sl], c[sl] != pad))
            start += n
        self._planned = (prompt_tokens, completion_tokens, layouts)
        return layouts

    def _plan(
        self,
        prompt_ids: Any,
        prompt_mask: Any,
        completion_ids: Any,
        completion_mask: Any,
        shapes: ShapeCache | None = None,
    ) -> PackedLayout:
        """One micro-batch's rows (``shapes``: the run's cache of compiled shapes unless given)."""
        started = time.perf_counter()
        layout = plan_layout(
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            self.row_len,
            pad_id=self.rl_cluster.rollout.pad_id(),
            attention_block=self.attention_block if self.attention == "blocked" else None,
            row_multiple=self.row_multiple,
            shapes=self.shapes if shapes is None else shapes,
            stream=self.stream,
        )
        if self.chunk_rows:
            count = max_chunks(len(prompt_ids), self.longest, self.row_len, self.chunk_rows)
            if count > 1:  # every micro-batch padded to the same chunk count: one compiled shape
                block = self.attention_block if self.attention == "blocked" else None
                layout = chunk_layout(
                    layout,
                    self.chunk_rows,
                    count=count,
                    row_multiple=self.row_multiple,
                    attention_block=block,
                )
        self.packing_stats.host_seconds += time.perf_counter() - started
        return layout

    def _packed_logps(
        self, model: Any, prompt_tokens: Any, completion_tokens: Any, temperature: float
    ) -> Any:
        layouts = self._layouts(prompt_tokens, completion_tokens)
        return packed_completion_logps(
            model,
            layouts,
            temperature=temperature,
            attention=self.attention,
            block=self.attention_block,
            vocab_chunk=self.vocab_chunk,
            window=self.window,
        )

    def pack(self, example: Any, layout: PackedLayout | None = None) -> tuple[PackedTrainExample, RowPlan]:
        """Pack one micro-batch ``TrainExample`` the way training does (with its plan, if made)."""
        if layout is None:
            layout = self._plan(
                example.prompt_ids, example.prompt_mask, example.completion_ids, example.completion_mask
            )
        started = time.perf_counter()
        out = pack_train_example(
            example, self.row_len, pad_id=self.rl_cluster.rollout.pad_id(), layout=layout
        )
        self.packing_stats.host_seconds += time.perf_counter() - started
        return out

    def _process_accumulated_batches(
        self,
        micro_batches: list[Any],
        micro_batch_sizes: list[int],
        mode: rl_cluster_lib.Mode,
    ) -> list[Any]:
        self._micro_sizes, self._planned = list(micro_batch_sizes), None
        produced = super()._process_accumulated_batches(micro_batches, micro_batch_sizes, mode)
        planned = self._planned[2] if self._planned else []
        self._planned = None
        layouts: list[PackedLayout | None] = (
            list(planned) if len(planned) == len(produced) else [None] * len(produced)
        )
        packed = []
        for example, given in zip(produced, layouts, strict=True):
            layout = given or self._plan(
                example.prompt_ids, example.prompt_mask, example.completion_ids, example.completion_mask
            )
            ex, plan = self.pack(example, layout)
            packed.append(ex)
            if mode == rl_cluster_lib.Mode.TRAIN:
                self.packing_stats.add(plan, layout.computed_rows)
                self.packing_stats.last_shard_imbalance = layout.shard_imbalance
                self.packing_stats.streamed += layout.stream is not None
            self.rl_cluster.buffer_metrics(
                {
                    "packing/row_utilization": (plan.utilization, np.mean),
                    "packing/padded_row_utilization": (plan.padded_utilization, np.mean),
                    "packing/rows": (plan.num_rows, np.mean),
                    "packing/compiled_shapes": (len(self.shapes.shapes), np.max),
                    "packing/shard_imbalance": (layout.shard_imbalance, np.max),
                    "packing/chunks": (1 if layout.part is None else len(layout.part), np.max),
                },
                mode=mode,
            )
        return packed
