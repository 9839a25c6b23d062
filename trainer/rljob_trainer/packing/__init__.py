"""Exact, GRPO-preserving, fast sequence packing for Tunix 0.1.7 (design and numbers: docs/packing.md).

The trainer's interface is one class::

    from rljob_trainer.packing import PackedGRPOLearner

    learner = PackedGRPOLearner(
        rl_cluster=cluster,              # Tunix RLCluster; training_config.max_seq_token_per_tpu MUST be None
        algo_config=grpo_config,         # Tunix GRPOConfig (policy_loss_fn "grpo", any loss_agg_mode)
        reward_fns=reward_fns,
        row_tokens=spec.packing.maxSeqTokenPerTpu,  # >= max_prompt_length + max_tokens_to_generate
        attention="auto",                # splash (TPU flash) | blocked (CPU/GPU qwen3/qwen2/llama3) | dense
        attention_block=128,             # preferred block of the block-sparse attention
        row_multiple=1,                  # rows per micro-batch rounded to a multiple (data-parallel width)
        metric_fns=None, data_shuffle_seed=None,
    )
    learner.train(dataset)               # Tunix's loop, unchanged
    learner.packing_stats.utilization    # real tokens / used row slots so far (also buffered as
                                         # metrics "packing/row_utilization", "packing/rows")

With packing off the trainer takes ``UnpackedGRPOLearner`` (``unpacked``: same constructor as Tunix's
``GRPOLearner``; Tunix's rows, the head at completion columns only) for the families in its ``FAMILIES``.

A row shorter than a sequence raises ``RowTooShortError`` (a ``ValueError`` naming
``spec.packing.maxSeqTokenPerTpu``) at construction, and again if a rollout ever produced one.

Modules, by concern: ``rows`` (pure numpy best-fit-decreasing planner), ``attention`` (segment-causal
dense mask and block-sparse attention), ``adapter`` (per-family packed forward), ``example``
(TrainExample -> PackedTrainExample), ``loss`` (Tunix's GRPO loss on packed rows), ``learner``,
``prewarm`` (the train step compiled beside the first rollout where its shape is fixed),
``testing`` (tiny models, synthetic examples, a CPU RL cluster for tests and the benchmark).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PackedGRPOLearner", "PackingStats", "RowTooShortError", "UnpackedGRPOLearner", "check_row_length"]


def __getattr__(name: str) -> Any:
    # Lazy: ``rows`` stays importable without JAX/Tunix (config checks, property tests).
    if name in ("PackedGRPOLearner", "PackingStats", "check_row_length"):
        from rljob_trainer.packing import learner

        return getattr(learner, name)
    if name == "UnpackedGRPOLearner":  # packing off: Tunix's rows, the head at completion columns only
        from rljob_trainer.packing import unpacked

        return unpacked.UnpackedGRPOLearner
    if name == "RowTooShortError":
        from rljob_trainer.packing.rows import RowTooShortError

        return RowTooShortError
    raise AttributeError(name)
