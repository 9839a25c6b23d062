"""A short packed GRPO run of a tiny MaxText decoder through the trainer (``main.train``), on CPU.

The whole trainer path: spec.model.backend maxtext -> ``tunix_bridge.build_models`` (MaxText's adapter),
the full-forward rollout, Tunix's RL cluster, the packed learner with MaxText's segment attention.
"""

from __future__ import annotations

import copy
import socket
from typing import Any

import numpy as np
import pytest
from rljob_trainer import main as trainer_main
from rljob_trainer import maxtext_models
from rljob_trainer.packing import PackedGRPOLearner

from rljob.api import RLJobError, parse_rljob

BASE: dict[str, Any] = {
    "apiVersion": "rljob.dev/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "t"},
    "spec": {
        "image": "img",
        "model": {"backend": "maxtext", "size": "tiny", "maxtext": {"modelName": "qwen3-0.6b"}},
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
        "maxPrefillPredictLength": 16,
        "maxTargetLength": 48,
        "packing": {"maxSeqTokenPerTpu": 128},
        "rollout": {"engine": "vanilla", "temperature": 1.0},
        "grpo": {
            "numGenerations": 4,
            "batchSize": 8,
            "beta": 0.0,
            "learningRate": 0.01,
            "maxSteps": 20,
            "seed": 7,
        },
    },
}


def job(**model: Any) -> Any:
    doc = copy.deepcopy(BASE)
    doc["spec"]["model"].update(model)
    with socket.socket() as s:  # every in-process run serves /metrics: its own port
        s.bind(("127.0.0.1", 0))
        doc["spec"]["metrics"] = {"port": s.getsockname()[1]}
    return parse_rljob(doc)


def test_packed_run_reward_rises():
    run = trainer_main.train(job())
    assert isinstance(run.learner, PackedGRPOLearner)
    assert run.learner.attention == "segments"
    assert maxtext_models.is_maxtext_model(run.cluster.actor_trainer.model)
    rewards = [r.reward_mean for r in run.recorder.reports]
    assert len(rewards) == 20
    assert run.learner.packing_stats.rows_used < run.learner.packing_stats.sequences  # really packed
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    assert last > first + 0.2, rewards


def test_unknown_override_key_is_a_config_error():
    bad = job(maxtext={"modelName": "qwen3-0.6b", "overrides": {"remat_polcy": "full", "run_name": "x"}})
    with pytest.raises(RLJobError) as err:
        trainer_main.train(bad)
    text = str(err.value)
    assert "spec.model.maxtext.overrides.remat_polcy: not a MaxText config key" in text
    assert "spec.model.maxtext.overrides.run_name: set by rljob" in text
