"""The actor's train step traced and compiled (or read from the persistent cache) while the first rollout
runs, so a start's first step does not wait for it afterwards (issue 42).

Why: Tunix's main thread only trains. During step 1 it waits for the first rollout and reference pass
(another thread), then traces the train step and compiles it, or on a warm restart reads it back from
JAX's persistent cache. On one v5e chip (Qwen3-0.6B packed, 1 x 8 prompts, total 512, a warm cache) that
train phase took 26.5 s of the 45.4-s first step, while the main thread had idled ~20 s before it.

How: with token-budget chunks every micro-batch is padded to one chunk count (``chunks.max_chunks``), so
the packed ``TrainExample`` the step receives has a shape known at start. A thread builds one from
synthetic sequences of the longest length, puts it on the mesh as Tunix does (``shard_input``) and runs
``lower(...).compile()`` of the same ``nnx.jit`` Tunix calls. jax.jit's ``lower().compile()`` fills the
caches its call uses (the traced jaxpr, the lowering, the executable), so the first real call runs the
program at once. The first train call waits for the thread (``wait``), so nothing is traced twice.

Only where the shape is a function of the config: chunks of a fixed count, and no block-sparse pair lists
(their length depends on the data). Elsewhere nothing happens. A failure is a warning: the first step then
compiles as it always did.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import jax.numpy as jnp
import numpy as np
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.common import TrainExample
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
    """Whether every micro-batch of ``sequences`` sequences reaches the train step in one shape."""
    if not learner.chunk_rows or learner.attention == "blocked":
        return False
    return max_chunks(sequences, learner.longest, learner.row_len, learner.chunk_rows) > 1


class Prewarm:
    """The thread that compiles the train step; ``wait`` before the first train call."""

    def __init__(self, learner: Any) -> None:
        self.seconds: float | None = None  # how long the compile (or cache read) took, once done
        self._thread: threading.Thread | None = None
        sequences = micro_batch_sequences(learner)
        if not ENABLED or sequences is None or not fixed_shape(learner, sequences):
            log.info("prewarm: off (the train step's shape depends on the data); step 1 compiles it")
            return
        cluster, trainer = learner.rl_cluster, learner.rl_cluster.actor_trainer
        try:
            jitted, packed = _step_and_input(learner, sequences)
        except Exception as exc:  # never fail the run: step 1 compiles the step as it always did
            log.warning("prewarm: off, the synthetic micro-batch failed (%s); step 1 compiles the step", exc)
            return
        chunks, rows, row_len = packed.tokens.shape
        log.info(
            "prewarm: compiling the train step beside the first rollout, for every micro-batch's one shape: "
            "%d sequences in %d chunks of %d rows of %d tokens",
            sequences,
            chunks,
            rows,
            row_len,
        )

        def compile_step() -> None:
            started = time.perf_counter()
            try:
                with cluster._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):
                    jitted.lower(trainer.model, trainer.optimizer, packed).compile()
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


def _step_and_input(learner: Any, sequences: int) -> tuple[Any, Any]:
    """The ``nnx.jit`` Tunix's train calls, and a packed micro-batch of ``sequences`` sequences on the mesh."""
    cluster, trainer = learner.rl_cluster, learner.rl_cluster.actor_trainer
    with cluster._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):  # as Tunix's update_actor
        step, _ = trainer.jit_train_and_eval_step(False, True)  # Tunix's train: cache_nnx_graph
        example = synthetic_micro_batch(learner, sequences)
        layout = learner._plan(*_sequence_arrays(example), shapes=_scratch(learner.row_multiple))
        packed, _ = learner.pack(example, layout)
        packed = sharding_utils.shard_input(packed, trainer.config.data_sharding_axis)
    return getattr(step.func, "__wrapped__", step.func), packed  # nnx.cached_partial wraps the nnx.jit


def _sequence_arrays(example: TrainExample) -> tuple[np.ndarray, ...]:
    return tuple(
        np.asarray(a)
        for a in (example.prompt_ids, example.prompt_mask, example.completion_ids, example.completion_mask)
    )


def _scratch(row_multiple: int) -> ShapeCache:
    """A throwaway shape cache: the synthetic plan must not add a bucket the run's micro-batches reuse."""
    return ShapeCache(multiple_of=row_multiple)
