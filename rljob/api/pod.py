"""What the trainer pods get besides the trainer: TPU capacity, environment, volumes and their mounts.

Kept to the part of the Kubernetes pod API a TPU trainer needs (an ``EnvVar`` with a value or a Secret/
ConfigMap key, a handful of volume sources), so every field is validated here and at admission like the
rest of the RLJob; the operator renders them (``rljob_operator/pod.py``). Cross-field rules (unique names,
mounts that refer to a volume, reserved paths, capacity combinations) are in ``pod_rules.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rljob.api.base import Model
from rljob.api.kubetypes import DNS_SUBDOMAIN, ObjectName, Size, VolumeName

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""A C identifier. Stricter than Kubernetes (any printable ASCII but '=' since 1.34): the trainer is a
Python process started by a shell-free entrypoint, and such names are what XLA, libtpu and Hugging Face
read."""
ConfigKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^\.?[-_a-zA-Z0-9][-._a-zA-Z0-9]*$")]
"""A Secret or ConfigMap key (IsConfigMapKey): letters, digits, '-', '_' and '.', but not '.' or '..' and
not starting with '..'."""
_SEGMENT = r"([^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+)"  # a path segment other than "." and ".."
AbsolutePath = Annotated[str, Field(min_length=2, max_length=1024, pattern=rf"^(/{_SEGMENT})+$")]
_IN_VOLUME = rf"({_SEGMENT}|\.)"  # "." and empty segments (a//b) are allowed, ".." is not
InVolumePath = Annotated[
    str, Field(min_length=1, max_length=1024, pattern=rf"^{_IN_VOLUME}(/{_IN_VOLUME}?)*$")
]
"""A relative path without ".." elements, as the apiserver's pod validation requires of a subPath
(validateLocalDescendingPath); caught at admission, not when the Job creates the pod."""

CONFIG_DIR = "/etc/rljob"
"""Where the operator mounts the trainer's config (``rljob.yaml``); no user mount may cover it."""
SHM_DIR = "/dev/shm"
"""Always a memory-backed emptyDir (the container runtime's 64 MiB default starves XLA and vLLM)."""
RESERVED_VOLUMES: tuple[str, ...] = ("rljob-config", "dshm")
"""Volume names the operator uses itself."""
RESERVED_ENV: tuple[str, ...] = (
    "JOBSET_NAME",
    "REPLICATED_JOB_NAME",
    "JOB_INDEX",
    "POD_INDEX",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "JAX_COORDINATOR_ADDRESS",
)
"""Variables the operator sets (identity from the downward API), GKE's TPU webhook injects, or that must
not be set on TPU (JAX_COORDINATOR_ADDRESS would override GKE's coordinator discovery). A duplicate would
reach the pod twice, and the later value wins."""
VLLM_ENV: dict[str, str] = {"JAX_PLATFORMS": "tpu,cpu", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""What the operator sets with rollout.engine vllm (vLLM runs in the trainer's process: JAX keeps a CPU
backend for host-side arrays, and vLLM forks no engine processes that would each grab the TPU); reserved
with that engine only (with the JAX sampler, JAX_PLATFORMS is the user's: e.g. cpu on a CPU node)."""
RESERVED_ENV_PREFIXES: tuple[str, ...] = ("RLJOB_", "MEGASCALE_")
"""The operator's own variables (RLJOB_NAME, RLJOB_NUM_SLICES, ...) and the multislice variables JobSet and
GKE set on every multislice pod (MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_NUM_SLICES, ...)."""

MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600
"""Flex-start VMs run at most seven days (GKE "About flex-start provisioning")."""


class CapacitySpec(Model):
    """Which TPU capacity the slices use; rendered into the node selectors and tolerations GKE documents
    for each (GKE: "About TPUs in GKE", "Spot VMs", "Consume reserved zonal resources", "flex-start")."""

    type: Literal["OnDemand", "Spot", "Reservation", "FlexStart"] = "OnDemand"
    """OnDemand (default), Spot (preemptible Spot VMs), Reservation (a named specific reservation) or
    FlexStart (Dynamic Workload Scheduler flex-start VMs, at most 7 days)."""
    reservation: (
        Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")] | None
    ) = None
    """Name of the specific reservation to consume (label cloud.google.com/reservation-name). Only and
    always with type Reservation."""
    reservationProject: (
        Annotated[str, Field(min_length=6, max_length=30, pattern=r"^[a-z][-a-z0-9]*[a-z0-9]$")] | None
    ) = None
    """Project owning a shared reservation (label cloud.google.com/reservation-project). Only with a
    reservation."""
    maxRunDurationSeconds: Annotated[int, Field(ge=600, le=MAX_RUN_DURATION_SECONDS)] | None = None
    """Flex-start only: how long the VMs may run (label cloud.google.com/gke-max-run-duration-seconds)."""


class KeyRef(Model):
    """One key of a Secret or ConfigMap in the RLJob's namespace."""

    name: ObjectName
    """Name of the Secret or ConfigMap."""
    key: ConfigKey
    """Key inside it."""
    optional: bool = False
    """Start the pod even if the object or key is missing (the variable is then unset)."""


class EnvSource(Model):
    """Where a variable's value comes from: exactly one of a Secret key or a ConfigMap key."""

    secretKeyRef: KeyRef | None = None
    """A Secret key (e.g. an HF token)."""
    configMapKeyRef: KeyRef | None = None
    """A ConfigMap key."""


class EnvVar(Model):
    """An environment variable of the trainer container: a literal value or a Secret/ConfigMap key."""

    name: Annotated[str, Field(min_length=1, max_length=128, pattern=ENV_NAME)]
    """Variable name, e.g. XLA_FLAGS or LIBTPU_INIT_ARGS (the operator's own RLJOB_* and identity variables
    are reserved)."""
    value: Annotated[str, Field(max_length=32768)] | None = None
    """Literal value. Exactly one of value and valueFrom."""
    valueFrom: EnvSource | None = None
    """A Secret or ConfigMap key. Exactly one of value and valueFrom."""


class CSIVolume(Model):
    """A CSI ephemeral volume, e.g. Cloud Storage FUSE: driver gcsfuse.csi.storage.gke.io with
    volumeAttributes {bucketName: my-bucket, mountOptions: implicit-dirs}."""

    driver: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]
    """CSI driver name. Lowercase, unlike Kubernetes' check (which lowercases first): the kubelet finds a
    driver by its exact name, and a CSIDriver object's name is a lowercase DNS subdomain."""
    readOnly: bool = False
    """Mount read-only."""
    volumeAttributes: Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=32)] = (
        Field(default_factory=dict)
    )
    """Driver-specific attributes."""


class PVCVolume(Model):
    """An existing PersistentVolumeClaim in the RLJob's namespace."""

    claimName: ObjectName
    """Name of the claim."""
    readOnly: bool = False
    """Mount read-only."""


class SecretVolume(Model):
    """A Secret as files."""

    secretName: ObjectName
    """Name of the Secret."""


class ConfigMapVolume(Model):
    """A ConfigMap as files."""

    name: ObjectName
    """Name of the ConfigMap."""


class EmptyDirVolume(Model):
    """Scratch space that lives as long as the pod (e.g. a JAX compilation cache)."""

    medium: Literal["", "Memory"] = ""
    """"" (node disk) or Memory (tmpfs)."""
    sizeLimit: Size | None = None
    """Size limit, a Kubernetes quantity such as 100Gi, 500M or 10k."""


class Volume(Model):
    """A pod volume: a name and exactly one source."""

    name: VolumeName
    """Volume name, referred to by spec.volumeMounts (rljob-config and dshm are the operator's)."""
    csi: CSIVolume | None = None
    """CSI ephemeral volume (Cloud Storage FUSE and others)."""
    persistentVolumeClaim: PVCVolume | None = None
    """An existing PersistentVolumeClaim."""
    secret: SecretVolume | None = None
    """A Secret as files."""
    configMap: ConfigMapVolume | None = None
    """A ConfigMap as files."""
    emptyDir: EmptyDirVolume | None = None
    """Scratch space."""


class VolumeMount(Model):
    """Where a volume of spec.volumes appears in the trainer container."""

    name: VolumeName
    """Name of a volume in spec.volumes."""
    mountPath: AbsolutePath
    """Absolute path; not /etc/rljob (the trainer's config) nor /dev/shm (always mounted)."""
    readOnly: bool = False
    """Mount read-only."""
    subPath: InVolumePath | None = None
    """Mount only this path inside the volume: relative, without ".." elements."""


VOLUME_SOURCES: tuple[str, ...] = ("csi", "persistentVolumeClaim", "secret", "configMap", "emptyDir")
