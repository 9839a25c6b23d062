"""Bad workloads exit 2 naming the field, before JAX: rewards that do not import, dataset columns that are not
there, an empty dataset, a tokenizer larger than the model's vocabulary. A download failure exits 1.

Real subprocesses (``python -m rljob_trainer``), real files: JSONL written here, a tokenizer.json built with
the ``tokenizers`` library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
        "spec.rewards[0].function: json:dumps must accept prompts=",
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
    "empty dataset": ({}, [], "spec.data.source"),
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
    proc = run_trainer(tmp_path, workload(tmp_path, **{"model.tokenizerPath": str(big_tokenizer(tmp_path))}))
    assert proc.returncode == 2, proc.stderr
    assert (
        "spec.model.tokenizerPath: the tokenizer has 300 tokens, more than the model's vocabulary (256)"
        in proc.stderr
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
