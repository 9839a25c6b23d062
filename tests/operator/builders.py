"""Builders for operator test inputs: ``make_rljob("x").tpu("tpu-v6e-slice", "4x4").slices(2).obj()``.

Each method returns the builder, so a test states only what it is about; ``obj()`` validates through the
real model (an invalid combination fails loudly in the test, not in the code under test). ``jobset()``
builds the JobSet status side for the status tests.
"""

from __future__ import annotations

import copy
from typing import Any

from rljob.api import parse_rljob
from rljob.api.spec import RLJob


class RLJobBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._m: dict[str, Any] = {
            "apiVersion": "rljob.dev/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {
                "image": "us-docker.pkg.dev/rljob/rljob/trainer:0.1.0",
                "tpu": {"accelerator": "tpu-v6e-slice", "topology": "4x4"},
            },
        }

    def _set(self, path: str, value: Any) -> RLJobBuilder:
        node = self._m
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
        return self

    def tpu(self, accelerator: str, topology: str, chips_per_host: int | None = None) -> RLJobBuilder:
        self._set("spec.tpu.accelerator", accelerator)._set("spec.tpu.topology", topology)
        if chips_per_host is not None:
            self._set("spec.tpu.chipsPerHost", chips_per_host)
        return self

    def slices(self, n: int) -> RLJobBuilder:
        return self._set("spec.tpu.slices", n)

    def suspend(self, value: bool = True) -> RLJobBuilder:
        return self._set("spec.suspend", value)

    def queue(self, name: str) -> RLJobBuilder:
        return self._set("spec.queueName", name)

    def priority_class(self, name: str) -> RLJobBuilder:
        return self._set("spec.priorityClassName", name)

    def packing(self, max_seq_token_per_tpu: int) -> RLJobBuilder:
        return self._set("spec.packing.maxSeqTokenPerTpu", max_seq_token_per_tpu)

    def vllm(self, block_size: int | None = None) -> RLJobBuilder:
        self._set("spec.rollout.engine", "vllm")
        if block_size is not None:
            self._set("spec.rollout.vllmBlockSize", block_size)
        return self

    def max_restarts(self, n: int) -> RLJobBuilder:
        return self._set("spec.maxRestarts", n)

    def ttl(self, seconds: int) -> RLJobBuilder:
        return self._set("spec.ttlSecondsAfterFinished", seconds)

    def pod_annotation(self, key: str, value: str) -> RLJobBuilder:
        self._m["spec"].setdefault("podAnnotations", {})[key] = value
        return self

    def metrics_port(self, port: int) -> RLJobBuilder:
        return self._set("spec.metrics.port", port)

    def generation(self, n: int) -> RLJobBuilder:
        return self._set("metadata.generation", n)

    def status(self, **fields: Any) -> RLJobBuilder:
        self._m.setdefault("status", {}).update(fields)
        return self

    def set(self, path: str, value: Any) -> RLJobBuilder:
        """Any other field, by dotted path (``set("spec.grpo.beta", 0.0)``)."""
        return self._set(path, value)

    def manifest(self) -> dict[str, Any]:
        return copy.deepcopy(self._m)

    def obj(self) -> RLJob:
        return parse_rljob(self.manifest())


def make_rljob(name: str = "x", namespace: str = "default") -> RLJobBuilder:
    return RLJobBuilder(name, namespace)


class JobSetBuilder:
    """A JobSet as the apiserver returns it, with only the fields the status code reads."""

    def __init__(self, name: str = "x", slices: int = 1) -> None:
        self._slices = slices
        self._m: dict[str, Any] = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"suspend": False},
            "status": {},
        }

    def suspended(self, value: bool = True) -> JobSetBuilder:
        self._m["spec"]["suspend"] = value
        return self

    def restarts(self, n: int) -> JobSetBuilder:
        self._m["status"]["restarts"] = n
        return self

    def jobs(self, *, active: int = 0, ready: int = 0, succeeded: int = 0, failed: int = 0) -> JobSetBuilder:
        self._m["status"]["replicatedJobsStatus"] = [
            {
                "name": "slice",
                "active": active,
                "ready": ready,
                "succeeded": succeeded,
                "failed": failed,
                "suspended": 0,
            }
        ]
        return self

    def running(self) -> JobSetBuilder:
        return self.jobs(active=self._slices, ready=self._slices)

    def condition(
        self,
        type_: str,
        status: str = "True",
        reason: str = "",
        message: str = "",
        at: str = "2025-01-01T01:00:00Z",
    ) -> JobSetBuilder:
        self._m["status"].setdefault("conditions", []).append(
            {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}
        )
        return self

    def completed(self, at: str = "2025-01-01T01:00:00Z") -> JobSetBuilder:
        self._m["status"]["terminalState"] = "Completed"
        return self.condition("Completed", reason="AllJobsCompleted", message="jobset completed", at=at)

    def failed(
        self,
        reason: str = "ReachedMaxRestarts",
        message: str = "jobset failed due to reaching max number of restarts",
        at: str = "2025-01-01T01:00:00Z",
    ) -> JobSetBuilder:
        self._m["status"]["terminalState"] = "Failed"
        return self.condition("Failed", reason=reason, message=message, at=at)

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._m)


def make_jobset(name: str = "x", slices: int = 1) -> JobSetBuilder:
    return JobSetBuilder(name, slices)
