"""The RLJob model: the single source of truth for the API.

The CRD schema (``crds/``), its CEL rules and the field reference in ``docs/api.md`` are generated from
these classes (``rljob crd``), and the operator and the trainer both read RLJobs through them. Field
docstrings become the CRD's descriptions, so ``kubectl explain rljob.spec.packing`` shows them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rljob.api.base import Model
from rljob.api.kubetypes import Annotations, Image, ObjectName, QueueName
from rljob.api.maxtext import BACKENDS, MaxTextSpec
from rljob.api.pod import CapacitySpec, EnvVar, Volume, VolumeMount
from rljob.api.progress import Progress
from rljob.api.rules import violations
from rljob.api.tpu import ACCELERATORS
from rljob.api.workload import DataSpec, ModelSource, RewardSpec, StoragePath

GROUP = "rljob.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RLJob"
PLURAL = "rljobs"
SINGULAR = "rljob"
SHORT_NAMES = ("rlj",)

Accelerator = Literal[ACCELERATORS]  # type: ignore[valid-type]
Backend = Literal[BACKENDS]  # type: ignore[valid-type]
Phase = Literal["Pending", "Queued", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]
TERMINAL_PHASES: tuple[str, ...] = ("Succeeded", "Failed")


class ModelSpec(Model):
    """Which model to train: a Tunix model family and size (or a MaxText model), and where its weights
    live."""

    backend: Backend = "tunix"
    """Model implementation: tunix (Tunix's models: family + size) or maxtext (MaxText's decoders through
    MaxText's Tunix adapter: spec.model.maxtext; a separate Python 3.12 trainer image, docs/maxtext.md)."""
    maxtext: MaxTextSpec | None = None
    """The MaxText model, required with backend maxtext (then family is unused, size is tiny or full and
    checkpointPath is MaxText's load_parameters_path)."""
    family: Literal["qwen3", "qwen2", "llama3", "gemma3"] = "qwen3"
    """Model family, one of Tunix's model implementations (tunix.models.<family>)."""
    size: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")] = "tiny"
    """Size or config name, e.g. "0.6b", "8b", or "tiny" (a random 2-layer model for CPU demos and tests)."""
    checkpointPath: ModelSource | None = None
    """Hugging Face-format weights (config.json + *.safetensors) to start from: a local directory,
    gs://bucket/path or hf://org/repo[@revision]. Unset: random initialisation (size tiny only)."""
    tokenizerPath: ModelSource | None = None
    """Tokenizer (a tokenizer.json file, or a directory/repo with tokenizer.json and its chat template), as a
    local path, gs:// or hf:// URI. Unset: the checkpoint's own tokenizer (size tiny without a checkpoint:
    the built-in 256-character tokenizer)."""


class TPUSpec(Model):
    """The TPU slice shape, as GKE labels its node pools."""

    accelerator: Accelerator
    """GKE accelerator label value (cloud.google.com/gke-tpu-accelerator)."""
    topology: Annotated[str, Field(min_length=3, max_length=16, pattern=r"^[0-9]+(x[0-9]+){1,2}$")]
    """Slice topology (cloud.google.com/gke-tpu-topology), e.g. 2x4 (v5e/v6e) or 2x2x2 (v4/v5p/v7x)."""
    chipsPerHost: Literal[1, 4, 8] | None = None
    """Chips per host, only needed where the labels are ambiguous: v5e/v6e 2x4 is 2 hosts x 4 chips
    (default) or, with 8, one ct5lp/ct6e *-8t host."""
    slices: Annotated[int, Field(ge=1, le=256)] = 1
    """Number of slices (multislice over DCN). More than 1 needs a multi-host topology."""
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    """TPU capacity: on-demand (default), Spot, a named reservation or flex-start."""


class PackingSpec(Model):
    """Sequence packing: completions packed into fixed-token rows with segment ids."""

    maxSeqTokenPerTpu: Annotated[int, Field(ge=0, le=1_048_576)] = 0
    """Tokens per packed row. 0 = unpacked (the default). When set, it must hold a whole
    prompt+completion, i.e. be >= maxTargetLength, and be a multiple of 128 (TPU splash attention blocks
    divide the row)."""


class RolloutSpec(Model):
    """How completions are sampled."""

    engine: Literal["vanilla", "vllm"] = "vanilla"
    """Rollout engine: vanilla (Tunix's JAX sampler, any backend) or vllm (vLLM on TPU)."""
    vllmBlockSize: Literal[8, 16, 32, 64, 128, 256, 512, 1024] | None = None
    """vLLM KV-cache block size (a power of 2, 8..1024). Unset: the backend picks. When set it is pinned,
    so unrelated engine changes cannot move it. Only for engine vllm."""
    hbmUtilization: Annotated[float, Field(gt=0, le=1)] = 0.4
    """Fraction of accelerator memory vLLM may use for weights and KV cache."""
    temperature: Annotated[float, Field(gt=0, le=10)] = 0.9
    """Sampling temperature for rollouts."""


class GRPOSpec(Model):
    """GRPO settings, with Tunix's meanings."""

    numGenerations: Annotated[int, Field(ge=2, le=1024)] = 4
    """Completions sampled per prompt (the group size G)."""
    beta: Annotated[float, Field(ge=0, le=10)] = 0.04
    """KL penalty coefficient. 0 skips the reference model."""
    epsilon: Annotated[float, Field(gt=0, le=10)] = 0.2
    """PPO-style clipping range."""
    learningRate: Annotated[float, Field(gt=0, le=1)] = 3e-6
    """Optimizer (AdamW) learning rate."""
    batchSize: Annotated[int, Field(ge=1, le=1_000_000)] = 8
    """Prompts per global step."""
    miniBatchSize: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Prompts per optimizer update. Unset: batchSize (one update per step). Must divide batchSize."""
    microBatchSize: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Prompts per forward/backward pass (gradient accumulation). Unset: miniBatchSize. Must divide it."""
    maxTokensPerTpu: Annotated[int, Field(ge=256, le=16_777_216)] | None = None
    """Token budget per chip of one forward/backward pass (verl's ppo_max_token_len_per_gpu, slime's
    --max-tokens-per-gpu). A micro-batch holding more runs in chunks (whole packed rows, or whole
    sequences with packing off) whose gradients add up to the same single update. Unset: chosen from
    the chip's free HBM after the training state (no limit where the backend reports no memory, as on
    CPU)."""
    numIterations: Annotated[int, Field(ge=1, le=64)] = 1
    """GRPO iterations (mu): passes over each batch of rollouts."""
    maxSteps: Annotated[int, Field(ge=1, le=100_000_000)] = 100
    """Global steps to train."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 42
    """Seed for initialisation, data order and sampling."""


class CheckpointSpec(Model):
    """Orbax checkpoints: where and how often. A restarted trainer resumes from the newest one."""

    directory: StoragePath | None = None
    """Checkpoint directory (local path or gs:// URI). Unset: no checkpoints."""
    interval: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    """Save every this many global steps (and on SIGTERM)."""


class CompilationCacheSpec(Model):
    """JAX's persistent compilation cache: a restart (preemption, host failure, maxRestarts) loads the
    programs the previous start compiled instead of compiling them again, on every host."""

    enabled: bool = True
    """Use the cache. A cache that cannot be read or written is a warning, never a failed run."""
    directory: StoragePath | None = None
    """Where (local path or gs:// URI; shared by all hosts and restarts). Unset: compilation-cache/ under
    spec.checkpoint.directory; without one, the user's cache directory (~/.cache/rljob/jax: a local
    `rljob train`, or one pod's lifetime)."""


class MetricsSpec(Model):
    """Prometheus metrics served by every trainer host."""

    port: Annotated[int, Field(ge=1024, le=65535)] = 9464
    """Port of the /metrics endpoint on each host. Trainer pods use the host network, so this is a port of
    the node: refused are the TPU runtime's ports (8080, 8431, 8471, 8476, 8482) and those that node agents
    hold on every node beside TPU pods: 9100 (node-exporter, which kube-prometheus-stack runs on every
    node with hostPort 9100: the trainer pod would stay Pending), 10248, 10250 and 10255 (kubelet), 10249
    and 10256 (kube-proxy; these are no pods' declared host ports, so the trainer could not bind)."""
    stepTimeBaselineSeconds: Annotated[float, Field(gt=0, le=86400)] | None = None
    """Expected seconds per global step; the step-time regression alert compares against it."""
    stallThresholdSeconds: Annotated[int, Field(ge=1, le=604800)] = 1800
    """Seconds without a completed step after which a trainer host counts as stalled (the stall alert and
    the Stalled condition). The trainer raises it to twice its longest steady step plus its longest
    checkpoint save, so make it cover the longest pause you expect (eval, checkpoint)."""
    firstStepGraceSeconds: Annotated[int, Field(ge=1, le=604800)] = 3600
    """Seconds a trainer process may take for its first step (XLA compiles, weights load) before it counts
    as stalled; also applies after every restart."""


class RLJobSpec(Model):
    """What to train and on which TPU slice."""

    image: Image
    """Trainer container image."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """Model family, size and weights."""
    tpu: TPUSpec
    """TPU slice shape."""
    maxPrefillPredictLength: Annotated[int, Field(ge=1, le=1_048_576)] = 64
    """Maximum prompt length in tokens (MaxText's max_prefill_predict_length)."""
    maxTargetLength: Annotated[int, Field(ge=2, le=1_048_576)] = 128
    """Maximum prompt + completion length in tokens (MaxText's max_target_length)."""
    data: DataSpec | None = None
    """The training prompts. Unset (size tiny only): the built-in synthetic "emit a" dataset."""
    rewards: Annotated[list[RewardSpec], Field(min_length=1, max_length=16)] | None = None
    """Reward functions, summed with their weights. Required with spec.data (unset: the demo reward)."""
    packing: PackingSpec = Field(default_factory=PackingSpec)
    """Sequence packing."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """Rollout engine."""
    grpo: GRPOSpec = Field(default_factory=GRPOSpec)
    """GRPO settings."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """Checkpointing."""
    compilationCache: CompilationCacheSpec = Field(default_factory=CompilationCacheSpec)
    """JAX's persistent compilation cache (on by default)."""
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    """Metrics endpoint and step-time baseline."""
    suspend: bool = False
    """Suspend the job (pods are removed). The only field that may change after creation. With
    ``queueName`` it deactivates the Kueue Workload (its quota is freed) instead of suspending the JobSet,
    which Kueue owns."""
    queueName: QueueName | None = None
    """Kueue LocalQueue to submit to (label kueue.x-k8s.io/queue-name on the JobSet, which is created
    suspended; Kueue starts it on admission). The RLJob is Queued until then. A DNS subdomain of at most
    63 characters (a label value that Kueue accepts as a queue name)."""
    priorityClassName: ObjectName | None = None
    """PriorityClass of the trainer pods (a DNS subdomain)."""
    maxRestarts: Annotated[int, Field(ge=0, le=1000)] = 3
    """Restarts of the whole slice group after a failure. Preemption and maintenance do not count."""
    ttlSecondsAfterFinished: Annotated[int, Field(ge=0, le=31_536_000)] = 43200
    """Seconds a finished JobSet is kept before it is deleted (the RLJob and its status stay)."""
    terminationGracePeriodSeconds: Annotated[int, Field(ge=30, le=3600)] = 300
    """Seconds a trainer pod gets between SIGTERM (preemption, maintenance, deletion) and SIGKILL: the
    trainer finishes its step and saves a checkpoint in that time, so make it cover one step plus a save."""
    serviceAccountName: ObjectName | None = None
    """Kubernetes ServiceAccount of the trainer pods (e.g. one bound to a Google service account with
    Workload Identity, for gs:// weights, data and checkpoints). Unset: the namespace's default."""
    hostNetwork: bool = True
    """Run the trainer pods on the node's network (as xpk does): the TPU runtime's traffic between the
    slices of a multislice job (DCN, MEGASCALE_*) then skips the pod network's overlay. false: the pod
    network, for GKE Autopilot (which refuses host-network pods unless allowlisted) and clusters whose
    policy forbids it; a single slice trains the same either way. Neither needs privileged mode."""
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)
    """Extra environment variables of the trainer container (e.g. XLA_FLAGS, LIBTPU_INIT_ARGS, an HF token
    from a Secret)."""
    volumes: Annotated[list[Volume], Field(max_length=32)] = Field(default_factory=list)
    """Extra pod volumes (e.g. Cloud Storage FUSE through the gcsfuse.csi.storage.gke.io CSI driver; the
    operator then adds the gke-gcsfuse/volumes pod annotation). /dev/shm is always mounted."""
    volumeMounts: Annotated[list[VolumeMount], Field(max_length=32)] = Field(default_factory=list)
    """Where spec.volumes appear in the trainer container."""
    podAnnotations: Annotations = Field(default_factory=dict)
    """Annotations added to every trainer pod (e.g. gke-gcsfuse/volumes): keys are qualified names
    ([prefix/]name), as Kubernetes requires."""


class Condition(Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    model_config = ConfigDict(extra="ignore", strict=False)
    type: Annotated[str, Field(max_length=316)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(max_length=1024)] = ""
    message: Annotated[str, Field(max_length=32768)] = ""
    lastTransitionTime: datetime | None = None
    observedGeneration: int | None = None


class RLJobStatus(Model):
    """Observed state, mirrored from the RLJob's JobSet by the operator."""

    model_config = ConfigDict(extra="ignore", strict=False)
    phase: Phase | None = None
    """Pending, Queued (waiting for Kueue's admission), Running, Restarting, Suspended, Succeeded or
    Failed. Succeeded and Failed are final."""
    conditions: list[Condition] = Field(default_factory=list)
    """Standard conditions: Created, Running, Suspended, Queued, Restarting, Succeeded, Failed, Stalled (no step
    on trainer host 0 within its stall threshold, or its first-step grace before the first step), and
    ContainersWaiting (a trainer container the kubelet cannot start, with its reason: ErrImagePull,
    ImagePullBackOff, ErrImageNeverPull, CreateContainerConfigError...; False once every slice is ready)."""
    jobSetName: str | None = None
    """Name of the JobSet that runs this RLJob."""
    restarts: int = 0
    """Restarts of the JobSet so far."""
    observedGeneration: int | None = None
    """The RLJob generation this status describes."""
    startTime: datetime | None = None
    """When the JobSet was created."""
    completionTime: datetime | None = None
    """When the job reached Succeeded or Failed."""
    progress: Progress | None = None
    """Training progress read from trainer host 0 while Running (step, reward, step time, ETA)."""


class ObjectMeta(BaseModel):
    """The part of metav1.ObjectMeta rljob reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(min_length=1, max_length=253)]
    namespace: str | None = None


class RLJob(Model):
    """An RL post-training job (GRPO with Tunix) on a GKE TPU slice."""

    model_config = ConfigDict(extra="forbid")
    apiVersion: Literal["rljob.dev/v1alpha1"] = API_VERSION
    kind: Literal["RLJob"] = KIND
    metadata: ObjectMeta
    spec: RLJobSpec
    status: RLJobStatus | None = None

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RLJob:
        """Run every cross-field rule (the same ones the CRD carries as CEL) and report all failures."""
        failures = violations(self)
        if failures:
            raise ValueError("\n".join(failures))
        return self
