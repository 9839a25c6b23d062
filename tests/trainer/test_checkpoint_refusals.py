"""A checkpoint the trainer cannot load exactly is refused: exit 2 within about a second, naming the field,
the file and (for a config.json key) both values. Run as real trainer processes (``python -m
rljob_trainer``): the exit code is the contract with the JobSet, and "before JAX is imported" is timed.

Each case starts from a ``transformers``-written fixture (tests/trainer/fixtures/checkpoints) and breaks
one thing: the tokenizer files gone, an untied head Tunix's gemma3 cannot hold, ``lm_head.weight``
missing, the shapes of another size, one tensor of the wrong shape, a tokenizer larger than the model's
vocabulary, and config.json keys that a family cannot honour.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.manifests import tiny_rljob
from tests.trainer.test_config_exits import run_trainer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"
DATA = Path(__file__).resolve().parents[2] / "examples" / "tiny" / "emit.jsonl"
FAST_S = 15.0
"""Bound on the wall time of a refusal on this shared 2-core machine (about 1-3 s when idle; JAX's
import alone is longer than this bound allows with the rest of start-up)."""


def copy_fixture(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copytree(FIXTURES / name, out)
    return out


def edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None and key.startswith("-"):
            config.pop(key[1:], None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def rewrite_tensors(folder: Path, drop: str | None = None, reshape: str | None = None) -> None:
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    if drop:
        tensors.pop(drop)
    if reshape:
        tensors[reshape] = tensors[reshape][:, :-1].copy()
    save_file(tensors, str(path), metadata={"format": "pt"})


def refused(tmp_path: Path, folder: Path, **model: Any) -> tuple[str, float]:
    doc = tiny_rljob(
        **{
            "model.family": folder.name.split("-")[0],
            "model.checkpointPath": str(folder),
            "data": {"source": str(DATA)},
            "rewards": [{"name": "answerCharFraction"}],
            **{f"model.{k}": v for k, v in model.items()},
        }
    )
    started = time.perf_counter()
    proc = run_trainer(tmp_path, doc)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert elapsed < FAST_S, f"refused after {elapsed:.1f}s"
    return proc.stderr, elapsed


def test_folder_without_tokenizer_files_is_refused(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "qwen3-tied")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    err, _ = refused(tmp_path, folder)
    assert f"spec.model.checkpointPath: {folder} has no tokenizer files (tokenizer.json" in err


def test_folder_without_tokenizer_files_loads_with_a_tokenizer_path(tmp_path: Path) -> None:
    """The same folder is fine when spec.model.tokenizerPath names the tokenizer (checks only)."""
    from rljob_trainer.run import startup

    from rljob.api import parse_rljob

    folder = copy_fixture(tmp_path, "qwen3-tied")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    job = tiny_rljob(
        **{
            "model.checkpointPath": str(folder),
            "model.tokenizerPath": str(DATA.parent),
            "data": {"source": str(DATA)},
            "rewards": [{"name": "answerCharFraction"}],
        }
    )
    assert startup.check(parse_rljob(job)) == []


def test_untied_gemma3_is_refused_naming_the_key_and_both_values(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "gemma3-untied")
    err, _ = refused(tmp_path, folder)
    assert f"spec.model.checkpointPath: {folder}/config.json: tie_word_embeddings is False; " in err
    assert "supports only True" in err


def test_untied_config_without_its_head_is_refused(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "qwen2-untied")
    rewrite_tensors(folder, drop="lm_head.weight")
    err, _ = refused(tmp_path, folder)
    assert f"spec.model.checkpointPath: {folder}: tie_word_embeddings is false but there is no lm_head" in err


def test_checkpoint_of_another_size_is_refused_fast(tmp_path: Path) -> None:
    """The tiny DeepSeek-R1-Distill-like checkpoint (qwen2, rope 1e4, untied) named as size 1.5b."""
    folder = copy_fixture(tmp_path, "qwen2-untied")
    err, elapsed = refused(tmp_path, folder, size="1.5b")
    assert f"{folder}/config.json: num_hidden_layers is 2, but spec.model.size has 28" in err
    assert "hidden_size is 64, but spec.model.size has 1536" in err
    print(f"size mismatch refused in {elapsed:.2f}s")


def test_tensor_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "llama3-tied")
    rewrite_tensors(folder, reshape="model.layers.1.mlp.down_proj.weight")
    err, _ = refused(tmp_path, folder)
    assert (
        f"{folder}: tensor model.layers.1.mlp.down_proj.weight has shape [64, 127], config.json makes it [64, 128]"
        in err
    )


def test_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    folder = copy_fixture(tmp_path, "qwen3-tied")
    vocab = {f"t{i}": i for i in range(300)}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(folder / "tokenizer.json"))
    err, _ = refused(tmp_path, folder)
    # 300 from tokenizer.json, read as JSON before transformers loads it (the fixture's config adds 4)
    assert f"spec.model.checkpointPath: the tokenizer in {folder} has 300 tokens" in err
    assert f"tokens, more than the model's vocabulary (256 in {folder}/config.json)" in err
    assert err.startswith(f"{tmp_path / 'rljob.yaml'} cannot be trained:")


LLAMA3_ROPE = {  # the llama3 fixture's own rope_parameters
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 16,
    "rope_theta": 500000.0,
    "rope_type": "llama3",
}
KEYS = {
    "gemma3 norm epsilon": (
        "gemma3-tied",
        {"rms_norm_eps": 1e-5},
        "rms_norm_eps is 1e-05; this trainer supports only 1e-06",
    ),
    "gemma3 yarn": (
        "gemma3-global",
        {
            "rope_parameters": {
                "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            }
        },
        "rope scaling type 'yarn' is not supported for gemma3 (supported: none, 'linear')",
    ),
    "gemma3 query scalar": ("gemma3-tied", {"query_pre_attn_scalar": 64}, "query_pre_attn_scalar is 64; "),
    "gemma3 soft-capping": (
        "gemma3-tied",
        {"final_logit_softcapping": 30.0},
        "final_logit_softcapping is 30.0",
    ),
    "qwen2 sliding window": ("qwen2-tied", {"use_sliding_window": True}, "use_sliding_window is True"),
    "qwen3 yarn": (
        "qwen3-tied",
        {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}},
        "rope scaling type 'yarn' is not supported for qwen3",
    ),
    "llama3 bias": ("llama3-tied", {"attention_bias": True}, "attention_bias is True"),
    # transformers' Gemma3TextConfig: an embedding model's bidirectional attention loaded as a causal LM
    # gave logits 1.1x the largest off (issue 43)
    "gemma3 bidirectional": (
        "gemma3-tied",
        {"use_bidirectional_attention": True},
        "use_bidirectional_attention is True",
    ),
    "qwen3 dropout": ("qwen3-tied", {"attention_dropout": 0.1}, "attention_dropout is 0.1"),
    # transformers attends within the window on a sliding layer (and raises without a window)
    "qwen3 sliding layer": (
        "qwen3-tied",
        {"layer_types": ["full_attention", "sliding_attention"]},
        "layer_types is ['full_attention', 'sliding_attention']; this trainer supports only full_attention",
    ),
    # transformers' scaled ropes rotate only that fraction of the head; Tunix rotates all of it
    "llama3 partial rope": (
        "llama3-tied",
        {"rope_parameters": {**LLAMA3_ROPE, "partial_rotary_factor": 0.5}},
        "partial_rotary_factor is 0.5; this trainer supports only 1.0",
    ),
    "llama3 rope without its numbers": (
        "llama3-tied",
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}},
        "rope scaling 'llama3' needs a number low_freq_factor, got None",
    ),
}


@pytest.mark.parametrize("case", sorted(KEYS))
def test_key_the_family_cannot_honour_is_refused(tmp_path: Path, case: str) -> None:
    name, changes, expected = KEYS[case]
    folder = copy_fixture(tmp_path, name)
    edit_config(folder, **changes)
    err, _ = refused(tmp_path, folder)
    assert f"spec.model.checkpointPath: {folder}/config.json: " in err
    assert expected in err


def test_multimodal_gemma3_ties_the_head_by_its_outer_config(tmp_path: Path) -> None:
    """transformers' Gemma3ForConditionalGeneration ties the head by the outer config's
    ``tie_word_embeddings``, not ``text_config``'s: an outer ``false`` is an untied head, refused."""
    folder = copy_fixture(tmp_path, "gemma3-tied")
    text = json.loads((folder / "config.json").read_text())
    outer = {"model_type": "gemma3", "text_config": text, "tie_word_embeddings": False}
    (folder / "config.json").write_text(json.dumps(outer))
    err, _ = refused(tmp_path, folder)
    assert f"{folder}/config.json: tie_word_embeddings is False; this trainer supports only True" in err


def test_a_vocabulary_too_large_is_refused_before_the_tokenizer_loads(tmp_path: Path, monkeypatch) -> None:
    """tokenizer.json's ids read as JSON refuse it in about a second: transformers' load (5-10 s for a real
    vocabulary) never starts. And a tokenizer.json within the limit whose tokenizer_config.json adds tokens
    past it is still refused by the full count after the load."""
    from rljob_trainer.models import families
    from rljob_trainer.run import startup
    from tokenizers import Tokenizer, models

    from rljob.api import RLJobError, parse_rljob
    from tests.trainer.manifests import tiny_rljob

    folder = copy_fixture(tmp_path, "qwen3-tied")
    Tokenizer(models.WordLevel({f"t{i}": i for i in range(300)}, unk_token="t0")).save(
        str(folder / "tokenizer.json")
    )
    job = parse_rljob(tiny_rljob(**{"model.checkpointPath": str(folder)}))

    def never(*args: object) -> None:
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(families, "build_tokenizer", never)
    with pytest.raises(RLJobError, match="has 300 tokens, more than the model's vocabulary"):
        startup.prepare(job)
    monkeypatch.undo()
    Tokenizer(models.WordLevel({f"t{i}": i for i in range(254)}, unk_token="t0")).save(
        str(folder / "tokenizer.json")
    )  # 254 ids; the fixture's tokenizer_config.json adds 4 specials: 258 > 256
    with pytest.raises(RLJobError, match="has 258 tokens, more than the model's vocabulary"):
        startup.prepare(job)
