"""The trainer pod template: one pod per TPU host.

GKE TPU rules it follows (``shared/reference/gke-tpu-jobset.md``): TPU node selector and toleration,
``google.com/tpu`` requests = limits = chips per host, host network with ``ClusterFirstWithHostNet``, and
``restartPolicy: Never`` (JobSet would default it to OnFailure, which hides failures from the pod failure
policy). Scheduling fields Kueue may rewrite while the JobSet is suspended live here too, which is why the
operator creates the JobSet once and never re-applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rljob.api.spec import RLJob
from rljob_operator import names
from rljob_operator.capacity import capacity_tolerations
from rljob_operator.env import trainer_env
from rljob_operator.slices import SliceShape


@dataclass(frozen=True)
class RenderOptions:
    """Cluster-level choices that are not the RLJob author's: set by whoever runs the operator (the chart's
    ``trainer.securityContext`` value), the same for every RLJob."""

    trainer_security_context: dict[str, Any] = field(default_factory=dict)
    """securityContext of every trainer container (TPU pods may need ``privileged: true`` on some node
    images); empty = none."""


def pod_labels(job: RLJob) -> dict[str, str]:
    """Labels of every trainer pod: the PodMonitor selects ``rljob.dev/role=trainer``."""
    return {names.LABEL_NAME: job.metadata.name, names.LABEL_ROLE: names.ROLE_TRAINER}


def trainer_container(job: RLJob, shape: SliceShape, options: RenderOptions) -> dict[str, Any]:
    """The single trainer container: the image's entrypoint (tini, then the trainer) with our ``args``."""
    chips = str(shape.chips_per_host)
    container: dict[str, Any] = {
        "name": names.CONTAINER,
        "image": job.spec.image,
        "args": list(names.TRAINER_ARGS),
        "env": trainer_env(job, shape),
        "ports": [
            {"name": names.METRICS_PORT_NAME, "containerPort": job.spec.metrics.port, "protocol": "TCP"}
        ],
        "resources": {"requests": {names.TPU_RESOURCE: chips}, "limits": {names.TPU_RESOURCE: chips}},
        "volumeMounts": [
            {"name": names.CONFIG_VOLUME, "mountPath": names.CONFIG_DIR, "readOnly": True},
            {"name": names.SHM_VOLUME, "mountPath": names.SHM_DIR},
            *(m.model_dump(mode="json", exclude_none=True) for m in job.spec.volumeMounts),
        ],
    }
    if options.trainer_security_context:
        container["securityContext"] = dict(options.trainer_security_context)
    return container


def pod_template(job: RLJob, shape: SliceShape, options: RenderOptions) -> dict[str, Any]:
    """The Job's pod template."""
    metadata: dict[str, Any] = {"labels": pod_labels(job)}
    annotations = pod_annotations(job)
    if annotations:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": job.spec.terminationGracePeriodSeconds,
        # spec.hostNetwork (default, as xpk): the node's network; the cluster's DNS still answers the
        # JobSet's pod names. Off: the pod network (GKE Autopilot).
        **({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"} if job.spec.hostNetwork else {}),
        "nodeSelector": shape.node_selector(),
        "tolerations": [
            {"key": names.TPU_RESOURCE, "operator": "Exists"},
            *capacity_tolerations(job.spec.tpu.capacity),
        ],
        "containers": [trainer_container(job, shape, options)],
        "volumes": pod_volumes(job),
    }
    if job.spec.serviceAccountName:
        spec["serviceAccountName"] = job.spec.serviceAccountName
    if job.spec.priorityClassName:
        spec["priorityClassName"] = job.spec.priorityClassName
    return {"metadata": metadata, "spec": spec}


def pod_volumes(job: RLJob) -> list[dict[str, Any]]:
    """The config, a memory-backed /dev/shm (the runtime's 64 MiB default starves XLA and vLLM), then
    ``spec.volumes``."""
    return [
        {"name": names.CONFIG_VOLUME, "configMap": {"name": names.config_map_name(job.metadata.name)}},
        {"name": names.SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        *(v.model_dump(mode="json", exclude_none=True) for v in job.spec.volumes),
    ]


def pod_annotations(job: RLJob) -> dict[str, str]:
    """``spec.podAnnotations``, plus GKE's Cloud Storage FUSE switch when a volume uses its CSI driver
    (without it GKE injects no sidecar and the mount never appears)."""
    annotations = dict(job.spec.podAnnotations)
    if any(v.csi is not None and v.csi.driver == names.GCSFUSE_DRIVER for v in job.spec.volumes):
        annotations.setdefault(names.GCSFUSE_ANNOTATION, "true")
    return dict(sorted(annotations.items()))
