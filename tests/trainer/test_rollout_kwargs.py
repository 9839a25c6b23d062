"""vLLM engine kwargs are built in one function: block_size only when set, memory fraction and dtype always.

Runs without vLLM installed: only the kwargs and Tunix's RolloutConfig are built, no engine.
"""

from __future__ import annotations

from typing import Any

import pytest
from rljob_trainer import rollout

from rljob.api import parse_rljob
from rljob.api.spec import RLJobSpec


def spec(**rollout_fields: Any) -> RLJobSpec:
    doc = {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "t"},
        "spec": {
            "image": "img",
            "model": {"family": "qwen3", "size": "0.6b", "checkpointPath": "/w/qwen3-0.6b"},
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
            "rollout": {"engine": "vllm", **rollout_fields},
        },
    }
    return parse_rljob(doc).spec


def test_block_size_absent_unless_set() -> None:
    kwargs = rollout.vllm_engine_kwargs(spec())
    assert "block_size" not in kwargs
    assert kwargs == {"gpu_memory_utilization": 0.4, "dtype": "bfloat16"}


@pytest.mark.parametrize("block", [8, 16, 128, 1024])
def test_block_size_pinned_when_set(block: int) -> None:
    kwargs = rollout.vllm_engine_kwargs(spec(vllmBlockSize=block))
    assert kwargs["block_size"] == block


def test_memory_fraction_follows_spec() -> None:
    assert rollout.vllm_engine_kwargs(spec(hbmUtilization=0.75))["gpu_memory_utilization"] == 0.75


def test_tiny_model_dtype_is_float32() -> None:
    s = spec().model_copy(
        update={"model": spec().model.model_copy(update={"size": "tiny", "checkpointPath": None})}
    )
    assert rollout.vllm_engine_kwargs(s)["dtype"] == "float32"


def test_vllm_needs_tpu_backend() -> None:
    assert rollout.check_backend(spec(), "tpu") == []
    [err] = rollout.check_backend(spec(), "cpu")
    assert err.startswith("spec.rollout.engine: vllm runs only on TPU")


def test_vanilla_runs_anywhere() -> None:
    s = spec().model_copy(update={"rollout": spec().rollout.model_copy(update={"engine": "vanilla"})})
    assert rollout.check_backend(s, "cpu") == []
    assert rollout.check_rollout_spec(s) == []


def test_tunix_rollout_config_carries_the_kwargs() -> None:
    """Tunix overwrites EngineArgs.gpu_memory_utilization from rollout_vllm_hbm_utilization, so the memory
    fraction must land there; everything else passes through rollout_vllm_kwargs unchanged."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.workload.task import CharTokenizer

    unset = tunix_bridge.rollout_config(spec(hbmUtilization=0.6), CharTokenizer())
    assert unset.rollout_vllm_hbm_utilization == 0.6
    assert unset.rollout_vllm_kwargs == {"dtype": "bfloat16"}
    assert unset.rollout_vllm_model_version == "/w/qwen3-0.6b"
    pinned = tunix_bridge.rollout_config(spec(vllmBlockSize=64), CharTokenizer())
    assert pinned.rollout_vllm_kwargs == {"dtype": "bfloat16", "block_size": 64}


def test_vanilla_rollout_config_has_no_vllm_kwargs() -> None:
    from rljob_trainer import tunix_bridge
    from rljob_trainer.workload.task import EOS_ID, PAD_ID, CharTokenizer

    s = spec().model_copy(update={"rollout": spec().rollout.model_copy(update={"engine": "vanilla"})})
    cfg = tunix_bridge.rollout_config(s, CharTokenizer())
    assert cfg.rollout_vllm_kwargs == {}
    assert cfg.max_prompt_length == 64 and cfg.max_tokens_to_generate == 64 and cfg.kv_cache_size == 128
    assert set(cfg.eos_tokens) == {EOS_ID, PAD_ID}


@pytest.mark.parametrize("uri", ["hf://Qwen/Qwen3-0.6B", "gs://models/qwen3-0.6b"])
def test_vllm_gets_the_downloaded_directory_not_the_uri(uri: str, tmp_path: Any) -> None:
    """vLLM reads the model config from a local directory: the fetched copy, never hf:// or gs://."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.workload.task import CharTokenizer

    s = spec()
    s = s.model_copy(update={"model": s.model.model_copy(update={"checkpointPath": uri})})
    cfg = tunix_bridge.rollout_config(s, CharTokenizer(), checkpoint_dir=tmp_path)
    assert cfg.rollout_vllm_model_version == str(tmp_path)
