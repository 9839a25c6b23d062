"""Model family + size -> a Tunix model (and its tokenizer).

``tiny`` is a random 2-layer, dim-64, vocab-256 model built from a named small config, so demos and
tests run offline on CPU with the built-in tokenizer. Every other size is one of Tunix's named configs
and loads its weights from ``spec.model.checkpointPath`` (a safetensors directory, as published on
the Hugging Face hub) through Tunix's loaders.

``check_model_spec`` is pure Python (no JAX import) so a bad config fails in well under a second with
the field named, before any accelerator is touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob.api import RLJobError
from rljob.api.spec import ModelSpec
from rljob_trainer.models import checkpoint_files, hf_config, random_init
from rljob_trainer.workload import sources, task

TINY = "tiny"


@dataclass(frozen=True)
class Family:
    """Where a model family lives in Tunix and which named configs it offers."""

    module: str  # tunix.models.<family>.model
    model_class: str
    params_module: str  # module with create_model_from_safe_tensors
    sizes: dict[str, str]  # spec.model.size -> ModelConfig classmethod
    tiny: dict[str, Any]  # ModelConfig kwargs of the random demo model


_TINY_COMMON = {
    "num_layers": 2,
    "embed_dim": 64,
    "hidden_dim": 128,
    "num_heads": 4,
    "head_dim": 16,
    "num_kv_heads": 2,
}

# Qwen2 and Qwen3 configs take the same keyword arguments for the tiny model.
_TINY_QWEN = {
    **_TINY_COMMON,
    "vocab_size": task.VOCAB_SIZE,
    "rope_theta": 10_000,
    "norm_eps": 1e-6,
    "use_tied_embedding": True,
}

FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        module="tunix.models.qwen3.model",
        model_class="Qwen3",
        params_module="tunix.models.qwen3.params",
        sizes={
            "0.6b": "qwen3_0p6b",
            "1.7b": "qwen3_1p7b",
            "4b": "qwen3_4b",
            "8b": "qwen3_8b",
            "14b": "qwen3_14b",
            "30b-a3b": "qwen3_30b_a3b",
            "32b": "qwen3_32b",
        },
        tiny=_TINY_QWEN,
    ),
    "qwen2": Family(
        module="tunix.models.qwen2.model",
        model_class="Qwen2",
        params_module="tunix.models.qwen2.params",
        sizes={"0.5b": "qwen2p5_0p5b", "1.5b": "qwen2p5_1p5b", "3b": "qwen2p5_3b", "7b": "qwen2p5_7b"},
        tiny=_TINY_QWEN,
    ),
    "llama3": Family(
        module="tunix.models.llama3.model",
        model_class="Llama3",
        params_module="tunix.models.llama3.params",
        sizes={
            "1b": "llama3p2_1b",
            "3b": "llama3p2_3b",
            "8b": "llama3p1_8b",
            "70b": "llama3p1_70b",
            "405b": "llama3p1_405b",
        },
        tiny={
            **_TINY_COMMON,
            "vocab_size": task.VOCAB_SIZE,
            "rope_theta": 10_000,
            "norm_eps": 1e-6,
            "weight_tying": True,
        },
    ),
    "gemma3": Family(
        module="tunix.models.gemma3.model",
        model_class="Gemma3",
        params_module="tunix.models.gemma3.params_safetensors",
        sizes={
            "270m": "gemma3_270m",
            "1b": "gemma3_1b_pt",
            "4b": "gemma3_4b_pt",
            "12b": "gemma3_12b_pt",
            "27b": "gemma3_27b_pt",
        },
        tiny={**_TINY_COMMON, "num_embed": task.VOCAB_SIZE, "sliding_window_size": 512},
    ),
}


def check_model_spec(model: ModelSpec) -> list[str]:
    """Every problem with spec.model visible without fetching, as ``path: message`` lines."""
    if model.backend == "maxtext":
        return _check_maxtext_spec(model)
    family = FAMILIES.get(model.family)
    if family is None:
        return [f"spec.model.family: unknown family {model.family!r}; known: {', '.join(FAMILIES)}"]
    if model.size != TINY and model.size not in family.sizes:
        known = ", ".join([TINY, *family.sizes])
        return [f"spec.model.size: unknown size {model.size!r} for family {model.family}; known: {known}"]
    path = model.checkpointPath
    if path is None:
        if model.size == TINY:
            return []
        return [
            f"spec.model.checkpointPath: required for size {model.size} (only size tiny starts from "
            "random weights)"
        ]
    if sources.kind(path) != "local":  # remote: fetched (and then checked) at start-up
        return []
    errors = sources.check_local(path, "spec.model.checkpointPath", want="dir")
    return errors or check_checkpoint_dir(
        Path(path), model, tokenizer_elsewhere=model.tokenizerPath is not None
    )


MODEL_TYPES = {
    "qwen3": ("qwen3",),
    "qwen2": ("qwen2",),
    "llama3": ("llama",),
    "gemma3": ("gemma3", "gemma3_text"),
}
"""config.json model_type values each family's Tunix loader reads."""


def check_checkpoint_dir(path: Path, model: ModelSpec, tokenizer_elsewhere: bool = False) -> list[str]:
    """A Hugging Face-format checkpoint directory that loads exactly as spec.model.family/size, as
    ``path: message`` lines naming the file: weights, config.json (every key that changes the computation
    carried or refused, ``hf_config``), tensor shapes, and tokenizer files (unless ``tokenizer_elsewhere``:
    spec.model.tokenizerPath is set). No JAX: runs before it is imported."""
    field = "spec.model.checkpointPath"
    if not any(path.glob("*.safetensors")):
        return [f"{field}: no *.safetensors files in {path}"]
    config = path / "config.json"
    if not config.is_file():
        return [f"{field}: no config.json in {path}"]
    try:
        hf = hf_config.read(config)
    except (OSError, ValueError) as exc:
        return [f"{field}: {config} is not readable JSON ({exc})"]
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES[model.family]:
        return [f"{field}: {config} says model_type {model_type!r}, but spec.model.family is {model.family}"]
    carried = hf_config.carry(model.family, hf, named_fields(model), f"{field}: {config}")
    errors = list(carried.errors)
    if not errors:
        try:
            shapes = checkpoint_files.tensor_shapes(path)
        except (OSError, ValueError, KeyError) as exc:
            return [f"{field}: {exc}"]
        errors += checkpoint_files.tensor_errors(model.family, carried.fields, shapes, f"{field}: {path}")
    if not tokenizer_elsewhere:
        missing = checkpoint_files.tokenizer_error(path, field)
        errors += [missing] if missing else []
    return errors


def named_fields(model: ModelSpec) -> dict[str, Any]:
    """The Tunix config fields of spec.model.size without importing Tunix: the tiny model's, or the named
    config's literal arguments read from Tunix's source (``hf_config.named_fields``)."""
    family = FAMILIES[model.family]
    if model.size == TINY:
        return dict(family.tiny)
    return hf_config.named_fields(hf_config.tunix_model_file(family.module), family.sizes[model.size])


def _check_maxtext_spec(model: ModelSpec) -> list[str]:
    """spec.model with backend maxtext (the API already requires spec.model.maxtext and size tiny|full;
    override keys are checked against MaxText's config by ``maxtext_models.check_overrides``)."""
    import importlib.util

    errors = []
    if importlib.util.find_spec("maxtext") is None:
        errors.append(
            "spec.model.backend: maxtext needs the MaxText trainer image (Python 3.12 with the `maxtext` "
            "extra, docs/maxtext.md); this image has only the Tunix backend"
        )
    if model.size == TINY:  # a tokenizerPath is allowed (startup checks it fits the 256-token vocabulary)
        if model.checkpointPath is not None:
            errors.append(
                "spec.model.checkpointPath: size tiny is a random demo decoder; unset checkpointPath"
            )
        return errors
    for field, why in (
        ("checkpointPath", "MaxText's load_parameters_path (an Orbax checkpoint)"),
        ("tokenizerPath", "the Hugging Face tokenizer (a MaxText checkpoint has none)"),
    ):
        if getattr(model, field) is None:
            errors.append(f"spec.model.{field}: required for backend maxtext size full: {why}")
    return errors


def label(model: ModelSpec) -> str:
    """How the console names the model: ``qwen3/tiny`` or ``maxtext:qwen3-8b/full``."""
    if model.backend == "maxtext" and model.maxtext is not None:
        return f"maxtext:{model.maxtext.modelName}/{model.size}"
    return f"{model.family}/{model.size}"


def is_tiny(model: ModelSpec) -> bool:
    return model.size == TINY


def model_config(model: ModelSpec, checkpoint_dir: Path | None = None) -> Any:
    """The Tunix ModelConfig of spec.model: with a checkpoint, checked (``check_checkpoint_dir``; problems
    raise RLJobError) and built from its config.json (``config_from_hf``); else the named or tiny config."""
    return config_from_hf(model, _checked_hf(model, checkpoint_dir))


def _checked_hf(model: ModelSpec, checkpoint_dir: Path | None) -> dict[str, Any] | None:
    if checkpoint_dir is None:
        return None
    errors = check_checkpoint_dir(checkpoint_dir, model, tokenizer_elsewhere=True)
    if errors:
        raise RLJobError(errors)
    return hf_config.read(checkpoint_dir / "config.json")


def config_from_hf(model: ModelSpec, hf: dict[str, Any] | None) -> Any:
    """The named (or tiny) Tunix config of spec.model with every key config.json ``hf`` carries
    (``hf_config.carry``; refused keys raise RLJobError)."""
    family = FAMILIES[model.family]
    module = importlib.import_module(family.module)
    config_cls = module.ModelConfig
    if model.size == TINY:
        import jax.numpy as jnp

        kwargs = dict(family.tiny)
        if "param_dtype" in config_cls.__dataclass_fields__:  # gemma3 defaults to bfloat16; the demo is fp32
            kwargs["param_dtype"] = jnp.float32
        config = config_cls(**kwargs)
    else:
        config = getattr(config_cls, family.sizes[model.size])()
    if hf is None:
        return config
    fields = dict(_carried(model, hf).fields)
    if "query_pre_attn_norm" in fields:  # an enum member, named by hf_config (which imports no Tunix)
        fields["query_pre_attn_norm"] = module.QueryPreAttentionNormalisation[fields["query_pre_attn_norm"]]
    return dataclasses.replace(config, **fields)


def _carried(model: ModelSpec, hf: dict[str, Any]) -> hf_config.Carried:
    carried = hf_config.carry(model.family, hf, named_fields(model), "spec.model.checkpointPath: config.json")
    if carried.errors:
        raise RLJobError(carried.errors)
    return carried


@contextlib.contextmanager
def _as_config_says(model: ModelSpec, hf: dict[str, Any] | None, config: Any) -> Iterator[None]:
    """What Tunix fixes outside its ModelConfig, set from config.json while a model is built: qwen3/llama3
    rope frequencies (``rope.install``: process state, read when a forward pass is traced) and gemma3's
    per-layer attention kinds (``GEMMA3_ATTENTION_PATTERN``, read by the constructor; restored after)."""
    from rljob_trainer.models import rope

    carried = _carried(model, hf) if hf is not None else hf_config.Carried()
    if model.family in rope.PATCHED:
        rope.install(model.family, carried.rope or {"rope_theta": config.rope_theta}, config.head_dim)
    if model.family != "gemma3" or not carried.layer_types:
        yield
        return
    module = importlib.import_module(FAMILIES["gemma3"].module)
    kinds = {"global": module.AttentionType.GLOBAL, "sliding": module.AttentionType.LOCAL_SLIDING}
    saved = module.GEMMA3_ATTENTION_PATTERN
    module.GEMMA3_ATTENTION_PATTERN = tuple(kinds[k] for k in carried.layer_types)  # one per layer
    try:
        yield
    finally:
        module.GEMMA3_ATTENTION_PATTERN = saved


def build_model(model: ModelSpec, mesh: Any, seed: int, checkpoint_dir: Path | None = None) -> Any:
    """A Tunix model: the checkpoint's weights (Tunix's safetensors loader) or, without one, random from
    ``seed`` (size tiny; the kernels Tunix leaves at zero drawn, ``random_init``). Called once per role
    (actor, reference), which must start identical.

    Raises RLJobError when the checkpoint does not fit spec.model.family/size (already checked before
    JAX by ``check_checkpoint_dir``; re-checked here for callers that skip start-up).
    """
    from flax import nnx

    family = FAMILIES[model.family]
    hf = _checked_hf(model, checkpoint_dir)
    config = config_from_hf(model, hf)
    with _as_config_says(model, hf, config):
        if checkpoint_dir is None:
            model_cls = getattr(importlib.import_module(family.module), family.model_class)
            with mesh:
                built = model_cls(config, rngs=nnx.Rngs(params=seed))
            random_init.draw_zero_kernels(built, seed)  # Tunix zero-initialises the MLPs
            return built
        loader = importlib.import_module(family.params_module)
        dtype = weights_dtype(model)
        config = computing_in(config, dtype)
        try:
            return loader.create_model_from_safe_tensors(str(checkpoint_dir), config, mesh=mesh, dtype=dtype)
        except (ValueError, AssertionError, KeyError) as exc:  # Tunix's loader: shape or name mismatch
            raise RLJobError(
                [
                    f"spec.model.checkpointPath: {checkpoint_dir} does not fit {model.family}/{model.size}: "
                    f"{str(exc)[:300]}"
                ]
            ) from None


def weights_dtype(model: ModelSpec) -> Any:
    """The dtype a checkpoint's weights load in: bfloat16 for named sizes (as published), float32 for
    tiny (the CPU demo and the exactness tests)."""
    import jax.numpy as jnp

    return jnp.float32 if model.size == TINY else jnp.bfloat16


def computing_in(config: Any, dtype: Any) -> Any:
    """``config`` computing (activations, matmul inputs, the sampler's KV cache) in ``dtype``, the dtype
    the weights load in. Tunix's qwen2/qwen3 configs default to float32 whatever the weights, so with bf16
    weights every layer cast them and its activations up: twice the activation and KV-cache bytes and HBM
    traffic (docs/tpu.md). llama3 and gemma3 have no such field and already compute in their weights' dtype,
    as Hugging Face does with ``torch_dtype``."""
    if "dtype" not in getattr(config, "__dataclass_fields__", {}):
        return config
    return dataclasses.replace(config, dtype=dtype)


def build_tokenizer(path: Path | None) -> Any:
    """The built-in 256-character tokenizer without a path; else the Hugging Face tokenizer there
    (tokenizer.json, its tokenizer_config.json and chat template). A file path means its directory."""
    if path is None:
        return task.CharTokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent if path.is_file() else path))


def tokenizer_vocab_size(tokenizer: Any) -> int:
    """Ids the tokenizer can produce (specials and added tokens included)."""
    if isinstance(tokenizer, task.CharTokenizer):
        return task.VOCAB_SIZE
    return len(tokenizer)


def vocab_size(model: ModelSpec, checkpoint_dir: Path | None) -> int | None:
    """The model's vocabulary without importing JAX: config.json's, else the tiny model's; None for a full
    MaxText model (its vocabulary is in MaxText's model config, read only once MaxText is imported)."""
    if model.backend == "maxtext" and model.size != TINY:
        return None
    if checkpoint_dir is not None:
        hf = json.loads((checkpoint_dir / "config.json").read_text())
        return int(hf.get("text_config", hf)["vocab_size"])
    return task.VOCAB_SIZE


def vllm_model_path(model: ModelSpec, checkpoint_dir: Path | None) -> str:
    """What vLLM loads its config (and, with random init, only its config) from: the local directory the
    checkpoint was fetched to (vLLM cannot read ``gs://``, and ``hf://`` is not a Hub id), else the spec's;
    for MaxText models the Hugging Face directory/id of the tokenizer (a MaxText checkpoint is not one)."""
    if model.backend == "maxtext":
        return model.tokenizerPath or ""
    return str(checkpoint_dir) if checkpoint_dir is not None else model.checkpointPath or ""
