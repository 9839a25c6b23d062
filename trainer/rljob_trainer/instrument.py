"""The hooks the trainer puts on a Tunix GRPO learner: explicit rollout seeds, phase timing (and the HBM
read at each phase's end) and per-step reports to ``progress.StepRecorder``. Used by ``tunix_bridge``."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib

from rljob_trainer.telemetry.progress import StepRecorder

Mode = rl_cluster_lib.Mode


class Instrumented:
    """Mixin over a GRPO learner class: explicit rollout seeds, phase timing and per-step reports.

    Why a mixin and not a fork: the learner loop (mini-batches, micro-batches, iterations, weight sync)
    stays Tunix's; only these hooks are ours, so the packed learner gets them too.
    """

    recorder: StepRecorder
    base_seed: int
    _rollout_calls: int
    _step: int

    def _setup_instrumentation(self, recorder: StepRecorder, base_seed: int, start_step: int) -> None:
        self.recorder, self.base_seed, self._step, self._rollout_calls = recorder, base_seed, start_step, 0
        cluster = self.rl_cluster  # type: ignore[attr-defined]
        for method, phase in (
            ("generate", "rollout"),
            ("get_ref_per_token_logps", "reference"),
            ("get_old_per_token_logps", "old_logps"),
            ("update_actor", "train"),
            ("sync_weights", "weight_sync"),
        ):
            setattr(cluster, method, _timed(getattr(cluster, method), recorder, phase))
        timed_update = cluster.update_actor

        def update_actor(*args: Any, **kwargs: Any) -> Any:
            recorder.updating()  # from here the actor leaves the last finished step's weights
            return timed_update(*args, **kwargs)

        cluster.update_actor = update_actor
        sample = cluster.rollout.generate

        def generate(prompts: Any, config: Any, **kwargs: Any) -> Any:
            """Each sampler call of a training step draws with its own seed: Tunix's ``generate`` calls
            the sampler once per ``rollout_micro_batch_size`` slice with one config, which would give
            every slice the same random stream (``memory.rollout_prompts`` makes such slices)."""
            if config is cluster.get_rollout_config(Mode.TRAIN):
                seed = self.rollout_seed(self._step, self._rollout_calls)
                self._rollout_calls += 1
                config.seed = seed
                self.recorder.add_seed(seed)
            return sample(prompts, config, **kwargs)

        cluster.rollout.generate = generate

    def rollout_seed(self, step: int, call: int) -> int:
        """Seed of the ``call``-th generate call of 1-based ``step``: a pure function of (seed, step, call),
        so a resumed run samples exactly what the uninterrupted run would have."""
        return int(np.random.SeedSequence([self.base_seed, step, call]).generate_state(1)[0] & 0x7FFFFFFF)

    def _run_global_step(self, *args: Any, **kwargs: Any) -> None:
        self.recorder.finish()  # the previous step, now that its weight sync is done
        if self.recorder.stop_requested:
            raise StopIteration  # Tunix's train loop ends cleanly on StopIteration
        self._step += 1
        self._rollout_calls = 0
        self.recorder.begin(self._step)
        stats = getattr(self, "packing_stats", None)
        before = _packing_counts(stats)
        super()._run_global_step(*args, **kwargs)  # type: ignore[misc]
        if stats is not None:
            real, used, computed = (b - a for a, b in zip(before, _packing_counts(stats), strict=True))
            self.recorder.add_tokens(real, computed, used)

    def _generate_and_compute_advantage(self, training_input: Any, mode: Any = Mode.TRAIN) -> Any:
        example = super()._generate_and_compute_advantage(training_input, mode)  # type: ignore[misc]
        if mode == Mode.TRAIN:
            self.recorder.add_generated(int(np.asarray(example.completion_mask).sum()))
        if mode == Mode.TRAIN and not self.recorder.packed:  # packed: counted from the rows, see below
            rows = int(example.prompt_ids.shape[0])
            width = int(example.prompt_ids.shape[1] + example.completion_ids.shape[1])
            real = int(np.asarray(example.prompt_mask).sum() + np.asarray(example.completion_mask).sum())
            self.recorder.add_tokens(real, rows * width, rows * width)
        return example

    def _compute_rewards(self, prompts: Any, completions: Any, mode: Any, *args: Any, **kwargs: Any) -> Any:
        rewards = super()._compute_rewards(prompts, completions, mode, *args, **kwargs)  # type: ignore[misc]
        if mode == Mode.TRAIN:
            self.recorder.add_rewards(rewards)
        return rewards

    def train(self, *args: Any, **kwargs: Any) -> None:
        super().train(*args, **kwargs)  # type: ignore[misc]
        self.recorder.finish()  # the last step (only reached when training did not raise)


def _packing_counts(stats: Any) -> tuple[int, int, int]:
    """(real tokens, slots of used rows, slots of all computed rows) packed so far; zeros if unpacked."""
    if stats is None:
        return 0, 0, 0
    return stats.real_tokens, stats.rows_used * stats.row_len, stats.rows_padded * stats.row_len


# Passes that return device arrays before their device work ends (JAX dispatches asynchronously). Their
# phase waits for the result; otherwise their device time lands in the next phase that reads it (on the
# chip the reference pass showed 0.05 s and its work counted as train time, so the train phase's MFU was
# understated while its FLOPs were counted in the reference phase).
WAITED_PHASES = ("reference", "old_logps")


def _timed(fn: Any, recorder: StepRecorder, phase: str) -> Any:
    wait = phase in WAITED_PHASES

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with recorder.phase(phase):
            result = fn(*args, **kwargs)
            return jax.block_until_ready(result) if wait else result

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
