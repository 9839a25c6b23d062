"""A tiny Hugging Face-format checkpoint loads through every source kind with the model's exact logits.

For each family the trainer supports (qwen3, qwen2, llama3, gemma3): the tiny model (perturbed so every
tensor matters) is written as config.json + model.safetensors + tokenizer files, then put through the
trainer's real start-up (``startup.prepare``: source fetch, checkpoint checks, tokenizer, data) and
Tunix's safetensors loader (``models.build_model``), from

* a local directory;
* ``hf://acme/tiny-<family>``: a Hugging Face Hub cache laid out as ``huggingface_hub`` writes it, with
  ``HF_HUB_OFFLINE=1``, so ``snapshot_download``'s own offline resolution finds it;
* ``gs://``: objects on a real GCS-compatible server (fake-gcs-server), downloaded by google-cloud-storage;
  the dataset and the tokenizer come from the bucket too.

The logits of the loaded model must equal the in-memory model's within 1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rljob.api import parse_rljob
from tests.trainer import hf_checkpoint
from tests.trainer.gcs import GcsServer

FAMILIES = sorted(hf_checkpoint.HF_MODEL_TYPE)
TOKENS = (np.arange(2 * 12).reshape(2, 12) * 7) % 256
DATA = hf_checkpoint.ROOT / "examples" / "tiny" / "emit.jsonl"


@pytest.fixture(scope="module", params=FAMILIES)
def saved(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, np.ndarray]:
    """(family, checkpoint directory, logits of the in-memory model)."""
    family = request.param
    model = hf_checkpoint.tiny_model(family, seed=3)
    out = hf_checkpoint.write_checkpoint(family, model, tmp_path_factory.mktemp(family) / "ckpt")
    return family, out, hf_checkpoint.logits(model, TOKENS)


def job(family: str, checkpoint: str, data: str = str(DATA), **model: str) -> object:
    return parse_rljob(
        {
            "apiVersion": "rljob.dev/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "ckpt"},
            "spec": {
                "image": "rljob-trainer:dev",
                "model": {"family": family, "size": "tiny", "checkpointPath": checkpoint, **model},
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
                "data": {"source": data},
                "rewards": [{"name": "answerCharFraction"}],
                "maxPrefillPredictLength": 16,
                "maxTargetLength": 64,
            },
        }
    )


def load_logits(rljob: object) -> tuple[np.ndarray, object]:
    """Start-up as the trainer does it, then Tunix's loader; returns (logits, workload)."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.models import families as models
    from rljob_trainer.run import startup

    workload = startup.prepare(rljob)  # type: ignore[arg-type]
    assert workload.checkpoint_dir is not None
    model = models.build_model(rljob.spec.model, tunix_bridge.make_mesh(), 0, workload.checkpoint_dir)  # type: ignore[attr-defined]
    return hf_checkpoint.logits(model, TOKENS), workload


def test_checkpoint_is_in_the_hub_format(saved: tuple[str, Path, np.ndarray]) -> None:
    """What Tunix reads is what the Hub publishes: HF tensor names and [out, in] shapes."""
    from safetensors import safe_open

    _, path, _ = saved
    config = json.loads((path / "config.json").read_text())
    with safe_open(str(path / "model.safetensors"), framework="numpy") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    heads, head_dim, width = config["num_attention_heads"], config["head_dim"], config["hidden_size"]
    assert shapes["model.embed_tokens.weight"] == (config["vocab_size"], width)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (heads * head_dim, width)
    assert shapes["model.layers.1.self_attn.o_proj.weight"] == (width, heads * head_dim)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (width, config["intermediate_size"])
    assert len([k for k in shapes if k.startswith("model.layers.")]) >= 2 * 9


def test_local_checkpoint_has_the_same_logits(saved: tuple[str, Path, np.ndarray]) -> None:
    family, path, expected = saved
    got, _ = load_logits(job(family, str(path)))
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_hub_checkpoint_from_the_offline_cache_has_the_same_logits(
    saved: tuple[str, Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants as hf_constants

    family, path, expected = saved
    cache = tmp_path / "hub"
    commit = hf_checkpoint.hub_cache(path, cache, f"acme/tiny-{family}")
    # huggingface_hub reads these once at import (already done in this process): set both.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    got, workload = load_logits(job(family, f"hf://acme/tiny-{family}"))
    assert workload.checkpoint_dir == cache / f"models--acme--tiny-{family}" / "snapshots" / commit  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_bucket_checkpoint_tokenizer_and_data_have_the_same_logits(
    saved: tuple[str, Path, np.ndarray],
    gcs: GcsServer,
    tmp_path: Path,
) -> None:
    family, path, expected = saved
    checkpoint = gcs.upload_dir(path, "models", f"tiny-{family}")
    data = gcs.upload_file(DATA, "datasets", "emit/train.jsonl")
    tokenizer = gcs.upload_dir(hf_checkpoint.ROOT / "examples" / "tiny", "tokenizers", "tiny")
    got, workload = load_logits(job(family, checkpoint, data, tokenizerPath=tokenizer))
    assert str(workload.checkpoint_dir).startswith(str(tmp_path / "rljob-cache"))  # type: ignore[attr-defined]
    assert len(workload.data) == len(DATA.read_text().splitlines())  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
