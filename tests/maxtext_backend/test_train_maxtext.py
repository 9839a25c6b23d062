"""examples/maxtext-tiny-cpu.yaml through the trainer (``main.train``), on CPU: a short packed GRPO run of a
tiny MaxText decoder whose reward rises, and the same example's start-up checks with MaxText installed.

The whole trainer path: spec.model.backend maxtext -> ``startup.prepare`` (tokenizer, dataset, reward) ->
``tunix_bridge.build_models`` (MaxText's adapter) -> the full-forward rollout, Tunix's RL cluster, the
packed learner with MaxText's segment attention.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rljob_trainer.models.maxtext import decoders as maxtext_models
from rljob_trainer.packing import PackedGRPOLearner
from rljob_trainer.run import main as trainer_main
from rljob_trainer.run import startup

from rljob.api import RLJobError, load_rljob, parse_rljob

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "maxtext-tiny-cpu.yaml"


def job(monkeypatch: pytest.MonkeyPatch, **maxtext: Any) -> Any:
    """The example, with a free /metrics port (every in-process run serves one) and ``maxtext`` merged."""
    monkeypatch.chdir(ROOT)  # the example's relative paths (examples/tiny/...)
    doc = load_rljob(str(EXAMPLE)).model_dump(mode="json", exclude_none=True)
    doc["spec"]["model"]["maxtext"].update(maxtext)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        doc["spec"]["metrics"] = {"port": s.getsockname()[1]}
    return parse_rljob(doc)


def test_example_passes_start_up_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Here MaxText is installed, so nothing is excused (the Tunix env's test_examples_start excuses it)."""
    spec = job(monkeypatch)
    assert trainer_main.preflight(spec) == []
    assert startup.check(spec) == []


def test_packed_run_reward_rises(monkeypatch: pytest.MonkeyPatch) -> None:
    run = trainer_main.train(job(monkeypatch))
    assert isinstance(run.learner, PackedGRPOLearner)
    assert run.learner.attention == "segments"
    assert maxtext_models.is_maxtext_model(run.cluster.actor_trainer.model)
    rewards = [r.reward_mean for r in run.recorder.reports]
    assert len(rewards) == 20
    assert run.learner.packing_stats.rows_used < run.learner.packing_stats.sequences  # really packed
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    assert last > first + 0.2, rewards


def test_unknown_override_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = job(monkeypatch, overrides={"remat_polcy": "full", "run_name": "x"})
    with pytest.raises(RLJobError) as err:
        trainer_main.train(bad)
    text = str(err.value)
    assert "spec.model.maxtext.overrides.remat_polcy: not a MaxText config key" in text
    assert "spec.model.maxtext.overrides.run_name: set by rljob" in text


@pytest.mark.parametrize(("size", "tunix_size"), [("tiny", "tiny"), ("full", "0.6b")])
def test_flops_shape_matches_tunix_qwen3(size: str, tunix_size: str) -> None:
    """The metrics' FLOPs per token read MaxText's config for this backend: MaxText's qwen3-0.6b (and its
    tiny shrink) has the same shape as Tunix's qwen3 of that size, so the two backends count alike."""
    from rljob_trainer.models import families as models
    from rljob_trainer.telemetry import flops

    from rljob.api.maxtext import MaxTextSpec
    from rljob.api.spec import ModelSpec

    mx = ModelSpec(backend="maxtext", size=size, maxtext=MaxTextSpec(modelName="qwen3-0.6b"))
    got = flops.shape_of(
        maxtext_models.flops_config(maxtext_models.maxtext_config(mx, max_target_length=64, seed=0))
    )
    want = flops.shape_of(models.model_config(ModelSpec(family="qwen3", size=tunix_size)))
    assert got == want
    assert got.num_layers == (2 if size == "tiny" else 28)


def test_override_value_maxtext_refuses_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RLJobError, match=r"spec\.model\.maxtext\.overrides: MaxText refuses the config"):
        trainer_main.train(job(monkeypatch, overrides={"dropout_rate": "not-a-number"}))
