"""RLJob spec -> Tunix: the only module that knows Tunix's config classes and learner internals.

Mapping (see docs/trainer.md for the table):
  spec.maxPrefillPredictLength        -> RolloutConfig.max_prompt_length (BOS included)
  maxTargetLength - maxPrefill...     -> RolloutConfig.max_tokens_to_generate; kv_cache_size = maxTargetLength
  spec.grpo.{numGenerations,beta,epsilon,numIterations} -> GRPOConfig
  spec.grpo.{batchSize,miniBatchSize,microBatchSize}    -> dataset batch, RLTrainingConfig mini/micro batch
  spec.grpo.maxSteps                  -> RLTrainingConfig.max_steps in optimizer updates
                                         (maxSteps x batch/miniBatch x numIterations) and a finite dataset
  spec.grpo.learningRate              -> optax clip(1.0) + AdamW
  spec.rollout                        -> ClusterConfig.rollout_engine + RolloutConfig (rollout.py's kwargs)
  spec.packing.maxSeqTokenPerTpu > 0  -> the packing package's learner (``learner_class``); never Tunix's
                                         own ``max_seq_token_per_tpu`` (next-fit, drops long sequences,
                                         one optimizer update per row: see shared/reference/packing.md)
  spec.packing.maxSeqTokenPerTpu == 0 -> Tunix qwen3/qwen2/llama3: the packing package's unpacked learner
                                         (Tunix's rows, the vocabulary head at completion columns only);
                                         otherwise Tunix's own GRPOLearner
  spec.grpo.maxTokensPerTpu           -> those learners' token_budget (unset: ``memory.token_budget``)

Tunix's learner loop is kept; a thin mixin around it seeds each rollout from (seed, step), times the
phases and reports each step to the callbacks in ``progress.StepRecorder``.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
from tunix.generate import tokenizer_adapter
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout

from rljob.api.spec import RLJobSpec
from rljob_trainer import decode, memory, rollout
from rljob_trainer.instrument import Instrumented
from rljob_trainer.models import families as models
from rljob_trainer.telemetry.progress import StepRecorder

log = logging.getLogger(__name__)
Mode = rl_cluster_lib.Mode
Role = rl_cluster_lib.Role


@dataclass(frozen=True)
class Lengths:
    prompt: int  # max prompt tokens, BOS included
    completion: int  # max generated tokens
    total: int  # prompt + completion = one unpacked row


def lengths(spec: RLJobSpec) -> Lengths:
    return Lengths(
        prompt=spec.maxPrefillPredictLength,
        completion=spec.maxTargetLength - spec.maxPrefillPredictLength,
        total=spec.maxTargetLength,
    )


def updates_per_step(spec: RLJobSpec) -> int:
    """Optimizer updates per global step: one per mini-batch, per GRPO iteration."""
    g = spec.grpo
    return (g.batchSize // (g.miniBatchSize or g.batchSize)) * g.numIterations


def make_mesh(slices: int = 1) -> jax.sharding.Mesh:
    """One slice: all devices on the fsdp axis. Several slices (multislice): a leading ``dp`` axis over the
    slices, so only data parallelism crosses the slow data-center network and fsdp/tp stay on each slice's
    ICI. A plain Mesh: jax 0.10's make_mesh gives Explicit axes that break Tunix's embedder."""
    devices = jax.devices()
    if slices == 1 or len(devices) % slices:  # a local run of a multislice RLJob: one flat mesh
        return jax.sharding.Mesh(np.array(devices).reshape(-1, 1), ("fsdp", "tp"))
    grid = np.array(slice_major(devices)).reshape(slices, -1, 1)
    return jax.sharding.Mesh(grid, ("dp", "fsdp", "tp"))


def slice_major(devices: list[Any]) -> list[Any]:
    """Devices ordered slice by slice (TPU devices carry ``slice_index``; others, e.g. CPU, go in process
    order, which is slice-major too: process id = host + slice x hosts)."""
    return sorted(devices, key=lambda d: (getattr(d, "slice_index", 0), d.process_index, d.id))


def data_axes(mesh: jax.sharding.Mesh) -> tuple[str, ...]:
    """Mesh axes the batch is split over: ``dp`` (across slices) and ``fsdp`` (within one)."""
    return tuple(a for a in ("dp", "data", "fsdp") if a in mesh.axis_names)  # data: MaxText's mesh


def optimizer(spec: RLJobSpec) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(learning_rate=spec.grpo.learningRate, b1=0.9, b2=0.99, weight_decay=0.1),
    )


def rollout_config(
    spec: RLJobSpec, tokenizer: Any, checkpoint_dir: Path | None = None, actor: Any = None
) -> base_rollout.RolloutConfig:
    """Sampling settings. The pad id joins the EOS ids: a sampled pad would otherwise punch a hole in the
    completion mask. The seed is set per generate call (see ``Instrumented``). ``checkpoint_dir``: the
    local copy of spec.model.checkpointPath (what vLLM reads its config from). ``actor``: for a MaxText
    model with the vLLM engine, whose weight-sync mappings vLLM gets (``maxtext_vllm``)."""
    n = lengths(spec)
    adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)
    pad, eos = int(adapter.pad_id()), int(adapter.eos_id())
    fields: dict[str, Any] = dict(
        max_tokens_to_generate=n.completion,
        max_prompt_length=n.prompt,
        kv_cache_size=n.total,
        temperature=spec.rollout.temperature,
        top_p=1.0,
        top_k=None,
        eos_tokens=sorted({eos, pad}),
    )
    if spec.rollout.engine == rollout.VLLM:
        kwargs = rollout.vllm_engine_kwargs(spec)
        # Tunix overwrites EngineArgs.gpu_memory_utilization with rollout_vllm_hbm_utilization, so the
        # memory fraction must travel in that field, not in the raw kwargs.
        fields.update(
            rollout_vllm_hbm_utilization=kwargs.pop("gpu_memory_utilization"),
            rollout_vllm_kwargs=kwargs,
            rollout_vllm_model_version=models.vllm_model_path(spec.model, checkpoint_dir),
            rollout_vllm_init_with_random_weights=True,  # weights come from the trainer's sync
            rollout_vllm_tpu_backend_type="jax",
        )
        if spec.model.backend == "maxtext":
            from rljob_trainer.models.maxtext import vllm as maxtext_vllm

            fields["rollout_mapping_config"] = maxtext_vllm.mapping_config(actor)
    return base_rollout.RolloutConfig(**fields)


def training_config(
    spec: RLJobSpec, data_sharding: tuple[str, ...] = ("fsdp",)
) -> rl_cluster_lib.RLTrainingConfig:
    g = spec.grpo
    mini = g.miniBatchSize or g.batchSize
    micro = g.microBatchSize or mini
    # One micro-batch per mini-batch: no train_micro_batch_size, so Tunix derives no
    # gradient_accumulation_steps and PeftTrainer does not wrap the optimizer in optax.MultiSteps, whose
    # float32 gradient accumulator (4 B/param, 2.2 GiB for Qwen3-0.6B) would only ever add zero. Tunix's
    # learner uses the mini-batch size then (rl_learner: train_micro_batch_size or mini_batch_size).
    return rl_cluster_lib.RLTrainingConfig(
        data_sharding_axis=data_sharding,
        actor_optimizer=optimizer(spec),
        eval_every_n_steps=1_000_000_000,  # no eval set
        max_steps=g.maxSteps * updates_per_step(spec),
        mini_batch_size=mini,
        train_micro_batch_size=micro if micro < mini else None,
        max_seq_token_per_tpu=None,  # packing is the packing package's job, never Tunix's pack_sequences
        checkpoint_root_directory=None,  # issue 6: Orbax checkpoints via a StepCallback
        pbar_description=None,
    )


def rollout_engine(spec: RLJobSpec) -> Any:
    """Tunix's ``rollout_engine``: its name, or for MaxText models with the vanilla engine our full-forward
    rollout class (Tunix's vanilla sampler needs Tunix's KV-cache protocol, which MaxText's adapter lacks)."""
    if spec.model.backend == "maxtext" and spec.rollout.engine == rollout.VANILLA:
        from rljob_trainer.models.maxtext.rollout import FullForwardRollout

        return FullForwardRollout
    return rollout.engine_name(spec)


def cluster_config(
    spec: RLJobSpec,
    mesh: jax.sharding.Mesh,
    tokenizer: Any,
    checkpoint_dir: Path | None = None,
    axis_rules: Any = None,
    actor: Any = None,
) -> rl_cluster_lib.ClusterConfig:
    """Colocated: actor, reference and rollout share one mesh (and, for vanilla, one set of weights).
    ``axis_rules``: logical -> mesh axis rules of models annotated with logical axes (MaxText's)."""
    return rl_cluster_lib.ClusterConfig(
        role_to_mesh={Role.ACTOR: mesh, Role.REFERENCE: mesh, Role.ROLLOUT: mesh},
        role_to_logical_axis_rule=None if axis_rules is None else dict.fromkeys(Role, axis_rules),
        rollout_engine=rollout_engine(spec),
        offload_to_cpu=False,
        training_config=training_config(spec, data_axes(mesh)),
        rollout_config=rollout_config(spec, tokenizer, checkpoint_dir, actor),
    )


def grpo_config(spec: RLJobSpec) -> grpo_learner.GRPOConfig:
    g = spec.grpo
    return grpo_learner.GRPOConfig(
        num_generations=g.numGenerations, num_iterations=g.numIterations, beta=g.beta, epsilon=g.epsilon
    )


def learner_class(
    spec: RLJobSpec, data_parallel: int = 1, backend: str = "cpu"
) -> tuple[type, dict[str, Any]]:
    """THE place that picks the learner: the packing package's packed learner (packing on), its unpacked
    learner (packing off, ``unpacked_learner``) or plain Tunix GRPO.

    Returns the class and the extra constructor kwargs it needs (rows per micro-batch are rounded to a
    multiple of the data-parallel width so they shard evenly). On a TPU backend packed qwen3/qwen2 run
    Tunix's splash attention with segment ids (``attention="splash"``; the row is a multiple of 128 by
    the API rule, so a splash block divides it); elsewhere the packing package picks (block-sparse).
    Packing only changes speed, never the updates, so if the packing package is missing from a build a
    packed spec runs unpacked (warning).
    """
    if spec.packing.maxSeqTokenPerTpu > 0:
        try:
            from rljob_trainer import packing

            packed = packing.PackedGRPOLearner
        except (ImportError, AttributeError):
            packed = None
        if packed is not None:
            extra: dict[str, Any] = {
                "row_tokens": spec.packing.maxSeqTokenPerTpu,
                "row_multiple": data_parallel,
            }
            tunix_splash = spec.model.backend == "tunix" and spec.model.family in ("qwen3", "qwen2")
            if backend == "tpu" and tunix_splash:  # adapter.SPLASH_FAMILIES; MaxText: its own attention
                extra["attention"] = "splash"
            return packed, extra
        log.warning(
            "rljob_trainer.packing is not available in this build: training unpacked "
            "(same updates, no packing speed-up)"
        )
    return unpacked_learner(spec)


def unpacked_learner(spec: RLJobSpec) -> tuple[type, dict[str, Any]]:
    """Packing off: the packing package's unpacked learner (Tunix's rows and loop, the vocabulary head at
    completion columns only in every actor-side pass; same updates) for Tunix qwen3 / qwen2 / llama3,
    else (other families, MaxText, a build without the package) Tunix's ``GRPOLearner``. Both logged."""
    try:
        from rljob_trainer import packing

        unpacked = packing.UnpackedGRPOLearner
    except (ImportError, AttributeError):
        unpacked = None
    if unpacked is not None and spec.model.backend == "tunix" and spec.model.family in unpacked.FAMILIES:
        return unpacked, {}
    log.info("unpacked: Tunix's GRPOLearner, the head over every column (%s)", models.label(spec.model))
    return grpo_learner.GRPOLearner, {}


def is_packed(learner: type) -> bool:
    """Whether a learner trains on packed rows (tokens counted from the rows): not Tunix's, nor the
    unpacked one (``UNPACKED``: Tunix's ``[B, P + Tc]`` rows)."""
    return learner is not grpo_learner.GRPOLearner and not getattr(learner, "UNPACKED", False)


@dataclass
class TunixRun:
    """A built trainer: the cluster, the learner and the recorder its steps report to."""

    cluster: rl_cluster_lib.RLCluster
    learner: Any
    recorder: StepRecorder

    def train(self, batches: Iterable[dict[str, np.ndarray]]) -> None:
        self.learner.train(batches)


def build_models(
    spec: RLJobSpec, tokenizer: Any, checkpoint_dir: Path | None
) -> tuple[jax.sharding.Mesh, Any, Any, Any]:
    """(mesh, actor, reference or None, logical axis rules or None) for spec.model's backend. MaxText is
    imported only here and only for backend maxtext: its adapter patches jax.lax when imported
    (docs/maxtext.md); it reads spec.model.checkpointPath itself (load_parameters_path)."""
    with_reference = spec.grpo.beta > 0
    if spec.model.backend == "maxtext":
        from rljob_trainer.models.maxtext import decoders as maxtext_models

        config = maxtext_models.maxtext_config(
            spec.model, max_target_length=spec.maxTargetLength, seed=spec.grpo.seed
        )
        mesh = maxtext_models.make_mesh(config)
        pad_id = int(tokenizer_adapter.TokenizerAdapter(tokenizer).pad_id())
        actor = maxtext_models.build_model(config, mesh, pad_id)
        reference = maxtext_models.build_model(config, mesh, pad_id) if with_reference else None
        return mesh, actor, reference, config.logical_axis_rules
    mesh = make_mesh(spec.tpu.slices)
    actor = models.build_model(spec.model, mesh, spec.grpo.seed, checkpoint_dir)
    reference = (
        models.build_model(spec.model, mesh, spec.grpo.seed, checkpoint_dir) if with_reference else None
    )
    return mesh, actor, reference, None


def build(
    spec: RLJobSpec,
    reward_fns: list,
    recorder: StepRecorder,
    start_step: int = 0,
    tokenizer: Any = None,
    checkpoint_dir: Path | None = None,
) -> TunixRun:
    """Build models, cluster and learner for ``spec``. ``start_step`` is the number of steps already done
    (a resumed run), so step numbers and rollout seeds continue where they left off. ``tokenizer`` and
    ``checkpoint_dir`` come from ``startup.prepare`` (defaults: the built-in tokenizer, random weights)."""
    tokenizer = tokenizer if tokenizer is not None else models.build_tokenizer(None)
    mesh, actor, reference, axis_rules = build_models(spec, tokenizer, checkpoint_dir)
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=cluster_config(spec, mesh, tokenizer, checkpoint_dir, axis_rules, actor),
    )
    memory.drop_anchor_copy(cluster)  # memory levers that change no number (memory.py)
    memory.donate_model_in_train_step(cluster.actor_trainer)
    installed = decode.install(cluster, timing=recorder.add_sampler_call)
    if installed is not None:  # the JAX sampler (vLLM: its own cache)
        g, n = spec.grpo, lengths(spec)
        micro = g.microBatchSize or g.miniBatchSize or g.batchSize
        factor = decode.peak_cache_factor(n.prompt, n.total)
        prompts = memory.rollout_prompts(
            g.batchSize, micro, g.numGenerations, n.total, actor, factor, kv_layout=installed.kv_layout
        )
        cluster.cluster_config.training_config.rollout_micro_batch_size = prompts
    data_parallel = math.prod(mesh.shape[a] for a in data_axes(mesh))
    base, extra = learner_class(spec, data_parallel=data_parallel, backend=jax.default_backend())
    recorder.packed = is_packed(base)
    recorder.memory_probe = memory.hbm_usage
    if "token_budget" in inspect.signature(base).parameters:  # the packing package's learners
        from rljob_trainer.packing import stack  # a build may lack the package (``learner_class``)

        # the packed passes run a Tunix model's layers in one scan (a TPU's default): more to plan for
        scan = recorder.packed and spec.model.backend == "tunix" and stack.scans()
        extra["token_budget"] = memory.token_budget(spec.grpo.maxTokensPerTpu, actor, scan=scan)
    learner_cls = type(f"Instrumented{base.__name__}", (Instrumented, base), {})
    learner = learner_cls(rl_cluster=cluster, algo_config=grpo_config(spec), reward_fns=reward_fns, **extra)
    learner._setup_instrumentation(recorder, spec.grpo.seed, start_step)
    return TunixRun(cluster=cluster, learner=learner, recorder=recorder)
