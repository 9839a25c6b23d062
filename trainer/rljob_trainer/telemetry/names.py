"""Every metric name the trainer exports, and the label values and defaults they share: one module.

Why one module: the trainer's registry (``metrics.py``), the alert rules
(``charts/rljob/files/rljob-alerts.rules.yaml``) and the dashboard (``charts/rljob/dashboard.py``) name
these series, and a test reads the names from ``TrainerMetrics().registry`` so they cannot drift apart.
Conventions (docs/observability.md): prefix ``rljob_trainer_``, base units (seconds, tokens), counters
end in ``_total``, metadata in ``rljob_trainer_build_info``.
"""

from __future__ import annotations

PREFIX = "rljob_trainer_"
STEP_DURATION = "rljob_trainer_step_duration_seconds"
PHASE_DURATION = "rljob_trainer_phase_duration_seconds"
STEPS = "rljob_trainer_steps_total"
GLOBAL_STEP = "rljob_trainer_global_step"
MAX_STEPS = "rljob_trainer_max_steps"
LAST_STEP_TIMESTAMP = "rljob_trainer_last_step_timestamp_seconds"
STEP_TIME_BASELINE = "rljob_trainer_step_time_baseline_seconds"
STALL_THRESHOLD = "rljob_trainer_stall_threshold_seconds"
FIRST_STEP_GRACE = "rljob_trainer_first_step_grace_seconds"
LAST_STEP_DURATION = "rljob_trainer_last_step_duration_seconds"
CAPACITY_TOKENS = "rljob_trainer_packing_capacity_tokens_total"
PADDING_TOKENS = "rljob_trainer_packing_padding_tokens_total"
TOKENS = "rljob_trainer_tokens_total"
TOKENS_PER_SECOND = "rljob_trainer_tokens_per_second"
REWARD_MEAN = "rljob_trainer_reward_mean"
REWARD_MIN = "rljob_trainer_reward_min"
REWARD_MAX = "rljob_trainer_reward_max"
CHECKPOINT_SAVE_DURATION = "rljob_trainer_checkpoint_save_duration_seconds"
CHECKPOINT_LAST_STEP = "rljob_trainer_checkpoint_last_step"
RESUMED_STEP = "rljob_trainer_resumed_step"
BUILD_INFO = "rljob_trainer_build_info"
MODEL_FLOPS_PER_TOKEN = "rljob_trainer_model_flops_per_token"
MODEL_FLOPS = "rljob_trainer_model_flops_total"
CHIPS = "rljob_trainer_chips"
PEAK_FLOPS = "rljob_trainer_peak_flops_per_second_per_chip"
MFU = "rljob_trainer_mfu_ratio"
TOKENS_PER_SECOND_PER_CHIP = "rljob_trainer_tokens_per_second_per_chip"
ROLLOUT_TOKENS_PER_SECOND = "rljob_trainer_rollout_tokens_per_second"
SAMPLER_SECONDS = "rljob_trainer_sampler_seconds_total"
DECODE_STEPS = "rljob_trainer_decode_steps_total"
TIME_SECONDS = "rljob_trainer_time_seconds_total"
COMPILATIONS = "rljob_trainer_compilations_total"
COMPILE_SECONDS = "rljob_trainer_compile_seconds_total"
HBM_IN_USE = "rljob_trainer_hbm_bytes_in_use"
HBM_PEAK = "rljob_trainer_hbm_peak_bytes"
COMPILE_OUTSIDE_PHASES = "startup"
"""The ``phase`` label of compiles outside every step phase (model and optimizer set-up, the first step's
preparation)."""

STEP_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)
"""0.1 s to 10 min: prometheus-client's default buckets stop at 10 s, far too short for RL steps."""

PHASE_LABELS = {
    "rollout": "rollout",
    "reference": "ref_inference",
    "old_logps": "old_logps",
    "train": "actor_train",
    "weight_sync": "weight_sync",
}
"""progress.PHASES -> the ``phase`` label (Tunix's perf names: rollout, ref_inference, actor_train, ...)."""

DEFAULT_STALL_THRESHOLD_SECONDS = 1800.0
"""spec.metrics.stallThresholdSeconds's default: the minimum; the exported threshold grows to cover the
longest steady step twice plus the longest checkpoint save."""
DEFAULT_FIRST_STEP_GRACE_SECONDS = 3600.0
"""spec.metrics.firstStepGraceSeconds's default."""
