"""config.json of a Hugging Face checkpoint -> the Tunix ModelConfig fields it sets, or why it cannot load.

Pure Python (no JAX, no Tunix import), so every check here runs before JAX is imported, in well under a
second. Why it exists: Tunix's named configs fix every key but the tensor shapes, so a checkpoint that
differs anywhere else (rope theta or scaling, sliding window, norm epsilon, an untied head...) would load
as a different model, silently. Here every config.json key that changes the computation is either
carried into the Tunix config (``Carried.fields``; rope frequencies that Tunix hard-codes go through
``rope.py``) or refused with the key, the checkpoint's value and the value the family can honour.

``spec.model.size`` still names the shapes (layers, width, heads, head width, KV heads, MLP width,
vocabulary): those are compared with Tunix's named config of that size, read from Tunix's source with
``ast`` (importing it would import JAX). Everything else comes from config.json. docs/trainer.md has the
table of keys per family; ``KEYS`` below is what it lists.

Both spellings ``transformers`` writes are read: the Hub's (``rope_theta``, ``rope_scaling``,
``rope_local_base_freq``) and transformers 5's ``rope_parameters`` (per attention kind for gemma3).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

SHAPES = {  # config.json key -> Tunix field; compared with spec.model.size's named config
    "num_hidden_layers": "num_layers",
    "hidden_size": "embed_dim",
    "intermediate_size": "hidden_dim",
    "num_attention_heads": "num_heads",
    "head_dim": "head_dim",
    "num_key_value_heads": "num_kv_heads",
    "vocab_size": "vocab_size",
}
TIED_FIELD = {"qwen3": "use_tied_embedding", "qwen2": "use_tied_embedding", "llama3": "weight_tying"}
DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers' defaults for keys a config.json may leave out (its *Config classes, 5.12)
    "qwen3": {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "head_dim": 128},
    "qwen2": {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
    "llama3": {"rope_theta": 10_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
    "gemma3": {
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "query_pre_attn_scalar": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}
TUNIX_GEMMA3_NORM_EPS = 1e-6  # gemma3 RMSNorm: rsqrt(var + 1e-06), not configurable

KEYS: dict[str, dict[str, str]] = {
    # family -> config.json key -> what happens (docs/trainer.md's table)
    **{
        fam: {
            **{k: f"checked against the size's `{v}`" for k, v in SHAPES.items()},
            "rope_theta / rope_parameters.rope_theta": "carried (rope frequencies)",
            "rms_norm_eps": "carried (`norm_eps`)",
            "tie_word_embeddings": "carried; `false` needs `lm_head.weight` in the safetensors",
            "hidden_act": "refused unless `silu`",
            "rope_scaling / rope_parameters.rope_type": "refused unless none/`default`"
            + (
                " or `llama3` (carried: its four keys required, `partial_rotary_factor` only 1)"
                if fam == "llama3"
                else ""
            ),
        }
        for fam in ("qwen3", "qwen2", "llama3")
    },
}
KEYS["qwen3"]["attention_bias"] = "refused unless `false`"
KEYS["qwen3"]["use_sliding_window"] = "refused unless `false`"
KEYS["qwen2"]["use_sliding_window"] = "refused unless `false`"
KEYS["qwen3"]["layer_types"] = KEYS["qwen2"]["layer_types"] = "refused unless every layer is `full_attention`"
KEYS["llama3"]["attention_bias, mlp_bias"] = "refused unless `false`"
KEYS["gemma3"] = {
    **{k: f"checked against the size's `{v}`" for k, v in SHAPES.items() if k != "vocab_size"},
    "vocab_size": "checked against the size's `num_embed`",
    "rope_theta / rope_parameters.full_attention.rope_theta": "carried (`global_base_frequency`)",
    "rope_local_base_freq / rope_parameters.sliding_attention.rope_theta": "carried (`local_base_frequency`)",
    "rope_scaling / rope_parameters.full_attention": (
        "`linear`: carried (`global_scale_factor`; `partial_rotary_factor` only 1); others refused"
    ),
    "sliding_window": "carried (`sliding_window_size`)",
    "layer_types / sliding_window_pattern / _sliding_window_pattern": (
        "carried (each layer sliding or global; Tunix's own: 5 + 1)"
    ),
    "query_pre_attn_scalar": "refused unless `head_dim` or `hidden_size / num_attention_heads`",
    "rms_norm_eps": "refused unless 1e-6",
    "attn_logit_softcapping, final_logit_softcapping": "refused unless null",
    "tie_word_embeddings": "refused unless `true` (Tunix's gemma3 has no separate head); a multimodal "
    "config's own value over its `text_config`'s, as transformers ties the head",
    "text_config": "read: a multimodal checkpoint's text model, whose keys are this table's",
    "attention_bias": "refused unless `false`",
    "hidden_activation": "refused unless `gelu_pytorch_tanh`",
    "use_bidirectional_attention": "refused unless `false` (Tunix's gemma3 attends causally)",
}
for _keys in KEYS.values():
    _keys["attention_dropout"] = "refused unless 0 (Tunix's models have no dropout)"

NO_EFFECT: dict[str, dict[str, str]] = {
    # "all" or family -> config.json key -> why it does not change the computation (docs/trainer.md); every
    # key of transformers' config classes is here or in KEYS (tests/trainer/test_checkpoint_config.py)
    "all": {
        "_name_or_path, architectures, transformers_version": "metadata",
        "model_type": "picks the family (checked before this table)",
        "bos_token_id, eos_token_id, pad_token_id": "the tokenizer's ids; the forward never reads them "
        "(transformers' `padding_idx` only zeroes that embedding row's gradient, and pad positions are masked)",
        "dtype, torch_dtype": "the weights' storage dtype; the trainer computes in its own (docs/tpu.md)",
        "initializer_range": "initialises weights the checkpoint replaces",
        "use_cache": "inference KV caching: the same values",
        "max_position_embeddings": "rope computes any position (Tunix has no position table); only ropes "
        "refused here read it (`dynamic`, `yarn`, `longrope`; `llama3` without its own original length)",
        "output_attentions, output_hidden_states, return_dict": "what transformers returns, not what it computes",
        "id2label, label2id, problem_type": "classification heads; a causal LM has none",
        "is_encoder_decoder": "generation utilities' flag; the decoder's forward does not read it",
        "chunk_size_feed_forward": "not read by these families' modeling code",
    },
    "qwen3": {},
    "qwen2": {},
    "llama3": {"pretraining_tp": "not read by transformers 5 (earlier versions sliced the same matmuls)"},
    "gemma3": {
        "cache_implementation": "inference KV caching",
        "boi_token_index, eoi_token_index, image_token_index, mm_tokens_per_image": (
            "image tokens: Tunix's gemma3 is built without a vision tower and prompts are text"
        ),
        "vision_config": "the vision tower, not built",
    },
}
for _fam in ("qwen3", "qwen2"):
    NO_EFFECT[_fam]["max_window_layers, sliding_window"] = (
        "read only with `use_sliding_window: true` (refused); transformers sets `sliding_window` to null otherwise"
    )
SCALED_ROPE_KEYS = {  # rope type -> the numbers it needs (llama3's: qwen3/qwen2 refuse it; linear: gemma3's)
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "linear": ("factor",),
}


@dataclass
class Carried:
    """What config.json sets: Tunix ModelConfig fields, the rope of qwen3/llama3 (``rope.py``), problems."""

    fields: dict[str, Any] = field(default_factory=dict)
    rope: dict[str, Any] | None = None
    layer_types: list[str] | None = None  # gemma3: "sliding"/"global" per layer
    errors: list[str] = field(default_factory=list)


def read(path: Path) -> dict[str, Any]:
    """config.json's text part (``text_config`` of a multimodal checkpoint). Raises OSError/ValueError."""
    hf = json.loads(path.read_text())
    if not isinstance(hf, dict):
        raise ValueError("not a JSON object")
    text = hf.get("text_config", hf)
    if text is not hf and isinstance(text, dict) and "tie_word_embeddings" in hf:
        # transformers ties a multimodal model's head by the outer config's value, not text_config's
        text = {**text, "tie_word_embeddings": hf["tie_word_embeddings"]}
    return text


def rope_of(hf: dict[str, Any], family: str, kind: str = "full_attention") -> dict[str, Any]:
    """The rope of one attention kind as ``{"rope_type", "rope_theta", ...scaling keys}``, from either
    spelling (transformers 5's ``rope_parameters`` or the Hub's ``rope_theta`` + ``rope_scaling``)."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict):
        if kind in params and isinstance(params[kind], dict):
            params = params[kind]
        out = {k: v for k, v in params.items() if k not in ("full_attention", "sliding_attention")}
    else:
        out = dict(hf.get("rope_scaling") or {}) if kind == "full_attention" else {}
        theta_key = "rope_local_base_freq" if kind == "sliding_attention" else "rope_theta"
        out["rope_theta"] = hf.get(theta_key)
    out["rope_type"] = out.get("rope_type") or out.pop("type", None) or "default"
    out.pop("type", None)
    if out.get("rope_theta") is None:
        theta_key = "rope_local_base_freq" if kind == "sliding_attention" else "rope_theta"
        out["rope_theta"] = hf.get(theta_key) or DEFAULTS[family][theta_key]
    return out


def carry(family: str, hf: dict[str, Any], named: dict[str, Any], where: str) -> Carried:
    """config.json ``hf`` of a ``family`` checkpoint against ``named`` (the size's Tunix config fields).

    ``where`` prefixes every message (``spec.model.checkpointPath: <dir>/config.json``)."""
    out = Carried()
    get = _getter(family, hf)
    _shapes(family, get, named, where, out)
    if family == "gemma3":
        _gemma3(get, hf, where, out)
    else:
        _decoder(family, get, hf, where, out)
    dropout = float(hf.get("attention_dropout") or 0.0)
    _refuse_unless(out, where, "attention_dropout", dropout, 0.0, f"Tunix's {family} has no dropout")
    return out


def _getter(family: str, hf: dict[str, Any]) -> Any:
    def get(key: str) -> Any:
        if key == "head_dim" and hf.get("head_dim") is None and family != "qwen3":
            return hf["hidden_size"] // hf["num_attention_heads"]
        value = hf.get(key)
        return DEFAULTS[family].get(key) if value is None else value

    return get


def _shapes(family: str, get: Any, named: dict[str, Any], where: str, out: Carried) -> None:
    for key, tunix in SHAPES.items():
        if family == "gemma3" and tunix == "vocab_size":
            tunix = "num_embed"
        got = get(key)
        if got is None:
            out.errors.append(f"{where}: no {key} (needed to build the model)")
            continue
        want = named.get(tunix)
        if want is not None and got != want:
            out.errors.append(f"{where}: {key} is {got}, but spec.model.size has {want} (Tunix `{tunix}`)")
        out.fields[tunix] = got


def _refuse_unless(out: Carried, where: str, key: str, got: Any, allowed: Any, why: str) -> None:
    if got != allowed:
        out.errors.append(f"{where}: {key} is {got!r}; this trainer supports only {allowed!r} ({why})")


def _decoder(family: str, get: Any, hf: dict[str, Any], where: str, out: Carried) -> None:
    """qwen3, qwen2, llama3: carried rope theta (and llama3 scaling), norm epsilon, tied head."""
    rope = rope_of(hf, family)
    kind = rope["rope_type"]
    if kind not in ("default", "llama3") or (kind == "llama3" and family != "llama3"):
        out.errors.append(
            f"{where}: rope scaling type {kind!r} is not supported for {family} (supported: none"
            + (", 'llama3'" if family == "llama3" else "")
            + ")"
        )
    if family == "llama3":
        _scaled_rope(out, where, rope)
    out.rope = rope
    out.fields["rope_theta"] = rope["rope_theta"]
    out.fields["norm_eps"] = float(get("rms_norm_eps"))
    out.fields[TIED_FIELD[family]] = bool(get("tie_word_embeddings"))
    _refuse_unless(out, where, "hidden_act", hf.get("hidden_act", "silu"), "silu", f"Tunix's {family} MLP")
    bias_keys = {"qwen3": ("attention_bias",), "llama3": ("attention_bias", "mlp_bias"), "qwen2": ()}
    for key in bias_keys[family]:
        _refuse_unless(
            out, where, key, bool(hf.get(key, False)), False, f"Tunix's {family} has no such biases"
        )
    if family in ("qwen3", "qwen2"):
        _refuse_unless(
            out, where, "use_sliding_window", bool(hf.get("use_sliding_window", False)), False,
            f"Tunix's {family} attends to the whole context",
        )  # fmt: skip
        layers = hf.get("num_hidden_layers") or 0
        types = hf.get("layer_types")
        if types is not None and types != ["full_attention"] * layers:
            out.errors.append(
                f"{where}: layer_types is {types!r}; this trainer supports only full_attention for each of the "
                f"{layers} layers (Tunix's {family} attends to the whole context)"
            )


def _scaled_rope(out: Carried, where: str, rope: dict[str, Any]) -> None:
    """A ``llama3``/``linear`` rope needs its numbers (else a KeyError after JAX starts), and scales the whole
    head: transformers' scaled ropes rotate only ``partial_rotary_factor`` of it (its default rope ignores
    that key), Tunix's always all of it."""
    kind = rope["rope_type"]
    for key in SCALED_ROPE_KEYS.get(kind, ()):
        if not _number(rope.get(key)):
            out.errors.append(f"{where}: rope scaling {kind!r} needs a number {key}, got {rope.get(key)!r}")
    if kind in SCALED_ROPE_KEYS:
        partial = rope.get("partial_rotary_factor", 1.0)
        _refuse_unless(out, where, "partial_rotary_factor", partial, 1.0, "Tunix rotates the whole head")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _gemma3(get: Any, hf: dict[str, Any], where: str, out: Carried) -> None:
    """gemma3: carried windows, layer kinds and rope bases; Tunix's fixed epsilon and tied head refused."""
    global_rope, local_rope = rope_of(hf, "gemma3"), rope_of(hf, "gemma3", "sliding_attention")
    out.fields["global_base_frequency"] = global_rope["rope_theta"]
    out.fields["local_base_frequency"] = local_rope["rope_theta"]
    if global_rope["rope_type"] not in ("default", "linear"):
        out.errors.append(
            f"{where}: rope scaling type {global_rope['rope_type']!r} is not supported for gemma3 "
            "(supported: none, 'linear')"
        )
    _scaled_rope(out, where, global_rope)
    if global_rope["rope_type"] == "linear" and _number(global_rope.get("factor")):
        out.fields["global_scale_factor"] = float(global_rope["factor"])
    if local_rope["rope_type"] != "default":
        out.errors.append(f"{where}: sliding-layer rope type {local_rope['rope_type']!r} is not supported")
    out.fields["sliding_window_size"] = int(get("sliding_window"))
    layers = int(get("num_hidden_layers") or 0)
    types = hf.get("layer_types")
    if types is None:
        pattern = hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern")
        pattern = int(pattern or DEFAULTS["gemma3"]["sliding_window_pattern"])
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    kinds = {"full_attention": "global", "sliding_attention": "sliding"}
    if len(types) != layers or any(t not in kinds for t in types):
        out.errors.append(
            f"{where}: layer_types {list(types)} must name full_attention or sliding_attention for each of "
            f"the {layers} layers"
        )
    else:
        out.layer_types = [kinds[t] for t in types]
    scalar = get("query_pre_attn_scalar")
    head_dim, per_head = get("head_dim"), get("hidden_size") // get("num_attention_heads")
    if scalar == head_dim:
        out.fields["query_pre_attn_norm"] = "BY_ONE_OVER_SQRT_HEAD_DIM"
    elif scalar == per_head:
        out.fields["query_pre_attn_norm"] = "BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS"
    else:
        out.errors.append(
            f"{where}: query_pre_attn_scalar is {scalar}; Tunix's gemma3 supports only head_dim ({head_dim}) "
            f"or hidden_size / num_attention_heads ({per_head})"
        )
    eps = float(get("rms_norm_eps"))
    _refuse_unless(out, where, "rms_norm_eps", eps, TUNIX_GEMMA3_NORM_EPS, "Tunix's gemma3 norm")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        _refuse_unless(out, where, key, hf.get(key), None, "Tunix's gemma3 does not soft-cap")
    _refuse_unless(
        out, where, "tie_word_embeddings", bool(get("tie_word_embeddings")), True,
        "Tunix's gemma3 decodes with the embedding",
    )  # fmt: skip
    _refuse_unless(out, where, "attention_bias", bool(hf.get("attention_bias", False)), False, "no biases")
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    _refuse_unless(out, where, "hidden_activation", act, "gelu_pytorch_tanh", "Tunix's gemma3 MLP")
    bidirectional = bool(hf.get("use_bidirectional_attention", False))
    _refuse_unless(
        out, where, "use_bidirectional_attention", bidirectional, False, "Tunix's gemma3 is causal"
    )


@cache
def named_fields(module_file: str, method: str) -> dict[str, Any]:
    """The literal keyword arguments of ``ModelConfig.<method>()`` in a Tunix model file, following
    ``return cls.<other>(...)`` delegation: Tunix's named sizes without importing Tunix (and JAX)."""
    tree = ast.parse(Path(module_file).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    name = method
    for _ in range(5):
        ret = next(n for n in ast.walk(methods[name]) if isinstance(n, ast.Return))
        call = ret.value
        assert isinstance(call, ast.Call)
        if isinstance(call.func, ast.Attribute):  # cls.other(...)
            name = call.func.attr
            continue
        out = {}
        for kw in call.keywords:
            with contextlib.suppress(ValueError):  # enums, sharding configs: not shapes
                out[kw.arg] = ast.literal_eval(kw.value)
        return out
    raise ValueError(f"{module_file}: ModelConfig.{method} delegates too deep")


def tunix_model_file(family_module: str) -> str:
    """Path of ``tunix/models/<family>/model.py`` without importing Tunix (its package imports JAX)."""
    spec = importlib.util.find_spec("tunix")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("tunix")
    root = Path(next(iter(spec.submodule_search_locations)))
    return str(root.joinpath(*family_module.split(".")[1:]).with_suffix(".py"))
