"""Checkpoints written by ``transformers`` load into Tunix with ``transformers``' own fp32 logits.

The fixtures (tests/trainer/fixtures/checkpoints, written by hack/gen_reference_checkpoints.py with
PyTorch, which is not a test dependency) differ from Tunix's built-in configs in the keys that used to be
dropped: rope theta 1e4 and 1e6 (qwen3 hard-codes 1e6), Llama 3.2's theta 5e5 with ``llama3`` scaling,
an untied output head, norm epsilon 1e-5, a gemma3 sliding window of 8, and gemma3 layers alternating
sliding and global (Tunix's own pattern is 5 sliding, then 1 global) with linear rope scaling 8. Each is loaded the way the
trainer does (``startup.prepare``: checks, tokenizer, data; then ``models.build_model``: Tunix's
safetensors loader) and its logits must equal the reference within 1e-5 of the largest logit, with the
same argmax everywhere. The gemma3 checkpoint with an untied head cannot be honoured by Tunix's gemma3:
it is refused (tests/trainer/test_checkpoint_refusals.py runs the trainer on it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rljob.api import parse_rljob
from tests.trainer import hf_checkpoint
from tests.trainer.manifests import tiny_rljob

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"
LOADABLE = [
    "qwen3-tied",
    "qwen3-untied",
    "qwen2-tied",
    "qwen2-untied",
    "llama3-tied",
    "llama3-untied",
    "gemma3-tied",
    "gemma3-global",
]
DATA = hf_checkpoint.ROOT / "examples" / "tiny" / "emit.jsonl"


def reference_job(name: str) -> object:
    return parse_rljob(
        tiny_rljob(
            **{
                "model.family": name.split("-")[0],
                "model.checkpointPath": str(FIXTURES / name),
                "data": {"source": str(DATA)},
                "rewards": [{"name": "answerCharFraction"}],
            }
        )
    )


@pytest.mark.parametrize("name", LOADABLE)
def test_transformers_checkpoint_loads_with_its_own_logits(name: str) -> None:
    from rljob_trainer import tunix_bridge
    from rljob_trainer.models import families as models
    from rljob_trainer.run import startup

    job = reference_job(name)
    workload = startup.prepare(job)  # type: ignore[arg-type]
    model = models.build_model(job.spec.model, tunix_bridge.make_mesh(), 0, workload.checkpoint_dir)  # type: ignore[attr-defined]
    ref = np.load(FIXTURES / name / "reference.npz")
    got = hf_checkpoint.logits(model, ref["tokens"])
    scale = float(np.abs(ref["logits"]).max())
    err = float(np.abs(got - ref["logits"]).max())
    assert err <= 1e-5 * scale, f"{name}: max |logit diff| {err:.3g}, {err / scale:.3g} of the largest logit"
    assert (got.argmax(-1) == ref["logits"].argmax(-1)).all()


def test_fixtures_differ_from_tunix_defaults_where_it_matters() -> None:
    """The fixtures exercise what used to be dropped (else the test above could not fail)."""
    import json

    cfg = {n: json.loads((FIXTURES / n / "config.json").read_text()) for n in LOADABLE}
    assert cfg["qwen3-untied"]["tie_word_embeddings"] is False
    assert cfg["qwen3-untied"]["rope_parameters"]["rope_theta"] == 10_000
    assert cfg["qwen2-untied"]["tie_word_embeddings"] is False
    assert cfg["llama3-tied"]["rope_parameters"]["rope_type"] == "llama3"
    assert cfg["gemma3-tied"]["sliding_window"] == 8
    seq = np.load(FIXTURES / "gemma3-tied" / "reference.npz")["tokens"].shape[1]
    assert seq > 2 * cfg["gemma3-tied"]["sliding_window"]
