"""Trainer entry point: ``python -m rljob_trainer --config /etc/rljob/rljob.yaml`` (and ``rljob train -f``).

The config IS the RLJob manifest the operator mounts into the pod. Exit codes are part of the contract
with the JobSet's failure policy:

* 0: trained to the end.
* 2: bad config (invalid RLJob, unknown model family/size, missing checkpoint, row too short, engine not
  usable here, a reward function that raised or ran past spec.rewards[i].timeoutSeconds). Not retryable: every line on stderr names the field
  (``spec.model.checkpointPath: ...``, ``spec.rewards[1]: ...``).
* 1: anything else (a crash, a preempted host, ...). Retryable.
* 143: stopped by SIGTERM after saving the last finished step (docs/observability.md): at once while a
  step's rollout or rewards run, else after the step under way. Retryable: the restarted trainer resumes.

All configuration checks run before JAX or Tunix is imported, so a bad config fails in about a second.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from rljob.api import RLJobError, load_rljob
from rljob.api.spec import RLJob
from rljob_trainer import rollout
from rljob_trainer.models import families as models
from rljob_trainer.run import compile_cache, platforms, sigterm, startup
from rljob_trainer.run.options import add_train_options
from rljob_trainer.telemetry.console import console
from rljob_trainer.telemetry.progress import StepCallback, StepRecorder, summary
from rljob_trainer.workload import rewards, sources

if TYPE_CHECKING:  # importing the bridge imports JAX and Tunix: only when training
    from rljob_trainer import tunix_bridge
    from rljob_trainer.run import checkpoint

EXIT_OK = 0
EXIT_RETRYABLE = 1
EXIT_BAD_CONFIG = 2
EXIT_PREEMPTED = 143  # issue 6: stopped by SIGTERM after checkpointing (rljob_trainer.run.checkpoint)
DEFAULT_CONFIG = "/etc/rljob/rljob.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="rljob_trainer", description="GRPO post-training from an RLJob manifest."
    )
    p.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help=f"RLJob manifest, or - for stdin (default {DEFAULT_CONFIG})",
    )
    add_train_options(p)
    return p.parse_args(argv)


def free_port() -> int:
    """A TCP port nobody listens on right now (``--metrics-port 0``), for local runs side by side."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def apply_overrides(job: RLJob, args: argparse.Namespace, source: str) -> RLJob:
    """Command-line overrides, re-validated through the API model so they obey the same rules."""
    manifest = job.model_dump(mode="json", exclude_none=True)
    spec = manifest["spec"]
    if args.max_steps is not None:
        spec.setdefault("grpo", {})["maxSteps"] = args.max_steps
    if args.seed is not None:
        spec.setdefault("grpo", {})["seed"] = args.seed
    if args.no_packing:
        spec.setdefault("packing", {})["maxSeqTokenPerTpu"] = 0
    if args.metrics_port is not None:
        spec.setdefault("metrics", {})["port"] = args.metrics_port or free_port()
    if args.workdir and not spec.get("checkpoint", {}).get("directory"):
        spec.setdefault("checkpoint", {})["directory"] = str(Path(args.workdir) / "checkpoints")
    from rljob.api import parse_rljob

    return parse_rljob(manifest, f"{source} (with command-line overrides)")


def preflight(job: RLJob) -> list[str]:
    """Every startup problem no retry can fix that shows without fetching, as ``path: message`` lines."""
    spec = job.spec
    errors = models.check_model_spec(spec.model)
    errors += rollout.check_rollout_spec(spec)
    row = spec.packing.maxSeqTokenPerTpu
    if row and row < spec.maxTargetLength:  # also an API rule; re-checked because a packed row must hold
        errors.append(  # any prompt+completion, and one that does not fit would otherwise be dropped
            f"spec.packing.maxSeqTokenPerTpu: {row} is shorter than spec.maxTargetLength "
            f"({spec.maxTargetLength}); a whole prompt+completion must fit one packed row"
        )
    return errors


def train(
    job: RLJob, callbacks: list[StepCallback] | None = None, workload: startup.Workload | None = None
) -> tunix_bridge.TunixRun:
    """Build the Tunix trainer for ``job`` and run it; returns the run (its recorder holds every StepReport,
    its cluster the trained actor). ``workload`` comes from ``startup.prepare`` (prepared here if not given).

    Raises RLJobError for config problems found while building (e.g. the engine needs another backend),
    ``sigterm.StopNow`` (saying what it saved) for a SIGTERM during a step's rollout or rewards.
    """
    from rljob_trainer.run import checkpoint, distributed
    from rljob_trainer.telemetry import metrics_server

    workload = workload if workload is not None else startup.prepare(job)

    procs = distributed.initialize()  # issue 6: join the other hosts before any JAX computation
    import jax

    spec = job.spec
    # MaxText's config fields, read here (not in preflight: needs MaxText); before the metrics, which
    # build MaxText's config from the overrides.
    if spec.model.backend == "maxtext":
        from rljob_trainer.models.maxtext import decoders as maxtext_models

        override_errors = maxtext_models.check_overrides(spec.model)
        if override_errors:
            raise RLJobError(override_errors, job.metadata.name, "cannot be trained")
    backend_errors = rollout.check_backend(spec, jax.default_backend())
    if backend_errors:
        raise RLJobError(backend_errors, job.metadata.name, "cannot be trained on this host")
    recorder = StepRecorder(
        max_steps=spec.grpo.maxSteps, packed=spec.packing.maxSeqTokenPerTpu > 0, callbacks=callbacks
    )
    try:
        telemetry = metrics_server.start(job, procs.index, recorder)  # issue 6: /metrics on every host
    except OSError as exc:  # a port in use is the config's problem here: no retry frees it
        port = job.spec.metrics.port
        raise RLJobError(
            [
                f"spec.metrics.port: cannot serve metrics on port {port}: {exc.strerror or exc} "
                "(another trainer, or an earlier `make demo`, still running?); choose another with "
                "--metrics-port PORT, or --metrics-port 0 for a free one (make demo DEMO_ARGS='--metrics-port 0')"
            ],
            job.metadata.name,
            "cannot be trained on this host",
        ) from None
    # issue 6: saves every N steps and on SIGTERM; records the data position (examples consumed)
    ckpt = checkpoint.for_job(job, recorder, telemetry, dataset_size=len(workload.data))
    try:
        run = _build_and_train(job, workload, recorder, ckpt)
    except sigterm.StopNow:  # SIGTERM while the actor still held the last finished step
        raise sigterm.StopNow(ckpt.stop_now()) from None
    ckpt.close()
    return run


def _build_and_train(
    job: RLJob, workload: startup.Workload, recorder: StepRecorder, ckpt: checkpoint.Checkpointer
) -> tunix_bridge.TunixRun:
    """Build the Tunix run, resume it from the newest checkpoint and train; a config error raises
    RLJobError (a packed row too short, a reward function that failed)."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.packing.rows import RowTooShortError

    spec = job.spec
    try:
        run = tunix_bridge.build(
            spec,
            workload.reward_fns,
            recorder,
            tokenizer=workload.tokenizer,
            checkpoint_dir=workload.checkpoint_dir,
        )
    except RowTooShortError as exc:  # the packed learner's own startup check: a config error, not a crash
        raise RLJobError(
            [f"spec.packing.maxSeqTokenPerTpu: {exc}"], job.metadata.name, "cannot be trained"
        ) from None
    start = ckpt.resume(run)  # newest readable checkpoint (0: none)
    try:
        run.train(workload.data.batches(ckpt.resumed_position, spec.grpo.maxSteps - start))
    except Exception as exc:  # Tunix re-raises its reward thread's error here (RLLearner's future.result())
        failed = rewards.find_reward_error(exc)
        if failed is None:
            raise
        # a reward's bug fails the same way on every retry: exit 2 naming spec.rewards[i], no traceback
        raise RLJobError([str(failed)], job.metadata.name, "stopped: a reward function failed") from None
    return run


def _leave(code: int) -> None:
    """Exit now, without the interpreter's shutdown: it would wait for threads left running (Tunix's data
    thread in a rollout, a reward call past its deadline) and for locks they hold."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _configure_logging() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")  # Tunix's progress bar; ours is console.py
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
        logging.getLogger("absl").addFilter(_quiet_on_one_device)
    except ImportError:
        pass


def _quiet_on_one_device(record: logging.LogRecord) -> bool:
    """Drop two Tunix warnings that say nothing on a CPU run and confuse a first-time user.

    "Skipping non-TPU device: cpu. You might be missing jax[tpu]" comes from Tunix's HBM report on every
    CPU step; "Resharding model from None to <mesh of 1 device>" from RLCluster placing an unsharded model
    on a one-device mesh (a no-op). Resharding onto a larger mesh is kept: there it moves real weights.
    """
    message = str(record.msg)
    if message.startswith("Skipping non-TPU device"):
        return False
    if message.startswith("Resharding model from") and len(record.args or ()) == 2:
        source, target = record.args  # type: ignore[misc]
        return not (source is None and getattr(target, "size", 0) == 1)
    return True


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` say (``parse_args``' options; ``rljob train`` builds the same namespace)."""
    sigterm.install()  # before anything that can block: a SIGTERM while starting exits at once (143)
    try:
        job = load_rljob(args.config)
        job = apply_overrides(job, args, args.config)
        errors = preflight(job)
        if errors:  # a valid RLJob (`rljob validate` agrees) that this trainer cannot run as given
            raise RLJobError(errors, args.config, "cannot be trained")
        missing = [name for name in ("jax", "tunix") if importlib.util.find_spec(name) is None]
        if missing:
            raise RLJobError(
                [
                    f"{' and '.join(missing)} not installed in this Python environment: "
                    "pip install 'rljob[trainer]' (CPU) or 'rljob[tpu]' (TPU)"
                ],
                args.config,
                "cannot be trained here",
            )
        try:
            workload = startup.prepare(job)  # downloads, tokenizer, data, rewards: still before JAX
        except RLJobError as exc:  # a valid RLJob whose files this trainer cannot use: name the file
            raise RLJobError(exc.errors, args.config, "cannot be trained") from None
    except RLJobError as exc:
        print(exc, file=sys.stderr)  # names the file: --config here, -f for `rljob train`
        return EXIT_BAD_CONFIG
    except sources.SourceUnavailable as exc:  # the network or a server failed: a retry may work
        print(f"source unavailable (retryable): {exc}", file=sys.stderr)
        return EXIT_RETRYABLE

    platforms.apply()  # before JAX is imported: no libtpu error page where no TPU is attached
    _configure_logging()
    spec = job.spec
    print(
        f"rljob trainer: {job.metadata.name}: {models.label(spec.model)}, rollout "
        f"{spec.rollout.engine}, packing {spec.packing.maxSeqTokenPerTpu or 'off'}, "
        f"{spec.grpo.maxSteps} steps of {spec.grpo.batchSize}x{spec.grpo.numGenerations}",
        flush=True,
    )
    cache = compile_cache.enable(compile_cache.directory(spec))  # before the first compilation
    if cache:
        print(f"compilation cache: {cache}", flush=True)
    callbacks: list[StepCallback] = [] if args.quiet else [console(spec.grpo.maxSteps, every=args.log_every)]
    started = time.perf_counter()
    try:
        run = train(job, callbacks, workload)
    except RLJobError as exc:
        print(exc, file=sys.stderr)
        if rewards.abandoned_calls():  # a reward past its deadline still runs: do not wait for it
            _leave(EXIT_BAD_CONFIG)
        return EXIT_BAD_CONFIG
    except sigterm.StopNow as stop:  # the checkpoint is saved; Tunix's data thread is left behind
        print(f"{stop}; exit {EXIT_PREEMPTED}", flush=True)
        _leave(EXIT_PREEMPTED)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_RETRYABLE
    except Exception:
        traceback.print_exc()
        return EXIT_RETRYABLE
    if run.recorder.stop_requested:  # SIGTERM: the checkpoint is saved; a restart resumes from it
        print(
            f"stopped by SIGTERM after {len(run.recorder.reports)} steps; exit {EXIT_PREEMPTED}", flush=True
        )
        return EXIT_PREEMPTED
    print(f"done: {summary(run.recorder.reports)}; wall {time.perf_counter() - started:.1f}s", flush=True)
    return EXIT_OK
