"""Bad workloads exit 2 naming the field, before JAX: rewards that do not import, dataset columns that are not
there, an empty dataset, a tokenizer larger than the model's vocabulary. A download failure exits 1.

Real subprocesses (``python -m rljob_trainer``), real files: JSONL written here, a tokenizer.json built with
the ``tokenizers`` library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.gcs import GcsServer
from tests.trainer.test_config_exits import ROOT, manifest, run_trainer

TINY = ROOT / "examples" / "tiny"


def workload(tmp_path: Path, rows: list[dict] | None = None, **changes: object) -> dict:
    """The tiny manifest with a JSONL dataset of ``rows`` and the answerCharFraction reward."""
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (rows if rows is not None else [{"prompt": "emit a:", "answer": "a"}])
        )
    )
    base = {
        "model.tokenizerPath": str(TINY / "tokenizer.json"),
        "data": {"source": str(data)},
        "rewards": [{"name": "answerCharFraction"}],
    }
    return manifest(**{**base, **changes})


def big_tokenizer(tmp_path: Path) -> Path:
    """A real tokenizer.json with 300 tokens: more than the tiny model's 256."""
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(300)}
    out = tmp_path / "big"
    out.mkdir()
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return out


CASES = {
    "custom reward does not import": (
        {"rewards": [{"function": "no_such_module_xyz:score"}]},
        None,
        "spec.rewards[0].function: cannot import no_such_module_xyz",
    ),
    "custom reward not in module": (
        {"rewards": [{"function": "json:no_such_function"}]},
        None,
        "spec.rewards[0].function: json has no function no_such_function",
    ),
    "custom reward wrong signature": (
        {"rewards": [{"function": "json:dumps"}]},
        None,
        "spec.rewards[0].function: json:dumps requires obj, which Tunix does not pass",
    ),
    "prompt field missing": (
        {},
        [{"question": "q", "answer": "a"}],
        "spec.data.promptField: no column 'prompt'",
    ),
    "answer field missing": (
        {},
        [{"prompt": "q", "target": "a"}],
        "spec.data.answerField: no column 'answer'",
    ),
    "empty dataset": ({}, [], "spec.data.source: the dataset has no examples"),
    "chat template wanted, tokenizer has none": (
        {"model.tokenizerPath": None},
        None,
        "spec.data.chatTemplate: the tokenizer has no chat template",
    ),
    "prompt longer than the window": (
        {"maxPrefillPredictLength": 8},
        [{"prompt": "emit a, please:", "answer": "a"}],
        "spec.maxPrefillPredictLength: 8 cannot hold the longest prompt",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_workload_exits_2_naming_the_field(tmp_path: Path, case: str) -> None:
    changes, rows, expected = CASES[case]
    doc = workload(tmp_path, rows, **{k: v for k, v in changes.items() if v is not None})
    if case.startswith("chat template"):
        doc["spec"]["model"].pop("tokenizerPath")
        doc["spec"]["data"]["chatTemplate"] = True
    proc = run_trainer(tmp_path, doc)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_tokenizer_larger_than_the_model_exits_2(tmp_path: Path) -> None:
    path = big_tokenizer(tmp_path)
    proc = run_trainer(tmp_path, workload(tmp_path, **{"model.tokenizerPath": str(path)}))
    assert proc.returncode == 2, proc.stderr
    assert (
        f"spec.model.tokenizerPath: the tokenizer in {path} has 300 tokens, more than the model's vocabulary "
        "(256)" in proc.stderr
    )


def test_unreachable_hub_exits_1_naming_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub that cannot be reached (a closed local port as its endpoint) is retryable, not a config error."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    doc = workload(tmp_path, **{"model.tokenizerPath": "hf://acme/tiny-tokenizer"})
    proc = run_trainer(tmp_path, doc)
    assert proc.returncode == 1, proc.stderr
    assert "spec.model.tokenizerPath: cannot download hf://acme/tiny-tokenizer" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_offline_hub_without_cache_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    proc = run_trainer(tmp_path, workload(tmp_path, **{"model.tokenizerPath": "hf://acme/tiny-tokenizer"}))
    assert proc.returncode == 2, proc.stderr
    assert (
        "spec.model.tokenizerPath: hf://acme/tiny-tokenizer: not in the Hub cache and HF_HUB_OFFLINE"
        in proc.stderr
    )


def test_unknown_reward_name_exits_2(tmp_path: Path) -> None:
    proc = run_trainer(tmp_path, workload(tmp_path, rewards=[{"name": "noSuchReward"}]))
    assert proc.returncode == 2, proc.stderr
    assert "spec.rewards[0].name: Input should be 'mathAnswer'" in proc.stderr, (
        proc.stderr
    )  # refused by the API
    assert "Traceback" not in proc.stderr


def tiny_checkpoint(tmp_path: Path, family: str = "qwen3", **config: int) -> Path:
    """A real tiny HF-format checkpoint of ``family``; ``config`` changes the Tunix config it is written from
    (so the tensors, and config.json, have other shapes than the trainer's tiny model)."""
    import dataclasses
    import importlib

    from flax import nnx
    from rljob_trainer.models import families as trainer_models

    from rljob.api.spec import ModelSpec
    from tests.trainer import hf_checkpoint

    if not config:
        model = hf_checkpoint.tiny_model(family)
    else:
        info = trainer_models.FAMILIES[family]
        base = trainer_models.model_config(ModelSpec(family=family, size="tiny"))
        model_cls = getattr(importlib.import_module(info.module), info.model_class)
        model = model_cls(dataclasses.replace(base, **config), rngs=nnx.Rngs(params=0))
    return hf_checkpoint.write_checkpoint(family, model, tmp_path / f"ckpt-{family}")


@pytest.mark.parametrize(
    ("family", "config", "expected"),
    [
        ("llama3", {}, "config.json says model_type 'llama', but spec.model.family is qwen3"),
        ("qwen3", {"num_layers": 3}, "config.json: num_hidden_layers is 3, but spec.model.size has 2"),
        ("qwen3", {"num_kv_heads": 4}, "config.json: num_key_value_heads is 4, but spec.model.size has 2"),
    ],
    ids=["other family", "other size", "tensor shapes"],
)
def test_checkpoint_not_matching_family_or_size_exits_2(
    tmp_path: Path, family: str, config: dict, expected: str
) -> None:
    """Found from config.json before JAX is imported (test_checkpoint_refusals.py times it), the file named."""
    path = tiny_checkpoint(tmp_path, family, **config)
    proc = run_trainer(
        tmp_path,
        workload(tmp_path, **{"model.checkpointPath": str(path)}),
        "--max-steps",
        "1",
        "--metrics-port",
        "0",
    )
    assert proc.returncode == 2, proc.stderr
    assert f"spec.model.checkpointPath: {path}/{expected}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_bucket_unreachable_while_downloading_exits_1_naming_the_source(
    tmp_path: Path,
    gcs: GcsServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real GCS-compatible server holds the checkpoint, then goes away: the download is retryable (1)."""
    uri = gcs.upload_dir(tiny_checkpoint(tmp_path), "models", "tiny-qwen3")
    gcs.stop()
    monkeypatch.setenv("RLJOB_SOURCE_RETRY_SECONDS", "3")
    proc = run_trainer(tmp_path, workload(tmp_path, **{"model.checkpointPath": uri}))
    assert proc.returncode == 1, proc.stderr
    assert f"source unavailable (retryable): spec.model.checkpointPath: cannot download {uri}" in proc.stderr
    assert "Traceback" not in proc.stderr
