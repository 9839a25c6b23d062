"""Memory levers (``rljob_trainer.memory``): they free memory and change no number.

A real GRPO run (tiny qwen3, vanilla rollout, packed and unpacked) ends with the same parameters and
rewards with the levers as with Tunix's defaults, while the anchor policy copy is gone and the actor's
pre-update arrays were donated (deleted) by the train step.
"""

from __future__ import annotations

import copy
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer import memory, tunix_bridge
from rljob_trainer.run import main as trainer_main

from rljob.api import parse_rljob
from tests import procs
from tests.trainer.manifests import tiny_rljob

BASE = tiny_rljob(
    maxTargetLength=48,
    rollout={"engine": "vanilla", "temperature": 1.0},
    grpo={"numGenerations": 4, "batchSize": 4, "beta": 0.04, "learningRate": 0.01, "maxSteps": 3, "seed": 3},
)


def _run(monkeypatch: pytest.MonkeyPatch, packing: int, levers: bool) -> tuple[Any, list[Any], Any]:
    """(final actor params, per-step rewards, the first actor parameter array seen after build)."""
    if not levers:  # Tunix's defaults: anchor copy kept, only the optimizer donated
        monkeypatch.setattr(memory, "drop_anchor_copy", lambda cluster: None)
        monkeypatch.setattr(memory, "donate_model_in_train_step", lambda trainer: None)
    first: list[Any] = []
    build = tunix_bridge.build

    def spy(*args: Any, **kwargs: Any) -> Any:
        run = build(*args, **kwargs)
        first.append(jax.tree.leaves(nnx.state(run.cluster.actor_trainer.model, nnx.Param))[0])
        return run

    monkeypatch.setattr(tunix_bridge, "build", spy)
    doc = copy.deepcopy(BASE)
    doc["spec"]["packing"] = {"maxSeqTokenPerTpu": packing}
    doc["spec"]["metrics"] = {"port": procs.free_port()}
    run = trainer_main.train(parse_rljob(doc))
    monkeypatch.undo()
    params = [np.asarray(x) for x in jax.tree.leaves(nnx.state(run.cluster.actor_trainer.model, nnx.Param))]
    rewards = [r.rewards for r in run.recorder.reports]
    anchor = run.cluster._anchor_policy_state
    return params, rewards, (first[0], anchor)


@pytest.mark.slow
@pytest.mark.parametrize("packing", [0, 128])
def test_anchor_and_donation_change_no_number(monkeypatch, packing):
    params, rewards, (first, anchor) = _run(monkeypatch, packing, levers=True)
    want_params, want_rewards, (want_first, want_anchor) = _run(monkeypatch, packing, levers=False)
    assert len(rewards) == len(want_rewards) == 3
    for got, want in zip(rewards, want_rewards, strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(params, want_params, strict=True):
        np.testing.assert_array_equal(got, want)
    assert anchor is None and want_anchor is not None  # the policy copy Tunix keeps, gone
    assert first.is_deleted() and not want_first.is_deleted()  # donated to the train step's update
