"""Tiny Hugging Face-format checkpoints written from a Tunix model, for the source and loading tests.

What is written is what the Hub publishes and Tunix's safetensors loaders read: ``config.json`` (the
``transformers`` field names), ``model.safetensors`` (HF tensor names and shapes, row-major
``[out, in]`` linear weights) and the tiny example's ``tokenizer.json`` + ``tokenizer_config.json``.

The HF tensors are derived from the in-memory model by inverting each family's own Tunix key mapping
(``tunix/models/<family>/params.py``: HF name -> (Tunix name, (transpose, reshape))), so the test checks
Tunix's real loader against the exact inverse of what it declares, not a second hand-written table.
``hub_cache`` lays a checkpoint out as ``huggingface_hub``'s cache does (blobs, snapshots/<rev>, refs/main)
so ``snapshot_download`` with ``HF_HUB_OFFLINE=1`` resolves it through its real offline code path.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HF_MODEL_TYPE = {"qwen3": "qwen3", "qwen2": "qwen2", "llama3": "llama", "gemma3": "gemma3_text"}
"""Every family the trainer supports (models.FAMILIES), with its config.json model_type."""


def tiny_model(family: str, seed: int = 0) -> Any:
    """The trainer's tiny model of ``family`` (models.FAMILIES), every parameter perturbed with seeded noise
    so that a transposed, mis-reshaped or swapped tensor changes the logits (norms start as all ones)."""
    import jax.numpy as jnp
    from flax import nnx
    from rljob_trainer import tunix_bridge
    from rljob_trainer.models import families as models

    from rljob.api.spec import ModelSpec

    # through build_model, as the trainer builds it (it also sets the rope Tunix would hard-code)
    model = models.build_model(ModelSpec(family=family, size="tiny"), tunix_bridge.make_mesh(), seed)
    rng = np.random.default_rng(seed)
    state = nnx.state(model, nnx.Param)
    flat = state.flat_state()
    for _, variable in flat:
        value = np.asarray(variable.value)
        variable.value = jnp.asarray(value + 0.05 * rng.standard_normal(value.shape), dtype=value.dtype)
    nnx.update(model, nnx.State.from_flat_path(flat))
    return model


def logits(model: Any, tokens: np.ndarray) -> np.ndarray:
    """The model's logits for ``tokens`` [B, L] with a causal mask (no cache)."""
    import jax.numpy as jnp

    b, n = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(n), (b, n))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((n, n), dtype=bool)), (b, n, n))
    out, _ = model(jnp.asarray(tokens), positions, None, mask)
    return np.asarray(out, dtype=np.float32)


def _hf_name(pattern: str, groups: tuple[str, ...]) -> str:
    """A concrete HF tensor name from a mapping's regex and the captured values, e.g.
    ``model\\.layers\\.([0-9]+)\\.mlp\\.up_proj\\.weight`` + ("1",) -> ``model.layers.1.mlp.up_proj.weight``."""
    values = iter(groups)  # a group the Tunix name does not use (an alternation): its first choice
    name = re.sub(r"\((?!\?)[^)]*\)", lambda m: next(values, None) or m.group(0)[1:-1].split("|")[0], pattern)
    name = re.sub(r"\(\?:[^)]*\)\?", "", name)  # optional prefixes (gemma3's language_model.) left out
    return name.replace("\\.", ".")


def _unreshape(value: np.ndarray, embed_dim: int) -> np.ndarray:
    """The 2-D ``[in, out]`` tensor that Tunix reshaped into ``value`` (q/k/v: [embed, heads, head_dim],
    o: [heads, head_dim, embed]): the split whose one side is the model width."""
    shape = value.shape
    splits = [k for k in range(1, len(shape)) if embed_dim in (math.prod(shape[:k]), math.prod(shape[k:]))]
    if len(splits) != 1:
        raise ValueError(f"cannot tell how {shape} was reshaped (width {embed_dim})")
    k = splits[0]
    return value.reshape(math.prod(shape[:k]), math.prod(shape[k:]))


def hf_tensors(family: str, model: Any) -> dict[str, np.ndarray]:
    """The model's parameters as HF-named, HF-shaped float32 tensors (the inverse of Tunix's loader)."""
    from flax import nnx
    from rljob_trainer.models import families as models

    loader = importlib.import_module(models.FAMILIES[family].params_module)
    config = model.config
    mapping = loader._get_key_and_transform_mapping(config)
    inverse = []
    for hf_pattern, (target, transform) in mapping.items():
        tunix_pattern = re.escape(target).replace("\\\\", "\\")
        tunix_pattern = re.sub(r"\\(\d)", "(?P<g\\1>[^.]+)", tunix_pattern)
        inverse.append((re.compile(tunix_pattern + "$"), hf_pattern, transform))
    out: dict[str, np.ndarray] = {}
    for path, variable in nnx.state(model, nnx.Param).flat_state():
        key = ".".join(str(p) for p in path)
        value = np.asarray(variable.value, dtype=np.float32)
        if family == "gemma3" and _gemma3_attention(key, value, out):
            continue
        hits = [(m, hf, t) for rx, hf, t in inverse if (m := rx.match(key))]
        if not hits:  # several: aliases (gemma3 reads two names for one norm), the first is as good
            raise ValueError(f"{family}: no HF name maps to {key}")
        match, hf_pattern, transform = hits[0]
        groups = tuple(match.group(g) for g in sorted(match.groupdict()))
        if transform is not None:
            permute, reshape = transform
            if reshape is not None:
                value = _unreshape(value, config.embed_dim) if permute else value.reshape(-1)
            if permute:
                value = value.transpose(np.argsort(permute))
        out[_hf_name(hf_pattern, groups)] = np.ascontiguousarray(value)
    return out


def _gemma3_attention(key: str, value: np.ndarray, out: dict[str, np.ndarray]) -> bool:
    """gemma3's loader reads q/k/v into temporary [embed, heads, head_dim] tensors and its preprocess step
    stacks them into ``q_einsum`` [heads, embed, head_dim] and ``kv_einsum`` [2, kv_heads, embed, head_dim]:
    undo that (True when ``key`` was one of those)."""
    found = re.fullmatch(r"layers\.(\d+)\.attn\.(q_einsum|kv_einsum)\.w", key)
    if not found:
        return False
    layer, kind = found.groups()

    def hf(ndh: np.ndarray) -> np.ndarray:  # [heads, embed, head_dim] -> HF [heads*head_dim, embed]
        heads, embed, head_dim = ndh.shape
        return np.ascontiguousarray(ndh.transpose(1, 0, 2).reshape(embed, heads * head_dim).T)

    prefix = f"model.layers.{layer}.self_attn"
    if kind == "q_einsum":
        out[f"{prefix}.q_proj.weight"] = hf(value)
    else:
        out[f"{prefix}.k_proj.weight"], out[f"{prefix}.v_proj.weight"] = hf(value[0]), hf(value[1])
    return True


def hf_config(family: str, config: Any) -> dict[str, Any]:
    """config.json in ``transformers``' field names for the Tunix config (what the Hub repo would hold)."""
    shared = {
        "model_type": HF_MODEL_TYPE[family],
        "num_hidden_layers": config.num_layers,
        "hidden_size": config.embed_dim,
        "intermediate_size": config.hidden_dim,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "torch_dtype": "float32",
    }
    if family == "gemma3":
        return {
            "architectures": ["Gemma3ForCausalLM"],
            **shared,
            "vocab_size": config.num_embed,
            "sliding_window": config.sliding_window_size,
            "rope_theta": config.global_base_frequency,
            "rope_local_base_freq": config.local_base_frequency,
            "query_pre_attn_scalar": config.head_dim,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        }
    tied = bool(getattr(config, "use_tied_embedding", getattr(config, "weight_tying", False)))
    return {
        "architectures": [
            {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(family, "LlamaForCausalLM")
        ],
        **shared,
        "vocab_size": config.vocab_size,
        "rope_theta": config.rope_theta,
        "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": tied,
    }


def write_checkpoint(family: str, model: Any, out: Path) -> Path:
    """``out``/config.json + model.safetensors + the tiny tokenizer files; returns ``out``."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(hf_config(family, model.config), indent=2) + "\n")
    save_file(hf_tensors(family, model), str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copy(ROOT / "examples" / "tiny" / name, out / name)
    return out


def hub_cache(
    checkpoint: Path, cache: Path, repo_id: str, revision: str = "main", repo_type: str = "model"
) -> str:
    """Lay ``checkpoint``'s files (sub-folders included) out as ``huggingface_hub``'s cache does for
    ``repo_id``: ``<models|datasets>--org--name/blobs/<hash>``, ``snapshots/<commit>/<file>`` -> symlink to
    the blob, and ``refs/<revision>`` holding the commit. Returns the commit hash."""
    repo = cache / (f"{repo_type}s--" + repo_id.replace("/", "--"))
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    names = [p.relative_to(checkpoint).as_posix() for p in files]
    commit = hashlib.sha1(
        b"".join(n.encode() + p.read_bytes() for n, p in zip(names, files, strict=True))
    ).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for name, p in zip(names, files, strict=True):
        blob = repo / "blobs" / hashlib.sha256(p.read_bytes()).hexdigest()
        shutil.copy(p, blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return commit
