"""Hand-made hostile RLJobs: each must be refused by ``kubectl apply`` with a message naming the field.

Kept as a Python table rather than YAML files because several cases are generated (100 kB strings, 65
annotations) and each row says, next to the manifest, which field the apiserver must name. Every manifest
is the valid base of ``tests/api/manifests.py`` with one hostile edit, so the refusal is about that edit.

``CREATE_CASES``: refused at creation. ``UPDATE_CASES``: valid on their own, refused as a change to an
RLJob that is already running (the transition rules: every spec field but ``suspend`` is immutable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.api.manifests import BASE, DELETE, merge


@dataclass(frozen=True)
class Hostile:
    id: str
    patch: dict[str, Any]  # deep-merged into the valid base; DELETE removes a key
    field: str  # the field path the refusal must name
    name: str | None = None  # metadata.name override (None: a unique valid name per case)

    def manifest(self, default_name: str) -> dict[str, Any]:
        obj = merge(BASE, self.patch)
        obj["metadata"] = {"name": self.name if self.name is not None else default_name}
        return obj


def spec(patch: dict[str, Any]) -> dict[str, Any]:
    return {"spec": patch}


def tpu(**fields: Any) -> dict[str, Any]:
    return spec({"tpu": fields})


def grpo(**fields: Any) -> dict[str, Any]:
    return spec({"grpo": fields})


CREATE_CASES: list[Hostile] = [
    # --- wrong types
    Hostile("slices as string", tpu(slices="2"), "spec.tpu.slices"),
    Hostile("suspend as string", spec({"suspend": "yes"}), "spec.suspend"),
    Hostile("maxRestarts as bool", spec({"maxRestarts": True}), "spec.maxRestarts"),
    Hostile("image as number", spec({"image": 5}), "spec.image"),
    Hostile("beta as string", grpo(beta="0.1"), "spec.grpo.beta"),
    Hostile("slices as fraction", tpu(slices=1.5), "spec.tpu.slices"),
    Hostile("tpu as list", spec({"tpu": ["tpu-v5-lite-podslice", "2x4"]}), "spec.tpu"),
    Hostile("podAnnotations as list", spec({"podAnnotations": ["a=b"]}), "spec.podAnnotations"),
    Hostile("annotation value as number", spec({"podAnnotations": {"a": 1}}), "spec.podAnnotations"),
    Hostile("spec as string", {"spec": "train please"}, "spec"),
    Hostile("grpo as number", spec({"grpo": 8}), "spec.grpo"),
    # --- missing fields
    Hostile("no spec", {"spec": DELETE}, "spec"),
    Hostile("no image", spec({"image": DELETE}), "spec.image"),
    Hostile("no tpu", spec({"tpu": DELETE}), "spec.tpu"),
    Hostile("no accelerator", tpu(accelerator=DELETE), "spec.tpu.accelerator"),
    Hostile("no topology", tpu(topology=DELETE), "spec.tpu.topology"),
    # --- huge numbers
    Hostile("a million slices", tpu(slices=1_000_000), "spec.tpu.slices"),
    Hostile("2^40 target length", spec({"maxTargetLength": 2**40}), "spec.maxTargetLength"),
    Hostile("seed 2^63", grpo(seed=2**63), "spec.grpo.seed"),
    Hostile("ttl of 30000 years", spec({"ttlSecondsAfterFinished": 10**12}), "spec.ttlSecondsAfterFinished"),
    Hostile("100k generations", grpo(numGenerations=100_000), "spec.grpo.numGenerations"),
    Hostile("learning rate 1e308", grpo(learningRate=1e308), "spec.grpo.learningRate"),
    Hostile("port 65536", spec({"metrics": {"port": 65536}}), "spec.metrics.port"),
    # --- negative numbers
    Hostile("negative slices", tpu(slices=-1), "spec.tpu.slices"),
    Hostile("negative maxRestarts", spec({"maxRestarts": -1}), "spec.maxRestarts"),
    Hostile("negative ttl", spec({"ttlSecondsAfterFinished": -5}), "spec.ttlSecondsAfterFinished"),
    Hostile("negative port", spec({"metrics": {"port": -9464}}), "spec.metrics.port"),
    Hostile("negative beta", grpo(beta=-0.1), "spec.grpo.beta"),
    Hostile("negative prompt length", spec({"maxPrefillPredictLength": -64}), "spec.maxPrefillPredictLength"),
    Hostile("zero learning rate", grpo(learningRate=0), "spec.grpo.learningRate"),
    # --- unknown accelerators
    Hostile("tpu-v9", tpu(accelerator="tpu-v9"), "spec.tpu.accelerator"),
    Hostile("a GPU", tpu(accelerator="nvidia-h100-80gb"), "spec.tpu.accelerator"),
    Hostile("accelerator upper case", tpu(accelerator="TPU-V5-LITE-PODSLICE"), "spec.tpu.accelerator"),
    Hostile("empty accelerator", tpu(accelerator=""), "spec.tpu.accelerator"),
    # --- bad topologies
    Hostile("2D topology on v4", tpu(accelerator="tpu-v4-podslice", topology="2x4"), "spec.tpu.topology"),
    Hostile("0x0", tpu(topology="0x0"), "spec.tpu.topology"),
    Hostile("4 dimensions", tpu(topology="2x2x2x2"), "spec.tpu.topology"),
    Hostile("spaces", tpu(topology="4 x 4"), "spec.tpu.topology"),
    Hostile("negative dimension", tpu(topology="-2x4"), "spec.tpu.topology"),
    Hostile("topology too long", tpu(topology="99999999999999x2"), "spec.tpu.topology"),
    Hostile("2 chips per host", tpu(chipsPerHost=2), "spec.tpu.chipsPerHost"),
    Hostile("multislice of single hosts", tpu(topology="2x2", slices=4), "spec.tpu.slices"),
    # --- names
    Hostile("name of 41", {}, "metadata.name", name="a" * 41),
    Hostile("name of 63", {}, "metadata.name", name="a" * 63),
    Hostile("name of 254", {}, "metadata.name", name="a" * 254),
    Hostile("name upper case", {}, "metadata.name", name="Grpo"),
    Hostile("name with a dot", {}, "metadata.name", name="grpo.demo"),
    Hostile("name starts with digit", {}, "metadata.name", name="1grpo"),
    Hostile("name unicode", {}, "metadata.name", name="grpö"),
    Hostile("name emoji", {}, "metadata.name", name="rocket-\U0001f680"),
    # --- unicode and oversized strings
    Hostile("image of 513", spec({"image": "i" * 513}), "spec.image"),
    Hostile("image of 100 kB", spec({"image": "i" * 100_000}), "spec.image"),
    Hostile("image of 513 two-byte chars", spec({"image": "\u00e9" * 513}), "spec.image"),
    Hostile("empty image", spec({"image": ""}), "spec.image"),
    Hostile("annotation of 4097", spec({"podAnnotations": {"a": "x" * 4097}}), "spec.podAnnotations"),
    Hostile(
        "65 annotations", spec({"podAnnotations": {f"k{i}": "v" for i in range(65)}}), "spec.podAnnotations"
    ),
    Hostile("queue name of 64", spec({"queueName": "q" * 64}), "spec.queueName"),
    Hostile("model size upper case", spec({"model": {"size": "Qwen-8B"}}), "spec.model.size"),
    Hostile("model size unicode", spec({"model": {"size": "\u1e9e"}}), "spec.model.size"),
    Hostile("empty checkpoint directory", spec({"checkpoint": {"directory": ""}}), "spec.checkpoint.directory"),
    Hostile("unknown model family", spec({"model": {"family": "gpt9"}}), "spec.model.family"),
    Hostile("unknown rollout engine", spec({"rollout": {"engine": "sglang"}}), "spec.rollout.engine"),
    # --- unknown fields (typos a user makes)
    Hostile("typo maxSeqTokenPerTPU", spec({"maxSeqTokenPerTPU": 4096}), "spec.maxSeqTokenPerTPU"),
    Hostile("unknown tpu.replicas", tpu(replicas=2), "spec.tpu.replicas"),
    # --- cross-field rules
    Hostile("block size with vanilla", spec({"rollout": {"vllmBlockSize": 32}}), "spec.rollout.vllmBlockSize"),
    Hostile("prompt as long as target", spec({"maxPrefillPredictLength": 256}), "spec.maxPrefillPredictLength"),
    Hostile("packed row too short", spec({"packing": {"maxSeqTokenPerTpu": 255}}), "spec.packing.maxSeqTokenPerTpu"),
    Hostile("TPU runtime port", spec({"metrics": {"port": 8431}}), "spec.metrics.port"),
    Hostile("mini batch does not divide", grpo(batchSize=8, miniBatchSize=3), "spec.grpo.miniBatchSize"),
    Hostile("hbm utilization 0", spec({"rollout": {"hbmUtilization": 0}}), "spec.rollout.hbmUtilization"),
    Hostile("grace period of 1 s", spec({"terminationGracePeriodSeconds": 1}), "spec.terminationGracePeriodSeconds"),
    # --- GKE topology rule
    Hostile("v4 4x4x6", tpu(accelerator="tpu-v4-podslice", topology="4x4x6"), "spec.tpu.topology"),
    Hostile("tpu7x beyond the pod", tpu(accelerator="tpu7x", topology="16x24x32"), "spec.tpu.topology"),
    # --- capacity combinations GKE does not allow
    Hostile("reservation without a name", tpu(capacity={"type": "Reservation"}), "spec.tpu.capacity.reservation"),
    Hostile("spot consuming a reservation", tpu(capacity={"type": "Spot", "reservation": "r"}), "spec.tpu.capacity.reservation"),
    Hostile("flex-start with a reservation", tpu(capacity={"type": "FlexStart", "reservation": "r"}), "spec.tpu.capacity.reservation"),
    Hostile("run duration on on-demand", tpu(capacity={"maxRunDurationSeconds": 3600}), "spec.tpu.capacity.maxRunDurationSeconds"),
    Hostile("capacity type lower case", tpu(capacity={"type": "spot"}), "spec.tpu.capacity.type"),
    # --- env: Secret references to nothing, clashes
    Hostile("secret ref without key", spec({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf"}}}]}), "spec.env[0].valueFrom.secretKeyRef.key"),
    Hostile("secret ref without name", spec({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"key": "k"}}}]}), "spec.env[0].valueFrom.secretKeyRef.name"),
    Hostile("empty valueFrom", spec({"env": [{"name": "T", "valueFrom": {}}]}), "spec.env"),
    Hostile("env without value", spec({"env": [{"name": "T"}]}), "spec.env"),
    Hostile("env redefines RLJOB_", spec({"env": [{"name": "RLJOB_NUM_SLICES", "value": "8"}]}), "spec.env"),
    Hostile("env sets the coordinator", spec({"env": [{"name": "JAX_COORDINATOR_ADDRESS", "value": "x:1"}]}), "spec.env"),
    Hostile("env twice", spec({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}), "spec.env"),
    # --- volumes and mounts
    Hostile("volume names clash", spec({"volumes": [{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]}), "spec.volumes"),
    Hostile("volume named dshm", spec({"volumes": [{"name": "dshm", "emptyDir": {}}]}), "spec.volumes"),
    Hostile("volume with two sources", spec({"volumes": [{"name": "d", "emptyDir": {}, "secret": {"secretName": "s"}}]}), "spec.volumes"),
    Hostile("mount over the config", spec({"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "d", "mountPath": "/etc/rljob"}]}), "spec.volumeMounts"),
    Hostile("mount over /etc", spec({"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "d", "mountPath": "/etc"}]}), "spec.volumeMounts"),
    Hostile("mount of a missing volume", spec({"volumeMounts": [{"name": "nope", "mountPath": "/data"}]}), "spec.volumeMounts"),
    Hostile("mount path with ..", spec({"volumes": [{"name": "d", "emptyDir": {}}], "volumeMounts": [{"name": "d", "mountPath": "/a/../etc/rljob"}]}), "spec.volumeMounts[0].mountPath"),
    Hostile("service account with a slash", spec({"serviceAccountName": "ns/sa"}), "spec.serviceAccountName"),
]  # fmt: skip


@dataclass(frozen=True)
class HostileUpdate:
    id: str
    patch: dict[str, Any]  # a merge patch of the spec of a running RLJob
    field: str  # the spec field the refusal must name ("spec.<field> is immutable after creation")


UPDATE_CASES: list[HostileUpdate] = [
    HostileUpdate("bigger topology", {"tpu": {"topology": "4x4"}}, "spec.tpu"),
    HostileUpdate("more slices", {"tpu": {"slices": 2}}, "spec.tpu"),
    HostileUpdate("new image", {"image": "ghcr.io/example/rljob-trainer:evil"}, "spec.image"),
    HostileUpdate("more restarts", {"maxRestarts": 100}, "spec.maxRestarts"),
    HostileUpdate("add a queue", {"queueName": "team-a"}, "spec.queueName"),
    HostileUpdate("turn packing on", {"packing": {"maxSeqTokenPerTpu": 512}}, "spec.packing"),
    HostileUpdate("new pod annotation", {"podAnnotations": {"kwok.rljob.dev/fail": "1"}}, "spec.podAnnotations"),
    HostileUpdate("longer ttl", {"ttlSecondsAfterFinished": 999}, "spec.ttlSecondsAfterFinished"),
    HostileUpdate("shorter grace period", {"terminationGracePeriodSeconds": 30}, "spec.terminationGracePeriodSeconds"),
    HostileUpdate("switch to spot", {"tpu": {"capacity": {"type": "Spot"}}}, "spec.tpu"),
    HostileUpdate("add an env var", {"env": [{"name": "A", "value": "1"}]}, "spec.env"),
    HostileUpdate("new service account", {"serviceAccountName": "admin"}, "spec.serviceAccountName"),
]  # fmt: skip
