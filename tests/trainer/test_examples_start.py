"""Every example in examples/ can start: rendered by the operator, read back from the ConfigMap the trainer
pod mounts, and put through the trainer's start-up checks (the same ones ``python -m rljob_trainer`` runs
before JAX). Local sources (the tiny example's tokenizer and dataset) are fully loaded; hf:// and gs://
sources are checked for form only (no network here). An example that validates but cannot start fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from rljob_operator import names
from rljob_operator.render import render_objects
from rljob_trainer.run import main as trainer_main
from rljob_trainer.run import startup

from rljob.api import load_rljob, parse_rljob
from tests.observability import runs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
EXAMPLE_DEMO = ROOT / "examples" / "tiny-cpu.yaml"
IMAGE_ONLY = (
    "spec.rollout.engine: vllm is not installed",
    "spec.model.backend: maxtext needs the MaxText trainer image",
)
"""The start-up errors that are about this test's Python environment, not the example: the v5e example
names the vLLM image (WITH_VLLM=1) and the maxtext example the MaxText image; this venv has neither. The
maxtext example is checked without exceptions (and trained) in the MaxText environment:
tests/maxtext_backend/test_train_maxtext.py."""


def mounted_config(path: Path) -> dict:
    """The rljob.yaml the operator puts in the trainer pod's ConfigMap for this example."""
    job = load_rljob(str(path))
    objects = render_objects(job)
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return yaml.safe_load(cm["data"][names.CONFIG_KEY])


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"tiny-cpu.yaml", "rljob-v5e.yaml", "rljob-v6e-multislice.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_passes_start_up_checks(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the image's working directory holds examples/ like the repository root
    job = parse_rljob(mounted_config(path), f"{path.name} (as mounted)")
    errors = [e for e in trainer_main.preflight(job) if not e.startswith(IMAGE_ONLY)]
    errors += startup.check(job, fetch_remote=False)
    assert errors == [], f"{path.name} validates but could not start:\n" + "\n".join(errors)


def test_real_examples_name_a_checkpoint_data_and_rewards() -> None:
    """The TPU examples train a real model on real data (not the tiny demo's defaults)."""
    for path in EXAMPLES:
        spec = load_rljob(str(path)).spec
        if spec.model.size != "tiny":
            assert spec.model.checkpointPath and spec.data and spec.rewards, path.name


def test_an_example_that_cannot_start_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: the tiny example with its dataset moved away, or a v5e example without
    a checkpoint, is reported with the field named."""
    monkeypatch.chdir(ROOT)
    doc = mounted_config(ROOT / "examples" / "tiny-cpu.yaml")
    doc["spec"]["data"]["source"] = str(tmp_path / "missing.jsonl")
    assert startup.check(parse_rljob(doc)) == [
        f"spec.data.source: {tmp_path / 'missing.jsonl'} does not exist (relative paths are relative to {ROOT})"
    ]
    doc = mounted_config(ROOT / "examples" / "rljob-v5e.yaml")
    del doc["spec"]["model"]["checkpointPath"]
    assert any(
        e.startswith("spec.model.checkpointPath: required") for e in trainer_main.preflight(parse_rljob(doc))
    )


STEP_LINE = re.compile(r"^step\s+(\d+)/\d+.*?reward (-?[0-9.]+)", re.MULTILINE)


@pytest.mark.slow
def test_demo_example_trains_offline_from_the_repository_files() -> None:
    """``make demo``: examples/tiny-cpu.yaml trains through the data and reward path from examples/tiny/
    (tokenizer.json, emit.jsonl) with the Hub off, and its reward rises."""
    rc, out = runs.run(
        EXAMPLE_DEMO, "--metrics-port", "0", "--log-every", "1", timeout=600, HF_HUB_OFFLINE="1"
    )
    assert rc == 0, out
    rewards = [float(r) for _, r in STEP_LINE.findall(out)]
    steps = load_rljob(str(EXAMPLE_DEMO)).spec.grpo.maxSteps
    assert len(rewards) == steps, out
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.3, rewards
