"""A real workload trained and resumed through ``gs://`` on a GCS-compatible server (fake-gcs-server).

The trainer (``python -m rljob_trainer``, CPU) starts from a tiny Hugging Face-format qwen3 checkpoint in a
bucket (weights, config, tokenizer), a JSONL dataset of 13 rows (not a multiple of the batch, so the data
wraps around mid-batch; rows ask for "a" or "b", so a wrong data position changes the updates) and the
built-in ``answerCharFraction`` reward, and writes its Orbax checkpoints to ``gs://ckpt/<run>`` on the
same server (Orbax's own gs:// path: gcsfs + TensorStore's gcs kvstore).

* the reward rises over the run;
* a run stopped half-way (``--max-steps``) and restarted resumes from its gs:// checkpoint and ends with
  parameters IDENTICAL to the uninterrupted run's, at the same data position (examples consumed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import procs
from tests.observability import runs
from tests.trainer import hf_checkpoint
from tests.trainer.gcs import GcsServer

STEPS = 12
HALF = 6
BATCH = 8
ROWS = 13
STEP_LINE = re.compile(r"^step\s+(\d+)/\d+.*?reward (-?[0-9.]+)", re.MULTILINE)


def manifest(name: str, checkpoint: str, data: Path) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "img",
            "model": {"family": "qwen3", "size": "tiny", "checkpointPath": checkpoint},
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
            "data": {"source": str(data), "promptField": "prompt", "answerField": "answer"},
            "rewards": [{"name": "answerCharFraction"}],
            "maxPrefillPredictLength": 16,
            "maxTargetLength": 48,
            "grpo": {
                "numGenerations": 4,
                "batchSize": BATCH,
                "maxSteps": STEPS,
                "seed": 5,
                "learningRate": 0.01,
            },
            "checkpoint": {"directory": f"gs://ckpt/{name}", "interval": 4},
            "metrics": {"port": procs.free_port()},
        },
    }


def train(tmp: Path, doc: dict[str, Any], cache: Path, *args: str) -> str:
    config = runs.write(tmp / f"{doc['metadata']['name']}.yaml", doc)
    rc, out = runs.run(config, "--log-every", "1", *args, timeout=600, RLJOB_CACHE_DIR=str(cache))
    assert rc == 0, out
    return out


def restore(directory: str, step: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Parameters and metadata of ``step`` read back from the bucket with Orbax."""
    import jax
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(directory, item_names=("params", "meta"))
    restored = manager.restore(
        step, args=ocp.args.Composite(params=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
    )
    flat = jax.tree_util.tree_flatten_with_path(restored["params"])[0]
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}, dict(restored["meta"])


@pytest.mark.slow
def test_reward_rises_and_gs_resume_is_exact(
    gcs: GcsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = hf_checkpoint.tiny_model("qwen3", seed=1)
    checkpoint = gcs.upload_dir(
        hf_checkpoint.write_checkpoint("qwen3", model, tmp_path / "hf"), "models", "tiny-qwen3"
    )
    gcs.client().create_bucket("ckpt")
    data = tmp_path / "train.jsonl"
    letters = "abbaabababbab"  # the letter each row asks for: batches, so updates, depend on the position
    assert len(letters) == ROWS
    data.write_text("".join(json.dumps({"prompt": f"emit {c}:", "answer": c}) + "\n" for c in letters))
    cache = tmp_path / "cache"

    whole = train(tmp_path, manifest("whole", checkpoint, data), cache)
    rewards = [float(r) for _, r in STEP_LINE.findall(whole)]
    assert len(rewards) == STEPS, whole
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.05, f"reward did not rise: {rewards}"

    first = train(tmp_path, manifest("split", checkpoint, data), cache, "--max-steps", str(HALF))
    assert "resumed" not in first
    second = train(tmp_path, manifest("split", checkpoint, data), cache)
    assert f"resumed from step {HALF} (gs://ckpt/split), data position {HALF * BATCH}" in second
    assert [int(s) for s, _ in STEP_LINE.findall(second)] == list(range(HALF + 1, STEPS + 1))

    for name in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING"):  # as the trainer sets them
        monkeypatch.setenv(name, gcs.url if name.startswith("TENSOR") else "emulator")
    want, want_meta = restore("gs://ckpt/whole", STEPS)
    got, got_meta = restore("gs://ckpt/split", STEPS)
    assert want.keys() == got.keys() and want
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []
    position = {"examples": STEPS * BATCH, "dataset_size": ROWS, "batch_size": BATCH}
    assert want_meta["data_position"] == got_meta["data_position"] == position
