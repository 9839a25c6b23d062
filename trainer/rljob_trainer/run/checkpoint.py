"""Orbax checkpoints of the whole training position, saved every N steps and on SIGTERM, and exact resume.

What one checkpoint holds (Orbax ``Composite`` items, one directory per global step):

* ``params``: the actor's full ``nnx.state`` (the vanilla sampler shares these weights);
* ``optimizer``: the optimizer's ``nnx.state`` (Adam moments, counts, step);
* ``meta`` (JSON): the global step, the data position (``examples`` consumed of the shuffled dataset, with
  its size and the batch size; a resumed run continues from there, see data.py), the RNG (rollouts are
  seeded from ``(spec.grpo.seed, step, call)``, so the spec seed and the next step are the whole RNG
  state), and Tunix's own loop counters, restored verbatim.

Why this makes resume exact: after restoring those, step ``k+1`` of a resumed run sees the same weights,
optimizer state, batch and sampler seeds as step ``k+1`` of an uninterrupted run, and CPU XLA is
deterministic, so the final parameters are identical (tests/trainer/test_checkpoint_resume.py).

Completeness: Orbax writes a step into a temporary directory and renames it when every item is written,
so a save killed half-way never shows up as a step. A finalized step that still fails to restore
(truncated or corrupted files) is skipped with a warning and moved aside (``corrupt-<step>-<time>``), so
training resumes from the next older one and can later save that step number again; a good checkpoint
is never overwritten or deleted by this.

SIGTERM (GKE preemption, pod deletion): while the main thread only waits for a step's rollout and rewards
(``StepRecorder.at_boundary``: Tunix's data thread runs them, and they may outlast the grace period or
hang), the handler raises ``sigterm.StopNow`` there: the last finished step (the weights the actor still
holds) is saved and the trainer exits at once. With several processes only when that step is already
saved (a save needs every host; the others may be inside the rollout's collectives). Otherwise the handler
sets a flag; at the end of the step every host agrees on it (one tiny all-gather), the step is saved,
training stops and the trainer exits ``EXIT_PREEMPTED`` (143 = 128 + SIGTERM): retryable, unlike 2. A step
that would not end within the grace period (less room for its save) is given up with a message, still 143
(``step_deadline``), rather than left to the kubelet's SIGKILL.

Multi-host: every process calls save/restore (the arrays are sharded across hosts); Orbax lets process 0
alone write metadata, and only process 0 logs.

``gs://`` directories: Orbax writes there itself (etils ``epath`` over gcsfs for files and directories,
TensorStore's ``gcs`` kvstore for the arrays). Against a GCS-compatible server (``STORAGE_EMULATOR_HOST``)
``sources.point_tensorstore_at_emulator`` sends TensorStore there too (tests/trainer/test_gcs_resume.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob_trainer.run import sigterm
from rljob_trainer.telemetry.progress import StepRecorder, StepReport

log = logging.getLogger(__name__)

EXIT_PREEMPTED = 143
"""Exit code after a SIGTERM stop (checkpoint saved when a directory is configured); retryable."""
FORMAT = 1
MAX_TO_KEEP = 3
"""Older checkpoints kept as fall-backs in case the newest turns out unreadable."""


@dataclass(frozen=True)
class Resumed:
    step: int
    meta: dict[str, Any]


def _is_primary() -> bool:
    import jax

    return jax.process_index() == 0


def _info(msg: str, *args: Any) -> None:
    if _is_primary():
        log.warning(msg, *args)  # WARNING: the trainer's logging level hides INFO (Tunix is chatty)


def _any_process(flag: bool) -> bool:
    from rljob_trainer.run import distributed

    return distributed.any_process(flag)


class Checkpointer(sigterm.StopOnSigterm):
    """Saves and restores a ``tunix_bridge.TunixRun``; also the StepCallback that saves on schedule.

    ``on_saved(step, seconds)`` is called after each save (the metrics' checkpoint-pause histogram) and
    ``on_resumed(step, seconds)`` after a resume (seconds: reading checkpoints back, the goodput's
    checkpoint_restore). With ``directory=None`` nothing is saved or restored (SIGTERM
    still stops the run after the current step).
    """

    def __init__(
        self,
        directory: str | None,
        interval: int,
        seed: int,
        max_steps: int,
        on_saved: Callable[[int, float], None] | None = None,
        on_resumed: Callable[[int, float], None] | None = None,
        batch_size: int = 1,
        dataset_size: int | None = None,
        grace_seconds: float = 300.0,
    ) -> None:
        import orbax.checkpoint as ocp

        from rljob_trainer.workload import sources

        self.directory = directory
        self.batch_size = batch_size
        self.dataset_size = dataset_size
        self.resumed_step = 0
        self.resumed_position = 0
        """(step, examples consumed) the run started from: 0, 0 or the resumed checkpoint's."""
        self.interval = interval
        self.seed = seed
        self.max_steps = max_steps
        self.on_saved = on_saved
        self.on_resumed = on_resumed
        self.run: Any = None
        self.recorder: StepRecorder | None = None
        self.sigterm = False
        self.stopped_by_signal = False
        self.last_saved: int | None = None
        self.grace_seconds = grace_seconds
        self._longest_save = 0.0
        self._saving = False
        self._manager: Any = None
        if directory:
            if sources.kind(directory) == "gs":
                sources.point_tensorstore_at_emulator()
            options = ocp.CheckpointManagerOptions(max_to_keep=MAX_TO_KEEP, create=True)
            self._manager = ocp.CheckpointManager(
                directory, options=options, item_names=("params", "optimizer", "meta")
            )

    # --- what is saved -----------------------------------------------------------------------------
    @staticmethod
    def _states(run: Any) -> tuple[Any, Any]:
        from flax import nnx

        trainer = run.cluster.actor_trainer
        return nnx.state(trainer.model), nnx.state(trainer.optimizer)

    def _meta(self, run: Any, step: int) -> dict[str, Any]:
        trainer = run.cluster.actor_trainer
        return {
            "format": FORMAT,
            "step": step,
            "data_position": {
                "examples": self.position_at(step),
                "dataset_size": self.dataset_size,
                "batch_size": self.batch_size,
            },
            "rng": {
                "seed": self.seed,
                "next_step": step + 1,
                "scheme": "rollout seed = SeedSequence([seed, step, call]); batch = batch_from(examples)",
            },
            "tunix": {
                "train_steps": int(trainer._train_steps),
                "iter_steps": int(trainer._iter_steps),
                "global_steps": int(run.cluster.global_steps),
            },
            "max_steps": self.max_steps,
            "saved_at": time.time(),
        }

    def position_at(self, step: int) -> int:
        """Examples consumed after ``step``: each step since the start (or resume) took one batch."""
        return self.resumed_position + (step - self.resumed_step) * self.batch_size

    # --- save ----------------------------------------------------------------------------------------
    def save(self, step: int, run: Any | None = None) -> bool:
        """Save ``step`` (blocking until written); False when that step is already saved."""
        import orbax.checkpoint as ocp
        from flax import nnx

        run = run if run is not None else self.run
        if self._manager is None or step in self._manager.all_steps():
            return False
        started = time.perf_counter()
        self._saving = True
        params, opt = self._states(run)
        self._manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(nnx.to_pure_dict(params)),
                optimizer=ocp.args.StandardSave(nnx.to_pure_dict(opt)),
                meta=ocp.args.JsonSave(self._meta(run, step)),
            ),
            force=True,
        )
        self._manager.wait_until_finished()
        seconds = time.perf_counter() - started
        self._saving = False
        self._longest_save = max(self._longest_save, seconds)
        self.last_saved = step
        _info("checkpoint: saved step %d to %s in %.2fs", step, self.directory, seconds)
        if self.on_saved is not None:
            self.on_saved(step, seconds)
        return True

    def __call__(self, report: StepReport) -> None:
        """StepCallback: save every ``interval`` steps, at the last step, and when stopping on SIGTERM."""
        stop = _any_process(self.sigterm)
        if report.step % self.interval == 0 or report.step >= self.max_steps or stop:
            self.save(report.step)
        if stop and report.step < self.max_steps:
            self.stopped_by_signal = True
            _info("SIGTERM: stopping after step %d (checkpoint saved)", report.step)
            if self.recorder is not None:
                self.recorder.request_stop()

    # --- restore -------------------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Finalized checkpoint steps, newest first (half-written saves are never listed)."""
        if self._manager is None:
            return []
        self._manager.reload()
        return sorted(self._manager.all_steps(), reverse=True)

    def restore_into(self, run: Any, step: int) -> dict[str, Any]:
        """Load ``step`` into ``run``'s actor model and optimizer; raises if the checkpoint is unreadable."""
        import jax
        import orbax.checkpoint as ocp
        from flax import nnx

        params, opt = self._states(run)
        abstract = {
            k: jax.tree.map(ocp.utils.to_shape_dtype_struct, nnx.to_pure_dict(s))
            for k, s in (("params", params), ("optimizer", opt))
        }
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract["params"]),
                optimizer=ocp.args.StandardRestore(abstract["optimizer"]),
                meta=ocp.args.JsonRestore(),
            ),
        )
        meta = dict(restored["meta"])
        if meta.get("format") != FORMAT or meta.get("step") != step:
            raise ValueError(f"checkpoint {step}: unexpected metadata {meta}")
        nnx.replace_by_pure_dict(params, restored["params"])
        nnx.replace_by_pure_dict(opt, restored["optimizer"])
        trainer = run.cluster.actor_trainer
        nnx.update(trainer.model, params)
        nnx.update(trainer.optimizer, opt)
        return meta

    def resume(self, run: Any, recorder: StepRecorder | None = None) -> int:
        """Restore the newest readable checkpoint into ``run`` and position the loop after it.

        Returns the step resumed from (0: none found). Unreadable checkpoints are skipped with a warning.
        """
        self.run = run
        if recorder is not None:
            self.recorder = recorder
        started = time.perf_counter()
        for step in self.steps():
            try:
                meta = self.restore_into(run, step)
            except Exception as exc:  # any read/parse failure means "not a usable checkpoint"
                _info(
                    "checkpoint: step %d in %s is unreadable (%s: %s); skipping it",
                    step,
                    self.directory,
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "",
                )
                self._move_aside(step)
                continue
            if meta["rng"]["seed"] != self.seed:
                _info(
                    "checkpoint: step %d was trained with seed %s, the spec now says %s: the rest of the "
                    "run follows the new seed",
                    step,
                    meta["rng"]["seed"],
                    self.seed,
                )
            self._position(run, meta)
            self.resumed_step, self.resumed_position = step, self._data_position(step, meta)
            _info(
                "checkpoint: resumed from step %d (%s), data position %d",
                step,
                self.directory,
                self.resumed_position,
            )
            if self.on_resumed is not None:
                self.on_resumed(step, time.perf_counter() - started)
            return step
        return 0

    def _data_position(self, step: int, meta: dict[str, Any]) -> int:
        """Examples consumed at ``step``: the recorded position (older checkpoints recorded only the step)."""
        recorded = meta.get("data_position")
        if not isinstance(recorded, dict):
            return step * self.batch_size
        if recorded.get("dataset_size") not in (None, self.dataset_size):
            _info(
                "checkpoint: the dataset had %s examples, now %s: continuing at position %d of the new order",
                recorded["dataset_size"],
                self.dataset_size,
                recorded["examples"],
            )
        return int(recorded["examples"])

    @staticmethod
    def _position(run: Any, meta: dict[str, Any]) -> None:
        """Put Tunix's loop counters and our step number where the checkpointed run had them."""
        trainer = run.cluster.actor_trainer
        counters = meta["tunix"]
        trainer._train_steps = counters["train_steps"]
        trainer._iter_steps = counters["iter_steps"]
        run.cluster.global_steps = counters["global_steps"]
        run.learner._step = meta["step"]
        if getattr(run.learner, "should_sync_weights", False):
            run.cluster.sync_weights()  # a separate rollout model (vLLM) gets the restored weights

    def _move_aside(self, step: int) -> None:
        """Rename an unreadable step out of Orbax's view (process 0; local paths only)."""
        import jax

        if _is_primary() and "://" not in self.directory:
            src = Path(self.directory) / str(step)
            if src.exists():
                src.rename(Path(self.directory) / f"corrupt-{step}-{int(time.time())}")
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"rljob-checkpoint-skip-{step}")
        self._manager.reload()

    def close(self) -> None:
        if self._manager is None:
            return
        self._manager.wait_until_finished()
        self._manager.close()


def read_meta(directory: str, step: int) -> dict[str, Any]:
    """A checkpoint's metadata, read directly (for people and tests; no JAX needed)."""
    return json.loads((Path(directory) / str(step) / "meta" / "metadata").read_text())


def for_job(
    job: Any, recorder: StepRecorder, metrics: Any | None = None, dataset_size: int | None = None
) -> Checkpointer:
    """The job's checkpointer, registered as a step callback, with the SIGTERM handler installed.

    Without ``spec.checkpoint.directory`` nothing is saved, but SIGTERM still stops after the current step.
    """
    spec = job.spec
    ckpt = Checkpointer(
        spec.checkpoint.directory,
        spec.checkpoint.interval,
        spec.grpo.seed,
        spec.grpo.maxSteps,
        on_saved=metrics.on_checkpoint if metrics is not None else None,
        on_resumed=metrics.on_resume if metrics is not None else None,
        batch_size=spec.grpo.batchSize,
        dataset_size=dataset_size,
        grace_seconds=spec.terminationGracePeriodSeconds,
    )
    ckpt.recorder = recorder
    ckpt.install_sigterm_handler()
    recorder.callbacks.append(ckpt)
    return ckpt
