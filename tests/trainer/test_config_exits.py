"""Bad configs exit 2 (non-retryable) with the field named on stderr; crashes exit 1 (retryable).

Run as real subprocesses (``python -m rljob_trainer``), because the exit code is the contract with the
JobSet failure policy. Config checks run before JAX is imported, so each case takes about a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trainer.manifests import tiny_rljob

ROOT = Path(__file__).resolve().parents[2]


def manifest(**spec_changes: Any) -> dict[str, Any]:
    """A two-step tiny RLJob with dotted spec paths replaced, e.g. manifest(**{"model.size": "9b"})."""
    return tiny_rljob(**{"grpo.maxSteps": 2, **spec_changes})


BASE = manifest()


def run_trainer(tmp_path: Path, doc: dict[str, Any] | str, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "rljob.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{ROOT}:{ROOT / 'trainer'}"}
    return subprocess.run(
        [sys.executable, "-m", "rljob_trainer", "--config", str(path), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )


def weights_dir(tmp_path: Path, with_weights: bool) -> str:
    d = tmp_path / "ckpt"
    d.mkdir()
    if with_weights:
        (d / "model.safetensors").write_bytes(b"")
    return str(d)


BAD = {
    "unknown family": ({"model.family": "gpt9"}, "spec.model.family"),
    "unknown size": ({"model.size": "9b"}, "spec.model.size: unknown size '9b'"),
    "missing checkpoint": ({"model.size": "8b"}, "spec.model.checkpointPath: required"),
    "checkpoint not a dir": (
        {"model.size": "8b", "model.checkpointPath": "/nonexistent/q"},
        "spec.model.checkpointPath: /nonexistent/q does not exist",
    ),
    "tiny with missing checkpoint": (
        {"model.checkpointPath": "/x"},
        "spec.model.checkpointPath: /x does not",
    ),
    "missing tokenizer": ({"model.tokenizerPath": "/x"}, "spec.model.tokenizerPath: /x does not exist"),
    "real size without data": (
        {"model.size": "0.6b", "model.checkpointPath": "hf://Qwen/Qwen3-0.6B"},
        "spec.data: required for size 0.6b",
    ),
    "row too short": ({"packing.maxSeqTokenPerTpu": 32}, "spec.packing.maxSeqTokenPerTpu"),
    "row not a multiple of 128": (
        {"packing.maxSeqTokenPerTpu": 320},
        "spec.packing.maxSeqTokenPerTpu: must be a multiple of 128",
    ),
    "prompt window too short": ({"maxPrefillPredictLength": 4}, "spec.maxPrefillPredictLength"),
    "vllm with tiny": ({"rollout.engine": "vllm"}, "spec.rollout.engine: vllm needs a real model size"),
    "block size without vllm": ({"rollout.vllmBlockSize": 16}, "spec.rollout.vllmBlockSize"),
    "bad mini batch": ({"grpo.batchSize": 8, "grpo.miniBatchSize": 3}, "spec.grpo.miniBatchSize"),
    # This venv is the Tunix image's (Python 3.11, no MaxText): docs/maxtext.md
    "maxtext in the tunix image": (
        {"model.backend": "maxtext", "model.maxtext": {"modelName": "qwen3-0.6b"}},
        "spec.model.backend: maxtext needs the MaxText trainer image",
    ),
    "maxtext full without checkpoint": (
        {"model.backend": "maxtext", "model.size": "full", "model.maxtext": {"modelName": "qwen3-8b"}},
        "spec.model.checkpointPath: required for backend maxtext size full",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_exits_2_naming_the_field(tmp_path: Path, case: str) -> None:
    changes, expected = BAD[case]
    proc = run_trainer(tmp_path, manifest(**changes))
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_checkpoint_dir_without_weights_exits_2(tmp_path: Path) -> None:
    proc = run_trainer(
        tmp_path, manifest(**{"model.size": "0.6b", "model.checkpointPath": weights_dir(tmp_path, False)})
    )
    assert proc.returncode == 2
    assert "spec.model.checkpointPath: no *.safetensors files" in proc.stderr


def test_every_problem_is_listed(tmp_path: Path) -> None:
    proc = run_trainer(
        tmp_path, manifest(**{"model.size": "8b", "maxPrefillPredictLength": 4, "model.tokenizerPath": "/t"})
    )
    assert proc.returncode == 2
    assert "spec.model.checkpointPath" in proc.stderr


def test_override_is_validated_like_the_manifest(tmp_path: Path) -> None:
    proc = run_trainer(tmp_path, manifest(), "--max-steps", "0")
    assert proc.returncode == 2
    assert "spec.grpo.maxSteps" in proc.stderr


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("kind: [unclosed", "is not valid YAML"),
        (yaml.safe_dump(BASE) + "kind: RLJob\n", 'key "kind" already set'),
        (yaml.safe_dump({**BASE, "apiVersion": "v1"}), "apiVersion"),
        (yaml.safe_dump({**BASE, "spec": {**BASE["spec"], "modle": {}}}), "spec.modle"),
    ],
)
def test_invalid_rljob_exits_2(tmp_path: Path, doc: str, expected: str) -> None:
    proc = run_trainer(tmp_path, doc)
    assert proc.returncode == 2
    assert expected in proc.stderr


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'trainer'}"}
    proc = subprocess.run(
        [sys.executable, "-m", "rljob_trainer", "--config", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert f"{tmp_path / 'none.yaml'} cannot be read" in proc.stderr


def test_crash_exits_1(tmp_path: Path) -> None:
    """A failure that is not the config's fault is retryable: exit 1 with the traceback."""
    path = tmp_path / "rljob.yaml"
    path.write_text(yaml.safe_dump(manifest()))
    code = (
        "import sys, rljob_trainer.run.main as m\n"
        "def boom(*a, **k):\n    raise RuntimeError('host lost')\n"
        f"m.train = boom\nsys.exit(m.main(['--config', {str(path)!r}]))\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{ROOT}:{ROOT / 'trainer'}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "RuntimeError: host lost" in proc.stderr
