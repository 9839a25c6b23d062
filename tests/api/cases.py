"""Shared RLJob test cases: for every rule, a passing and a failing edit of the valid base manifest
(``manifests.py``). The slice's cases are in ``cases_tpu.py`` and the trainer pod's in ``cases_pod.py``,
like the rules they check (``rljob/api/tpu_rules.py``, ``pod_rules.py``); ``RULE_CASES`` gathers them."""

from __future__ import annotations

from typing import Any

from tests.api.cases_kube import KUBE_CASES
from tests.api.cases_pod import POD_CASES
from tests.api.cases_tpu import TPU_CASES
from tests.api.manifests import BASE, DELETE, WORKLOAD, manifest, merge

# (id, manifest, the field path the error must name, or None when the manifest is valid)
RULE_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("base is valid", manifest(), None),
    ("name at limit", manifest(name="a" * 40), None),
    ("name too long", manifest(name="a" * 41), "metadata.name"),
    ("name not a DNS label", manifest(name="Grpo.demo"), "metadata.name"),
    ("name starts with digit", manifest(name="1grpo"), "metadata.name"),
    ("prompt shorter than target", manifest({"maxPrefillPredictLength": 255}), None),
    ("prompt equals target", manifest({"maxPrefillPredictLength": 256}), "spec.maxPrefillPredictLength"),
    ("unpacked", manifest({"packing": {"maxSeqTokenPerTpu": 0}}), None),
    ("row holds a whole sequence", manifest({"packing": {"maxSeqTokenPerTpu": 256}}), None),
    ("row too short", manifest({"packing": {"maxSeqTokenPerTpu": 255}}), "spec.packing.maxSeqTokenPerTpu"),
    ("row a multiple of 128", manifest({"packing": {"maxSeqTokenPerTpu": 384}}), None),
    (
        "row not a multiple of 128",
        manifest({"packing": {"maxSeqTokenPerTpu": 320}}),
        "spec.packing.maxSeqTokenPerTpu",
    ),
    (
        "row long but unaligned",
        manifest({"packing": {"maxSeqTokenPerTpu": 1_048_575}}),
        "spec.packing.maxSeqTokenPerTpu",
    ),
    ("block size with vllm", manifest({"rollout": {"engine": "vllm", "vllmBlockSize": 32}}), None),
    ("block size with vanilla", manifest({"rollout": {"vllmBlockSize": 32}}), "spec.rollout.vllmBlockSize"),
    (
        "block size not a power of 2",
        manifest({"rollout": {"engine": "vllm", "vllmBlockSize": 48}}),
        "spec.rollout.vllmBlockSize",
    ),
    (
        "block size too small",
        manifest({"rollout": {"engine": "vllm", "vllmBlockSize": 4}}),
        "spec.rollout.vllmBlockSize",
    ),
    *TPU_CASES,
    ("tunix backend", manifest({"model": {"backend": "tunix", "family": "llama3"}}), None),
    (
        "maxtext backend",
        manifest({"model": {"backend": "maxtext", "size": "full", "maxtext": {"modelName": "qwen3-8b"}}}),
        None,
    ),
    (
        "maxtext tiny with overrides",
        manifest(
            {
                "model": {
                    "backend": "maxtext",
                    "maxtext": {"modelName": "llama3.1-8b", "overrides": {"remat_policy": "full"}},
                }
            }
        ),
        None,
    ),
    ("maxtext without its model", manifest({"model": {"backend": "maxtext"}}), "spec.model.maxtext"),
    (
        "maxtext model on the tunix backend",
        manifest({"model": {"maxtext": {"modelName": "qwen3-8b"}}}),
        "spec.model.maxtext",
    ),
    (
        "maxtext with a tunix size",
        manifest({"model": {"backend": "maxtext", "size": "8b", "maxtext": {"modelName": "qwen3-8b"}}}),
        "spec.model.size",
    ),
    ("mini divides batch", manifest({"grpo": {"batchSize": 8, "miniBatchSize": 4}}), None),
    (
        "mini does not divide batch",
        manifest({"grpo": {"batchSize": 8, "miniBatchSize": 3}}),
        "spec.grpo.miniBatchSize",
    ),
    (
        "micro divides mini",
        manifest({"grpo": {"batchSize": 8, "miniBatchSize": 4, "microBatchSize": 2}}),
        None,
    ),
    (
        "micro does not divide mini",
        manifest({"grpo": {"batchSize": 8, "miniBatchSize": 4, "microBatchSize": 3}}),
        "spec.grpo.microBatchSize",
    ),
    ("micro divides batch", manifest({"grpo": {"batchSize": 6, "microBatchSize": 3}}), None),
    (
        "micro does not divide batch",
        manifest({"grpo": {"batchSize": 6, "microBatchSize": 4}}),
        "spec.grpo.microBatchSize",
    ),
    ("one generation", manifest({"grpo": {"numGenerations": 1}}), "spec.grpo.numGenerations"),
    ("metrics port ok", manifest({"metrics": {"port": 9464}}), None),
    ("metrics port 8431", manifest({"metrics": {"port": 8431}}), "spec.metrics.port"),
    ("metrics port 8476", manifest({"metrics": {"port": 8476}}), "spec.metrics.port"),
    ("metrics port 8482", manifest({"metrics": {"port": 8482}}), "spec.metrics.port"),
    ("metrics port 8080", manifest({"metrics": {"port": 8080}}), "spec.metrics.port"),
    ("metrics port privileged", manifest({"metrics": {"port": 80}}), "spec.metrics.port"),
    ("metrics port node-exporter", manifest({"metrics": {"port": 9100}}), "spec.metrics.port"),
    ("metrics port kubelet", manifest({"metrics": {"port": 10250}}), "spec.metrics.port"),
    ("metrics port kube-proxy", manifest({"metrics": {"port": 10256}}), "spec.metrics.port"),
    ("metrics port next to node-exporter", manifest({"metrics": {"port": 9101}}), None),
    ("negative learning rate", manifest({"grpo": {"learningRate": -1e-3}}), "spec.grpo.learningRate"),
    (
        "hbm utilization above 1",
        manifest({"rollout": {"hbmUtilization": 1.5}}),
        "spec.rollout.hbmUtilization",
    ),
    ("unknown spec field", manifest({"maxSeqTokenPerTPU": 4}), "spec.maxSeqTokenPerTPU"),
    ("missing image", merge(BASE, {"spec": {"image": DELETE}}), "spec.image"),
    ("missing tpu", merge(BASE, {"spec": {"tpu": DELETE}}), "spec.tpu"),
    ("image wrong type", manifest({"image": 5}), "spec.image"),
    ("unknown model family", manifest({"model": {"family": "gpt9"}}), "spec.model.family"),
    # spec.model sources: local, gs:// and hf:// (form only; existence is the trainer's start-up check)
    ("checkpoint local", manifest({"model": {"checkpointPath": "/ckpt/qwen3"}}), None),
    ("checkpoint relative", manifest({"model": {"checkpointPath": "ckpt/qwen3"}}), None),
    ("checkpoint gs", manifest({"model": {"checkpointPath": "gs://my-bucket/models/qwen3-8b"}}), None),
    ("checkpoint hf", manifest({"model": {"checkpointPath": "hf://Qwen/Qwen3-0.6B"}}), None),
    ("checkpoint hf revision", manifest({"model": {"checkpointPath": "hf://Qwen/Qwen3-0.6B@main"}}), None),
    (
        "checkpoint hf no org",
        manifest({"model": {"checkpointPath": "hf://Qwen3"}}),
        "spec.model.checkpointPath",
    ),
    ("checkpoint s3", manifest({"model": {"checkpointPath": "s3://b/k"}}), "spec.model.checkpointPath"),
    (
        "checkpoint gs no bucket",
        manifest({"model": {"checkpointPath": "gs://"}}),
        "spec.model.checkpointPath",
    ),
    ("checkpoints to gs", manifest({"checkpoint": {"directory": "gs://my-bucket/runs/a"}}), None),
    ("checkpoints to a local path", manifest({"checkpoint": {"directory": "/ckpt/a"}}), None),
    ("checkpoints to s3", manifest({"checkpoint": {"directory": "s3://b/k"}}), "spec.checkpoint.directory"),
    (
        "checkpoints to gs no bucket",
        manifest({"checkpoint": {"directory": "gs://"}}),
        "spec.checkpoint.directory",
    ),
    (
        "compilation cache to s3",
        manifest({"compilationCache": {"directory": "s3://b/xla"}}),
        "spec.compilationCache.directory",
    ),
    ("compilation cache to gs", manifest({"compilationCache": {"directory": "gs://my-bucket/xla"}}), None),
    ("tokenizer hf", manifest({"model": {"tokenizerPath": "hf://Qwen/Qwen3-0.6B"}}), None),
    (
        "tokenizer https",
        manifest({"model": {"tokenizerPath": "https://x/t.json"}}),
        "spec.model.tokenizerPath",
    ),
    # spec.data and spec.rewards
    ("data with reward", manifest(WORKLOAD), None),
    (
        "hub dataset without org",
        manifest(merge(WORKLOAD, {"data": {"source": "hf://datasets/gsm8k@v1"}})),
        None,
    ),
    ("gs dataset", manifest(merge(WORKLOAD, {"data": {"source": "gs://my-bucket/data/train.jsonl"}})), None),
    ("local dataset", manifest(merge(WORKLOAD, {"data": {"source": "examples/tiny/emit.jsonl"}})), None),
    (
        "hub model as dataset",
        manifest(merge(WORKLOAD, {"data": {"source": "hf://openai/gsm8k"}})),
        "spec.data.source",
    ),
    (
        "gs bucket only dataset",
        manifest(merge(WORKLOAD, {"data": {"source": "gs://bucket"}})),
        "spec.data.source",
    ),
    ("data without source", manifest(merge(WORKLOAD, {"data": {"source": DELETE}})), "spec.data.source"),
    ("zero max examples", manifest(merge(WORKLOAD, {"data": {"maxExamples": 0}})), "spec.data.maxExamples"),
    ("data without rewards", manifest({"data": {"source": "d.jsonl"}}), "spec.rewards"),
    ("rewards without data", manifest({"rewards": [{"name": "exactMatch"}]}), "spec.rewards"),
    ("unknown reward", manifest(merge(WORKLOAD, {"rewards": [{"name": "bleu"}]})), "spec.rewards[0].name"),
    ("custom reward", manifest(merge(WORKLOAD, {"rewards": [{"function": "my.rewards:score"}]})), None),
    (
        "custom reward no colon",
        manifest(merge(WORKLOAD, {"rewards": [{"function": "my.score"}]})),
        "spec.rewards[0].function",
    ),
    (
        "reward name and function",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "exactMatch", "function": "m:f"}]})),
        "spec.rewards",
    ),
    ("reward with neither", manifest(merge(WORKLOAD, {"rewards": [{"weight": 2.0}]})), "spec.rewards"),
    (
        "regex reward",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "regex", "pattern": "<answer>"}]})),
        None,
    ),
    ("regex without pattern", manifest(merge(WORKLOAD, {"rewards": [{"name": "regex"}]})), "spec.rewards"),
    (
        "pattern on exactMatch",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "exactMatch", "pattern": "x"}]})),
        "spec.rewards",
    ),
    (
        "length penalty",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "lengthPenalty", "maxLength": 200}]})),
        None,
    ),
    (
        "length penalty without max",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "lengthPenalty"}]})),
        "spec.rewards",
    ),
    (
        "max length on custom",
        manifest(merge(WORKLOAD, {"rewards": [{"function": "m:f", "maxLength": 3}]})),
        "spec.rewards",
    ),
    (
        "reward timeout",
        manifest(merge(WORKLOAD, {"rewards": [{"function": "m:f", "timeoutSeconds": 86400}]})),
        None,
    ),
    (
        "zero reward timeout",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "exactMatch", "timeoutSeconds": 0}]})),
        "spec.rewards[0].timeoutSeconds",
    ),
    (
        "reward timeout over a day",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "exactMatch", "timeoutSeconds": 86401}]})),
        "spec.rewards[0].timeoutSeconds",
    ),
    (
        "too many rewards",
        manifest(merge(WORKLOAD, {"rewards": [{"name": "exactMatch"}] * 17})),
        "spec.rewards",
    ),
    ("unknown backend", manifest({"model": {"backend": "torch"}}), "spec.model.backend"),
    (
        "maxtext model name not a name",
        manifest({"model": {"backend": "maxtext", "maxtext": {"modelName": "../qwen3"}}}),
        "spec.model.maxtext.modelName",
    ),
    *POD_CASES,
    *KUBE_CASES,
]
