"""Shared RLJob test cases: a valid base manifest and, for every rule, a passing and a failing edit."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "apiVersion": "rljob.dev/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "grpo-demo"},
    "spec": {
        "image": "ghcr.io/example/rljob-trainer:0.1.0",
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
        "maxPrefillPredictLength": 64,
        "maxTargetLength": 256,
    },
}


WORKLOAD: dict[str, Any] = {
    "data": {"source": "hf://datasets/openai/gsm8k", "config": "main", "promptField": "question"},
    "rewards": [{"name": "mathAnswer"}],
}
"""A valid spec.data + spec.rewards patch (GSM8K with a math reward)."""


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``patch`` into a copy of ``base``; a value of ``DELETE`` removes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


DELETE = object()


def manifest(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """BASE with a spec patch and metadata overrides."""
    return merge(BASE, {"spec": spec or {}, "metadata": metadata})


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
    ("v5e 2D topology", manifest({"tpu": {"topology": "4x8"}}), None),
    ("v5e 3D topology", manifest({"tpu": {"topology": "2x2x2"}}), "spec.tpu.topology"),
    ("v5e unknown topology", manifest({"tpu": {"topology": "3x3"}}), "spec.tpu.topology"),
    ("v4 3D topology", manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x4"}}), None),
    (
        "v4 2D topology",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x4"}}),
        "spec.tpu.topology",
    ),
    ("v5p 16x16x24", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "16x16x24"}}), None),
    ("v5p 2x4", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "2x4"}}), "spec.tpu.topology"),
    ("v7x 2x2x2", manifest({"tpu": {"accelerator": "tpu7x", "topology": "2x2x2"}}), None),
    ("v7x 16x16x24", manifest({"tpu": {"accelerator": "tpu7x", "topology": "16x16x24"}}), None),
    (
        "v7x 16x24x32 over the pod",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "16x24x32"}}),
        "spec.tpu.topology",
    ),
    ("v7x 1x1x1", manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1"}}), None),
    (
        "v7x 1x1x1 with 1 chip",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1", "chipsPerHost": 1}}),
        None,
    ),
    ("v5p 12x12x12", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "12x12x12"}}), None),
    ("v5p 4x4x12", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "4x4x12"}}), None),
    (
        "v5p 1x1x1",
        manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "1x1x1"}}),
        "spec.tpu.topology",
    ),
    ("v4 8x8x12", manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "8x8x12"}}), None),
    (
        "v4 4x4x6 not a cube multiple",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "4x4x6"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 8x4x4 out of order",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "8x4x4"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 04x4x4 leading zero",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "04x4x4"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 16x16x20 over the pod",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "16x16x20"}}),
        "spec.tpu.topology",
    ),
    (
        "multislice v5p 4x4x12",
        manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "4x4x12", "slices": 2}}),
        None,
    ),
    (
        "multislice v7x 1x1x1",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1", "slices": 2}}),
        "spec.tpu.slices",
    ),
    ("v6e 16x16", manifest({"tpu": {"accelerator": "tpu-v6e-slice", "topology": "16x16"}}), None),
    (
        "v6e 2x2x1",
        manifest({"tpu": {"accelerator": "tpu-v6e-slice", "topology": "2x2x1"}}),
        "spec.tpu.topology",
    ),
    ("topology not AxB", manifest({"tpu": {"topology": "2by4"}}), "spec.tpu.topology"),
    ("unknown accelerator", manifest({"tpu": {"accelerator": "tpu-v9"}}), "spec.tpu.accelerator"),
    ("8-chip host on v5e 2x4", manifest({"tpu": {"chipsPerHost": 8}}), None),
    ("4-chip hosts on v5e 2x4", manifest({"tpu": {"chipsPerHost": 4}}), None),
    (
        "8-chip host on 4x4",
        manifest({"tpu": {"topology": "4x4", "chipsPerHost": 8}}),
        "spec.tpu.chipsPerHost",
    ),
    (
        "8-chip host on v4",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x2", "chipsPerHost": 8}}),
        "spec.tpu.chipsPerHost",
    ),
    ("1 chip on 1x1", manifest({"tpu": {"topology": "1x1", "chipsPerHost": 1}}), None),
    ("1 chip on 2x2", manifest({"tpu": {"topology": "2x2", "chipsPerHost": 1}}), "spec.tpu.chipsPerHost"),
    ("multislice multi-host", manifest({"tpu": {"slices": 4}}), None),
    ("multislice single-host 2x2", manifest({"tpu": {"topology": "2x2", "slices": 2}}), "spec.tpu.slices"),
    ("multislice 8-chip host", manifest({"tpu": {"chipsPerHost": 8, "slices": 2}}), "spec.tpu.slices"),
    (
        "multislice v4 2x2x1",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x1", "slices": 2}}),
        "spec.tpu.slices",
    ),
    ("zero slices", manifest({"tpu": {"slices": 0}}), "spec.tpu.slices"),
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
]

_GCS = {
    "name": "data",
    "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}},
}
_SECRET_ENV = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}


def capacity(**fields: Any) -> dict[str, Any]:
    return manifest({"tpu": {"capacity": fields}})


RULE_CASES += [
    # capacity: what GKE lets each capacity type carry
    ("spot", capacity(type="Spot"), None),
    ("reservation by name", capacity(type="Reservation", reservation="res-a"), None),
    (
        "shared reservation",
        capacity(type="Reservation", reservation="res-a", reservationProject="proj-b"),
        None,
    ),
    ("flex-start for a day", capacity(type="FlexStart", maxRunDurationSeconds=86400), None),
    ("reservation without name", capacity(type="Reservation"), "spec.tpu.capacity.reservation"),
    ("spot with a reservation", capacity(type="Spot", reservation="res-a"), "spec.tpu.capacity.reservation"),
    (
        "flex-start with a reservation",
        capacity(type="FlexStart", reservation="r"),
        "spec.tpu.capacity.reservation",
    ),
    (
        "project without reservation",
        capacity(reservationProject="proj-b"),
        "spec.tpu.capacity.reservationProject",
    ),
    (
        "run duration on spot",
        capacity(type="Spot", maxRunDurationSeconds=3600),
        "spec.tpu.capacity.maxRunDurationSeconds",
    ),
    (
        "flex-start over 7 days",
        capacity(type="FlexStart", maxRunDurationSeconds=604801),
        "spec.tpu.capacity.maxRunDurationSeconds",
    ),
    ("unknown capacity type", capacity(type="Preemptible"), "spec.tpu.capacity.type"),
    # env
    ("env value and secret", manifest({"env": [{"name": "XLA_FLAGS", "value": "--x"}, _SECRET_ENV]}), None),
    (
        "env configmap key",
        manifest({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}),
        None,
    ),
    (
        "env secret ref without key",
        manifest({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}),
        "spec.env[0].valueFrom.secretKeyRef.key",
    ),
    (
        "env secret ref without name",
        manifest({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"key": "k"}}}]}),
        "spec.env[0].valueFrom.secretKeyRef.name",
    ),
    ("env without value", manifest({"env": [{"name": "A"}]}), "spec.env"),
    ("env value and valueFrom", manifest({"env": [{**_SECRET_ENV, "value": "x"}]}), "spec.env"),
    ("env empty valueFrom", manifest({"env": [{"name": "A", "valueFrom": {}}]}), "spec.env"),
    (
        "env two sources",
        manifest(
            {
                "env": [
                    {
                        "name": "A",
                        "valueFrom": {
                            "secretKeyRef": {"name": "s", "key": "k"},
                            "configMapKeyRef": {"name": "c", "key": "k"},
                        },
                    }
                ]
            }
        ),
        "spec.env",
    ),
    (
        "env name twice",
        manifest({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
        "spec.env",
    ),
    ("env operator's name", manifest({"env": [{"name": "RLJOB_NUM_SLICES", "value": "9"}]}), "spec.env"),
    ("env coordinator", manifest({"env": [{"name": "JAX_COORDINATOR_ADDRESS", "value": "h:1"}]}), "spec.env"),
    ("env name with =", manifest({"env": [{"name": "A=B", "value": "1"}]}), "spec.env[0].name"),
    # volumes and mounts
    (
        "gcs fuse mounted",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
        None,
    ),
    (
        "cache on emptyDir",
        manifest(
            {
                "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "100Gi"}}],
                "volumeMounts": [{"name": "cache", "mountPath": "/home/rljob/.cache/jax"}],
            }
        ),
        None,
    ),
    ("volume names clash", manifest({"volumes": [_GCS, {"name": "data", "emptyDir": {}}]}), "spec.volumes"),
    (
        "volume named like the config",
        manifest({"volumes": [{"name": "rljob-config", "emptyDir": {}}]}),
        "spec.volumes",
    ),
    ("volume without source", manifest({"volumes": [{"name": "v"}]}), "spec.volumes"),
    (
        "volume with two sources",
        manifest({"volumes": [{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]}),
        "spec.volumes",
    ),
    (
        "mount of no volume",
        manifest({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}),
        "spec.volumeMounts",
    ),
    (
        "mount over the config",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/etc/rljob"}]}),
        "spec.volumeMounts",
    ),
    (
        "mount inside the config",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/etc/rljob/x"}]}),
        "spec.volumeMounts",
    ),
    (
        "mount above the config",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/etc"}]}),
        "spec.volumeMounts",
    ),
    (
        "mount next to the config",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/etc/rljob2"}]}),
        None,
    ),
    (
        "mount over shm",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/dev/shm"}]}),
        "spec.volumeMounts",
    ),
    (
        "two mounts one path",
        manifest(
            {
                "volumes": [_GCS],
                "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "data", "mountPath": "/d"}],
            }
        ),
        "spec.volumeMounts",
    ),
    (
        "mount path with ..",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "/x/../etc/rljob"}]}),
        "spec.volumeMounts[0].mountPath",
    ),
    (
        "relative mount path",
        manifest({"volumes": [_GCS], "volumeMounts": [{"name": "data", "mountPath": "data"}]}),
        "spec.volumeMounts[0].mountPath",
    ),
    ("service account", manifest({"serviceAccountName": "trainer-wi"}), None),
    ("service account upper case", manifest({"serviceAccountName": "Trainer"}), "spec.serviceAccountName"),
]
