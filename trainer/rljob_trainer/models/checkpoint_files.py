"""The files of a Hugging Face checkpoint folder, checked before JAX is imported: tokenizer, tensor shapes.

Why: a folder with weights and config.json but no tokenizer files used to load (``transformers`` then
builds an empty tokenizer and every prompt encodes to nothing), and a tensor that does not fit config.json
(or an untied config.json without ``lm_head.weight``) was found only by Tunix's loader, after JAX start-up.
Safetensors headers are plain JSON (8-byte little-endian length, then ``{name: {dtype, shape, ...}}``), so
the shapes are read here without loading any weights.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))
"""Any one of these sets makes a tokenizer: fast (tokenizers), SentencePiece, or byte-level BPE files."""
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.weight$")


def tokenizer_error(folder: Path, field: str) -> str | None:
    """A message when ``folder`` holds none of ``TOKENIZER_FILES`` (None when one set is complete)."""
    if any(all((folder / name).is_file() for name in names) for names in TOKENIZER_FILES):
        return None
    wanted = " or ".join(" + ".join(names) for names in TOKENIZER_FILES)
    return (
        f"{field}: {folder} has no tokenizer files ({wanted}); add the checkpoint's tokenizer there or "
        "set spec.model.tokenizerPath"
    )


def tokenizer_json_tokens(path: Path) -> int | None:
    """Token ids a ``tokenizer.json`` defines (its largest id + 1, vocabulary and added tokens), read as
    JSON: a second where loading the tokenizer with ``transformers`` takes 5-10 (the vocabulary check then
    refuses before that load). A lower bound: tokenizer_config.json can add more, which the full check
    after the load counts. None without a readable tokenizer.json or an id table in it."""
    file = path if path.name == "tokenizer.json" else path / "tokenizer.json"
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    vocab = (doc.get("model") or {}).get("vocab") if isinstance(doc, dict) else None
    ids = []
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        ids += [i for i in vocab.values() if isinstance(i, int)]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        ids.append(len(vocab) - 1)
    ids += [
        t["id"] for t in doc.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)
    ]
    return max(ids) + 1 if ids else None


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in ``folder``'s ``*.safetensors``, from the headers. Raises ValueError on a file
    that is not safetensors."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: not a safetensors file (shorter than its header)")
            (size,) = struct.unpack("<Q", raw)
            if size > 100_000_000:
                raise ValueError(f"{path}: not a safetensors file (header of {size} bytes)")
            header = json.loads(f.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(info["shape"])
    return shapes


def tensor_errors(
    family: str, fields: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str
) -> list[str]:
    """Tensors against the Tunix config fields carried from config.json (``hf_config.carry``)."""
    vocab = fields.get("vocab_size", fields.get("num_embed"))
    width, heads, kv, head_dim = (
        fields.get(k) for k in ("embed_dim", "num_heads", "num_kv_heads", "head_dim")
    )
    mlp, layers = fields.get("hidden_dim"), fields.get("num_layers")
    if None in (vocab, width, heads, kv, head_dim, mlp, layers):
        return []  # config.json itself is incomplete: reported by hf_config
    want = {
        "self_attn.q_proj": (heads * head_dim, width),
        "self_attn.k_proj": (kv * head_dim, width),
        "self_attn.v_proj": (kv * head_dim, width),
        "self_attn.o_proj": (width, heads * head_dim),
        "mlp.gate_proj": (mlp, width),
        "mlp.up_proj": (mlp, width),
        "mlp.down_proj": (width, mlp),
    }
    errors = []
    seen_layers = set()
    for name, shape in shapes.items():
        found = _LAYER.search(name)
        expected = None
        if found:
            seen_layers.add(int(found.group(1)))
            expected = want[found.group(2)]
        elif name.endswith("embed_tokens.weight") or name == "lm_head.weight":
            expected = (vocab, width)
        if expected is not None and shape != expected:
            errors.append(
                f"{where}: tensor {name} has shape {list(shape)}, config.json makes it {list(expected)}"
            )
    if not any(n.endswith("embed_tokens.weight") for n in shapes):
        errors.append(f"{where}: no embed_tokens.weight tensor")
    if seen_layers and max(seen_layers) + 1 != layers:
        errors.append(f"{where}: tensors for {max(seen_layers) + 1} layers, config.json has {layers}")
    tied = fields.get("use_tied_embedding", fields.get("weight_tying", True))
    if not tied and "lm_head.weight" not in shapes:
        errors.append(f"{where}: tie_word_embeddings is false but there is no lm_head.weight tensor")
    return errors[:10]
