"""Write tests/trainer/fixtures/checkpoints/: small checkpoints written by ``transformers`` and their fp32 logits.

Why an independent reference: the trainer's loading tests used to compare Tunix with Tunix (a checkpoint
written by inverting Tunix's own key mapping), which cannot see a key that Tunix ignores (rope theta,
rope scaling, an untied head, a sliding window...). These checkpoints come from ``transformers``'
``save_pretrained`` (safetensors) and the logits from its own fp32 forward, so a config.json key the
trainer drops or mis-carries changes the logits (tests/trainer/test_checkpoint_reference.py).

Every checkpoint has the tiny model's shapes (2 layers, width 64, 4 heads of 16, 2 KV heads, MLP 128,
256 tokens: ``spec.model.size: tiny``) and the demo tokenizer (examples/tiny), and differs from
``transformers``' defaults in the keys named by its entry in ``CHECKPOINTS``. Weights are random (seeded)
and scaled so that every tensor moves the logits.

PyTorch is not a test dependency: run this in a throwaway environment, e.g.

    uv venv /tmp/ref && uv pip install --python /tmp/ref/bin/python torch transformers==5.12.1 safetensors
    /tmp/ref/bin/python hack/gen_reference_checkpoints.py

(PyPI's Linux ``torch`` wheel brings CUDA libraries: about 5 GB installed; the CPU runs the forward.)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Qwen2Config, Qwen3Config

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "trainer" / "fixtures" / "checkpoints"
TOKENIZER = ROOT / "examples" / "tiny"
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "head_dim": 16,
    "num_key_value_heads": 2,
    "vocab_size": 256,
}
SEQ = 48
"""Tokens per row: past the gemma3 window (8) and the llama3 scaling's original context (16)."""
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}

CHECKPOINTS: dict[str, tuple[type, dict[str, Any]]] = {
    "qwen3-tied": (Qwen3Config, {"rope_theta": 1_000_000.0, "tie_word_embeddings": True}),
    "qwen3-untied": (
        Qwen3Config,
        {"rope_theta": 10_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    ),
    "qwen2-tied": (Qwen2Config, {"rope_theta": 1_000_000.0, "tie_word_embeddings": True}),
    # DeepSeek-R1-Distill-Qwen-1.5B's keys at tiny widths: rope theta 1e4 and its own output head.
    "qwen2-untied": (Qwen2Config, {"rope_theta": 10_000.0, "tie_word_embeddings": False}),
    # Llama 3.2's rope: theta 5e5 with llama3 scaling (original context shrunk so short rows feel it).
    "llama3-tied": (
        LlamaConfig,
        {
            "rope_theta": 500_000.0,
            "rope_scaling": LLAMA3_SCALING,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
    ),
    "llama3-untied": (LlamaConfig, {"rope_theta": 500_000.0, "tie_word_embeddings": False}),
    # Another sliding window (8, not Tunix's 512) and local/global rope bases; the query scalar is the
    # head width, as Tunix's gemma3 computes it.
    "gemma3-tied": (
        Gemma3TextConfig,
        {
            "sliding_window": 8,
            "rope_theta": 1_000_000.0,
            "rope_local_base_freq": 10_000.0,
            "query_pre_attn_scalar": 16,
            "tie_word_embeddings": True,
        },
    ),
    # A global layer (Tunix repeats 5 sliding + 1 global; this checkpoint alternates) with Gemma 3 4B's
    # linear rope scaling of the global layers.
    "gemma3-global": (
        Gemma3TextConfig,
        {
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
            "query_pre_attn_scalar": 16,
            "tie_word_embeddings": True,
        },
    ),
    "gemma3-untied": (
        Gemma3TextConfig,
        {"sliding_window": 8, "query_pre_attn_scalar": 16, "tie_word_embeddings": False},
    ),
}


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random, of a size that moves the logits (norm scales around 1)."""
    gen = torch.Generator().manual_seed(seed)
    gemma = "gemma" in type(model).__name__.lower()  # gemma norms scale by (1 + w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * noise)
            else:
                p.copy_(0.15 * noise)


def write(name: str, config_cls: type, keys: dict[str, Any], seed: int) -> None:
    config = config_cls(**TINY, **keys, dtype="float32")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    randomize(model, seed)
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)  # not read by the trainer
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, out / f)
    tokens = np.random.default_rng(seed).integers(0, TINY["vocab_size"], size=(2, SEQ), dtype=np.int64)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(tokens)).logits.float().numpy()
    np.savez_compressed(
        out / "reference.npz", tokens=tokens.astype(np.int32), logits=logits.astype(np.float32)
    )
    print(f"{name}: logits max |{np.abs(logits).max():.3f}|, files {sorted(p.name for p in out.iterdir())}")


def main() -> None:
    torch.use_deterministic_algorithms(True)
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[1:])  # names to (re)write; all by default
    for seed, (name, (config_cls, keys)) in enumerate(CHECKPOINTS.items()):
        if not only or name in only:
            write(name, config_cls, keys, seed)
    (OUT / "VERSIONS.json").write_text(
        json.dumps(
            {"torch": torch.__version__, "transformers": transformers.__version__, "seq": SEQ}, indent=2
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
