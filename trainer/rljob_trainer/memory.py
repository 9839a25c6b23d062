"""Memory levers on Tunix's RL cluster that change no number (measured in ``bench/memory.py``).

* ``drop_anchor_copy``: Tunix 0.1.7's ``RLCluster`` keeps ``_anchor_policy_state``, a full copy of the
  actor's state on ``pinned_host`` memory, made at start and after every weight sync. Only the agentic
  learner reads it (``get_actor_per_token_logps``); GRPO's old log-probs come from the rollout model or,
  with one iteration, are the current ones under ``stop_gradient``. On a CPU host (and on a TPU host's
  RAM) the copy is one more policy: 4 bytes per parameter in float32.
* ``donate_model_in_train_step``: Tunix jits the train step with only the optimizer donated, so the
  update writes new parameters beside the old ones (one more policy at the step's peak). Donating the
  model too lets XLA update them in place. Safe here because nothing keeps the old arrays: the vanilla
  rollout reads the actor's own variables, and the anchor copy is gone.

Imports JAX, Flax and Tunix: only from ``tunix_bridge``.
"""

from __future__ import annotations

import functools
from typing import Any

from flax import nnx
from jax.interpreters import pxla


def drop_anchor_copy(cluster: Any) -> None:
    """Free the anchor copy now and after every weight sync (GRPO never reads it)."""
    cluster._anchor_policy_state = None
    sync = cluster.sync_weights

    @functools.wraps(sync)
    def sync_weights(*args: Any, **kwargs: Any) -> Any:
        out = sync(*args, **kwargs)
        cluster._anchor_policy_state = None
        return out

    cluster.sync_weights = sync_weights


def donate_model_in_train_step(trainer: Any) -> None:
    """Make ``trainer`` (a Tunix ``PeftTrainer``) jit its train step with model AND optimizer donated.

    Mirrors ``PeftTrainer.jit_train_and_eval_step`` of Tunix 0.1.7 except for ``donate_argnames``.
    """
    original = trainer.jit_train_and_eval_step

    def jit_train_and_eval_step(skip_jit: bool = False, cache_nnx_graph: bool = False) -> tuple[Any, Any]:
        if skip_jit:
            return original(skip_jit, cache_nnx_graph)
        if trainer._jitted_train_step_fn is None:
            trainer._shard_optimizer(pxla.thread_resources.env.physical_mesh)
            train = nnx.jit(trainer.create_train_step_fn(), donate_argnames=("model", "optimizer"))
            evaluate = nnx.jit(trainer.create_eval_step_fn())
            if cache_nnx_graph:
                bind: Any = lambda f, *a: functools.partial(nnx.cached_partial(f, *a))  # noqa: E731
            else:
                bind = functools.partial
            trainer._jitted_train_step_fn = bind(train, trainer.model, trainer.optimizer)
            trainer._jitted_eval_step_fn = bind(evaluate, trainer.model)
        return trainer._jitted_train_step_fn, trainer._jitted_eval_step_fn

    trainer.jit_train_and_eval_step = jit_train_and_eval_step
