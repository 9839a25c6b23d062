"""The JobSet: one replicated Job ``slice`` with one child Job per TPU slice.

JobSet-level rules (``shared/reference/gke-tpu-jobset.md``): exclusive placement maps each slice's Job to
its own node pool (multi-host slices and multislice only); DNS hostnames with not-ready addresses published, so JAX's coordinator resolves before
every host is ready; success when every slice succeeds; the finished JobSet is deleted after the TTL (the
RLJob keeps the outcome in its status); the Kueue queue label goes on the JobSet.
"""

from __future__ import annotations

from typing import Any

from rljob.api.spec import RLJob
from rljob_operator import names
from rljob_operator.failure import jobset_failure_policy, pod_failure_policy
from rljob_operator.pod import RenderOptions, pod_template
from rljob_operator.slices import SliceShape


def owned_labels(job: RLJob) -> dict[str, str]:
    """Labels on everything the operator creates for an RLJob."""
    return {names.LABEL_NAME: job.metadata.name}


def created_suspended(job: RLJob) -> bool:
    """Whether the JobSet starts suspended: when the user says so, or when Kueue is to admit it (Kueue
    unsuspends admitted workloads; a queued JobSet created running would start before admission)."""
    return job.spec.suspend or job.spec.queueName is not None


def queue_labels(job: RLJob) -> dict[str, str]:
    """The Kueue queue label, which hands the JobSet to Kueue. Left off while the RLJob is suspended: Kueue
    would admit and start it at once (a suspended JobSet is only "not admitted yet" to Kueue); the
    operator adds it when the user resumes (``reconcile.toggle_suspend``)."""
    if job.spec.queueName and not job.spec.suspend:
        return {names.QUEUE_LABEL: job.spec.queueName}
    return {}


def exclusive_placement(shape: SliceShape) -> bool:
    """One slice per node pool, where that matters: a multi-host slice must not share its pool's hosts
    with another job's pods, and several slices must land on different pools. A single-host slice takes
    one whole node through its ``google.com/tpu`` request already; exclusivity would let a single-host
    pool run only one RLJob at a time."""
    return shape.hosts > 1 or shape.slices > 1


def slice_job_template(job: RLJob, shape: SliceShape, options: RenderOptions) -> dict[str, Any]:
    """The child Job of one slice: an Indexed Job of ``hosts`` pods that fails on the first pod failure."""
    return {
        "metadata": {"labels": owned_labels(job)},
        "spec": {
            "parallelism": shape.hosts,
            "completions": shape.hosts,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "podFailurePolicy": pod_failure_policy(),
            "template": pod_template(job, shape, options),
        },
    }


def jobset(job: RLJob, shape: SliceShape, options: RenderOptions) -> dict[str, Any]:
    """The JobSet manifest."""
    labels = owned_labels(job) | queue_labels(job)
    metadata: dict[str, Any] = {"name": names.jobset_name(job.metadata.name)}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    metadata["labels"] = labels
    if exclusive_placement(shape):
        metadata["annotations"] = {names.EXCLUSIVE_TOPOLOGY: names.NODEPOOL_LABEL}
    spec: dict[str, Any] = {
        "suspend": created_suspended(job),
        "ttlSecondsAfterFinished": job.spec.ttlSecondsAfterFinished,
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All"},
        "failurePolicy": jobset_failure_policy(job),
        "replicatedJobs": [
            {
                "name": names.REPLICATED_JOB,
                "replicas": shape.slices,
                "template": slice_job_template(job, shape, options),
            }
        ],
    }
    return {"apiVersion": names.JOBSET_API_VERSION, "kind": "JobSet", "metadata": metadata, "spec": spec}
