"""Every name, label and annotation the operator writes or reads, in one place.

The renderer, the status code, the handlers and the tests all spell these the same way; a typo in one of
them would silently break scraping, ownership or exclusive placement, so none is written twice.
"""

from __future__ import annotations

from rljob.api import pod
from rljob.api.spec import GROUP

# --- labels rljob puts on what it creates -------------------------------------------------------------
LABEL_NAME = f"{GROUP}/name"
"""The RLJob a ConfigMap, JobSet or pod belongs to (PodMonitor selects trainer pods by it)."""
LABEL_ROLE = f"{GROUP}/role"
ROLE_TRAINER = "trainer"

# --- the trainer container and its config ------------------------------------------------------------
CONTAINER = "trainer"
"""Container name; the pod failure policy's exit-code rule names it."""
CONFIG_KEY = "rljob.yaml"
CONFIG_DIR = pod.CONFIG_DIR
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_KEY}"
CONFIG_VOLUME, SHM_VOLUME = pod.RESERVED_VOLUMES
SHM_DIR = pod.SHM_DIR
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
"""GKE injects the Cloud Storage FUSE sidecar only into pods with this annotation set to "true"."""
TRAINER_ARGS: tuple[str, ...] = ("--config", CONFIG_PATH)
"""The container's ``args``, not its ``command``: the trainer image's ENTRYPOINT is ``tini -- python -m
rljob_trainer`` (Dockerfile), and tini as PID 1 forwards SIGTERM; a ``command`` would replace it and make
Python PID 1, which the kernel shields from SIGTERM until a handler is installed."""
METRICS_PORT_NAME = "metrics"

EXIT_BAD_CONFIG = 2
"""The trainer's exit code for "bad config, don't retry": the Job fails at once and so does the JobSet."""

# --- JobSet ------------------------------------------------------------------------------------------
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_PLURAL = "jobsets"
REPLICATED_JOB = "slice"
"""The one replicated Job: one child Job per TPU slice."""
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"

# labels JobSet and the Job controller put on pods (read through the downward API)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

# --- GKE TPU node labels and resources ---------------------------------------------------------------
TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# --- GKE capacity types (rljob_operator/capacity.py) ----------------------------------------------
SPOT_LABEL = "cloud.google.com/gke-spot"
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"
RESERVATION_AFFINITY_LABEL = "cloud.google.com/reservation-affinity"
RESERVATION_PROJECT_LABEL = "cloud.google.com/reservation-project"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
MAX_RUN_DURATION_LABEL = "cloud.google.com/gke-max-run-duration-seconds"

# --- Kueue -------------------------------------------------------------------------------------------
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""Kueue labels each Workload with the UID of the job (here: the JobSet) it admits."""
KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
"""v1beta2, Kueue's storage version: Kueue v0.17 refuses a patch of a Workload through the deprecated
v1beta1 (its CEL rules fail on the converted object)."""


def config_map_name(rljob_name: str) -> str:
    """The trainer-config ConfigMap of an RLJob (rljob names are <= 40 chars, so this stays short)."""
    return f"{rljob_name}-config"


def jobset_name(rljob_name: str) -> str:
    """The JobSet of an RLJob: the same name, so ``kubectl get jobset <rljob>`` finds it and the pod-name
    budget in ``rljob.api.rules.MAX_NAME_LENGTH`` holds."""
    return rljob_name
