"""The actor's train step traced and compiled (or read from the persistent cache) while the first rollout
runs, so a start's first step does not wait for it afterwards (issue 42).

Why: Tunix's main thread only trains. During step 1 it waits for the first rollout and reference pass
(another thread), then traces the train step and compiles it, or on a warm restart reads it back from
JAX's persistent cache. On one v5e chip (Qwen3-0.6B packed, 1 x 8 prompts, total 512, a warm cache) that
train phase took 26.5 s of the 45.4-s first step, while the main thread had idled ~20 s before it.

How: where the train step's input has one shape known at start, a thread builds it from a synthetic
micro-batch of the longest sequences, puts it on the mesh as Tunix does (``shard_input``) and runs
``lower(...).compile()`` of the same ``nnx.jit`` Tunix calls. jax.jit's ``lower().compile()`` fills the
caches its call uses (the traced jaxpr, the lowering, the executable), so the first real call runs the
program at once. The first train call waits for the thread (``wait_before_training``), so nothing is
traced twice. The unpacked learner's input is Tunix's own ``[B, P + Tc]`` micro-batch: one shape always.
The packed learner's is one shape with token-budget chunks (every micro-batch padded to
``chunks.max_chunks``) and no block-sparse pair lists (their length follows the data): ``packed_input``.
Elsewhere nothing happens. A failure is a warning: the first step then compiles as it always did.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo.grpo_learner import TrainExample
from tunix.sft import sharding_utils

from rljob_trainer.packing.chunks import max_chunks
from rljob_trainer.packing.rows import ShapeCache

log = logging.getLogger(__name__)
Role, Mode = rl_cluster_lib.Role, rl_cluster_lib.Mode
# A switch for the bench's A/B arm (``bench/tpu.py --no-prewarm``) and tests.
ENABLED = True


def micro_batch_sequences(learner: Any) -> int | None:
    """Sequences in one training micro-batch, as Tunix's loop cuts them (micro or mini-batch of prompts,
    times the generations); None where it depends on the dataset (no mini-batch size set)."""
    cfg = learner.rl_cluster.cluster_config.training_config
    prompts = cfg.train_micro_batch_size or cfg.mini_batch_size
    return prompts * learner.algo_config.num_generations if prompts else None


def synthetic_micro_batch(learner: Any, sequences: int) -> TrainExample:
    """A Tunix ``TrainExample`` of ``sequences`` sequences of the longest prompt and completion, with the
    fields and dtypes the GRPO learner produces (reference log-probs if beta > 0, old ones if more than
    one iteration)."""
    rollout = learner.rl_cluster.cluster_config.rollout_config
    rollout = rollout[Mode.TRAIN] if isinstance(rollout, dict) else rollout
    pad = int(learner.rl_cluster.rollout.pad_id())
    token = 1 if pad == 0 else 0
    p, c = rollout.max_prompt_length, rollout.max_tokens_to_generate
    prompt_ids = jnp.full((sequences, p), token, jnp.int32)
    completion_ids = jnp.full((sequences, c), token, jnp.int32)
    logps = jnp.zeros((sequences, c), jnp.float32)
    return TrainExample(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_ids != pad,
        completion_ids=completion_ids,
        completion_mask=completion_ids != pad,
        advantages=jnp.zeros((sequences,), jnp.float32),
        ref_per_token_logps=logps if learner.algo_config.beta != 0.0 else None,
        old_per_token_logps=logps if learner.algo_config.num_iterations > 1 else None,
    )


def fixed_shape(learner: Any, sequences: int) -> bool:
    """Whether every packed micro-batch of ``sequences`` sequences reaches the train step in one shape."""
    if not learner.chunk_rows or learner.attention == "blocked":
        return False
    return max_chunks(sequences, learner.longest, learner.row_len, learner.chunk_rows) > 1


def packed_input(learner: Any, sequences: int) -> Callable[[TrainExample], Any] | None:
    """The packed learner's train-step input for a micro-batch (packed as training packs it, planned in a
    scratch shape cache), or None where its shape depends on the data (``fixed_shape``)."""
    if not fixed_shape(learner, sequences):
        return None

    def pack(example: TrainExample) -> Any:
        layout = learner._plan(
            *_sequence_arrays(example), shapes=ShapeCache(multiple_of=learner.row_multiple)
        )
        return learner.pack(example, layout)[0]

    return pack


def unpacked_input(learner: Any, sequences: int) -> Callable[[TrainExample], Any]:
    """The unpacked learner's train-step input: Tunix's own micro-batch, one shape always."""
    return lambda example: example


def wait_before_training(learner: Any) -> None:
    """Make the learner's first actor update wait for ``learner.prewarm`` (set by its ``train``): nothing is
    traced twice. Installed at construction, under the instrumentation's timed wrapper, so the wait counts
    in the train phase."""
    learner.prewarm = None
    update_actor = learner.rl_cluster.update_actor

    def update_actor_once_compiled(*args: Any, **kwargs: Any) -> Any:
        if learner.prewarm is not None:
            learner.prewarm.wait()
        return update_actor(*args, **kwargs)

    learner.rl_cluster.update_actor = update_actor_once_compiled


class Prewarm:
    """The thread that compiles the train step; ``wait`` before the first train call."""

    def __init__(self, learner: Any, train_input: Callable[[Any, int], Callable | None]) -> None:
        """``train_input(learner, sequences)``: how the learner turns a Tunix micro-batch into the train
        step's input, or None where that input's shape depends on the data."""
        self.seconds: float | None = None  # how long the compile (or cache read) took, once done
        self._thread: threading.Thread | None = None
        sequences = micro_batch_sequences(learner)
        to_input = train_input(learner, sequences) if ENABLED and sequences is not None else None
        if to_input is None:
            log.info("prewarm: off (the train step's shape depends on the data); step 1 compiles it")
            return
        cluster, trainer = learner.rl_cluster, learner.rl_cluster.actor_trainer
        try:
            jitted, inputs = _step_and_input(learner, sequences, to_input)
        except Exception as exc:  # never fail the run: step 1 compiles the step as it always did
            log.warning("prewarm: off, the synthetic micro-batch failed (%s); step 1 compiles the step", exc)
            return
        log.info(
            "prewarm: compiling the train step beside the first rollout, for every micro-batch's one shape: "
            "%d sequences, %s",
            sequences,
            " x ".join(str(d) for d in _rows(inputs).shape),
        )

        def compile_step() -> None:
            started = time.perf_counter()
            # the trainer's recorder (``instrument.Instrumented``), if any: the compile is the train phase's
            recorder = getattr(learner, "recorder", None)
            phase = recorder.attributed("train") if recorder is not None else contextlib.nullcontext()
            try:
                with phase, cluster._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):
                    jitted.lower(trainer.model, trainer.optimizer, inputs).compile()
            except Exception as exc:  # never fail the run: step 1 compiles the step as it always did
                log.warning("prewarm: the train step did not compile ahead (%s); step 1 compiles it", exc)
                return
            self.seconds = time.perf_counter() - started
            log.info("prewarm: the train step compiled beside the first rollout in %.1f s", self.seconds)

        self._thread = threading.Thread(target=compile_step, name="rljob-prewarm", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Block until the compile is done (at once if there was none)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _step_and_input(learner: Any, sequences: int, to_input: Callable[[TrainExample], Any]) -> tuple[Any, Any]:
    """The ``nnx.jit`` Tunix's train calls, and the input of a micro-batch of ``sequences`` sequences, on the
    mesh as Tunix puts it there."""
    cluster, trainer = learner.rl_cluster, learner.rl_cluster.actor_trainer
    with cluster._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):  # as Tunix's update_actor
        step, _ = trainer.jit_train_and_eval_step(False, True)  # Tunix's train: cache_nnx_graph
        example = to_input(synthetic_micro_batch(learner, sequences))
        example = sharding_utils.shard_input(example, trainer.config.data_sharding_axis)
    return getattr(step.func, "__wrapped__", step.func), example  # nnx.cached_partial wraps the nnx.jit


def _sequence_arrays(example: TrainExample) -> tuple[np.ndarray, ...]:
    return tuple(
        np.asarray(a)
        for a in (example.prompt_ids, example.prompt_mask, example.completion_ids, example.completion_mask)
    )


def _rows(inputs: Any) -> Any:
    """The token rows of a train-step input: packed ``[C, Rc, L]`` (or ``[R, L]``), or Tunix's prompts."""
    return inputs.tokens if hasattr(inputs, "tokens") else inputs.prompt_ids
