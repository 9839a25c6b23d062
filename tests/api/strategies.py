"""Hypothesis strategies for RLJob manifests that sit near every boundary of the API, valid or not."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rljob.api import pod, tpu
from rljob.api.tpu import RESERVED_TPU_PORTS

_NEAR_MISSES = {"3x3", "2x2x3", "1x1x1", "4x4x6", "8x4x4", "04x4x4", "16x16x48", "24x24x24", "4x4", "0x4x4"}
_topologies = sorted({t for g in tpu.GENERATIONS for t in tpu.topologies(g.accelerator)[:40]} | _NEAR_MISSES)


def _optional(key: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


_REWARDS = [
    {"name": "mathAnswer"},
    {"name": "exactMatch", "weight": 0.5},
    {"name": "regex", "pattern": "<answer>"},
    {"name": "lengthPenalty", "maxLength": 256},
    {"name": "answerCharFraction"},
    {"function": "my.rewards:score"},
]

_CAPACITIES = [
    {},
    {"type": "OnDemand"},
    {"type": "Spot"},
    {"type": "Reservation", "reservation": "tpu-res"},
    {"type": "Reservation", "reservation": "tpu-res", "reservationProject": "shared-proj"},
    {"type": "FlexStart"},
    {"type": "FlexStart", "maxRunDurationSeconds": 3600},
]
_ENV = [
    {"name": "XLA_FLAGS", "value": "--xla_dump_to=/tmp/xla"},
    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    {
        "name": "LIBTPU_INIT_ARGS",
        "valueFrom": {"configMapKeyRef": {"name": "tpu", "key": "a", "optional": True}},
    },
    {"name": "EMPTY", "value": ""},
    {"name": "LR", "value": "1e-5"},  # strings kubectl reads as a number or a boolean when written bare
    {"name": "FLAG", "value": "y"},
]
# (volume, where it is mounted)
_VOLUMES = [
    (
        {
            "name": "gcs",
            "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}},
        },
        "/data",
    ),
    ({"name": "jax-cache", "emptyDir": {"sizeLimit": "10Gi"}}, "/home/rljob/.cache/jax"),
    ({"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}, "/ckpt"),
    ({"name": "creds", "secret": {"secretName": "gcp-key"}}, "/var/secrets/gcp"),
]


def _pod_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Capacity, identity, environment and volumes: valid combinations of spec's pod-level fields."""
    fields: dict[str, Any] = {"serviceAccountName": "trainer"} if draw(st.booleans()) else {}
    fields["env"] = draw(st.lists(st.sampled_from(_ENV), unique_by=lambda e: e["name"], max_size=3))
    chosen = draw(st.lists(st.sampled_from(_VOLUMES), unique_by=lambda v: v[0]["name"], max_size=3))
    fields["volumes"] = [volume for volume, _ in chosen]
    fields["volumeMounts"] = [{"name": volume["name"], "mountPath": path} for volume, path in chosen]
    return fields


def _capacity(**capacity: Any) -> Any:
    return lambda s, d: s["tpu"].update(capacity=capacity)


_SCRATCH = {"name": "scratch", "emptyDir": {}}

# One boundary push each: (what it breaks, how). Applied to a valid manifest about one draw in four, so both
# sides of every rule are exercised while most manifests stay valid (a strategy mostly rejected by the model
# would test little beyond the rejection).
_PUSHES: list[tuple[str, Any]] = [
    ("prompt = target", lambda s, d: s.update(maxPrefillPredictLength=s["maxTargetLength"])),
    (
        "row below target",
        lambda s, d: s["packing"].update(maxSeqTokenPerTpu=max(1, s["maxTargetLength"] - 1)),
    ),
    ("row not a multiple of 128", lambda s, d: s["packing"].update(maxSeqTokenPerTpu=128 * 40 + 1)),
    ("reserved port", lambda s, d: s["metrics"].update(port=d(st.sampled_from(RESERVED_TPU_PORTS)))),
    ("privileged port", lambda s, d: s["metrics"].update(port=d(st.integers(1, 1023)))),
    (
        "topology of another generation",
        lambda s, d: s["tpu"].update(topology=d(st.sampled_from(_topologies))),
    ),
    ("chips per host", lambda s, d: s["tpu"].update(chipsPerHost=d(st.sampled_from([1, 4, 8])))),
    ("slices", lambda s, d: s["tpu"].update(slices=d(st.integers(0, 4)))),
    ("mini batch", lambda s, d: s["grpo"].update(miniBatchSize=d(st.integers(1, 64)))),
    ("micro batch", lambda s, d: s["grpo"].update(microBatchSize=d(st.integers(1, 64)))),
    (
        "block size",
        lambda s, d: s["rollout"].update(vllmBlockSize=d(st.sampled_from([4, 8, 48, 1024, 2048]))),
    ),
    ("one generation", lambda s, d: s["grpo"].update(numGenerations=1)),
    ("no rewards", lambda s, d: s.update(data={"source": "hf://datasets/openai/gsm8k"}, rewards=[])),
    ("data alone", lambda s, d: (s.pop("rewards", None), s.update(data={"source": "hf://datasets/x/y"}))),
    ("name and function", lambda s, d: s.update(rewards=[{"name": "regex", "function": "a:b"}])),
    ("reservation missing", _capacity(type="Reservation")),
    ("reservation on Spot", _capacity(type="Spot", reservation="tpu-res")),
    ("reservation project alone", _capacity(type="OnDemand", reservationProject="shared-proj")),
    ("run duration off flex-start", _capacity(type="Spot", maxRunDurationSeconds=3600)),
    (
        "run duration past 7 days",
        _capacity(type="FlexStart", maxRunDurationSeconds=pod.MAX_RUN_DURATION_SECONDS + 1),
    ),
    (
        "value and valueFrom",
        lambda s, d: s.update(
            env=[{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        ),
    ),
    (
        "both key refs",
        lambda s, d: s.update(
            env=[
                {
                    "name": "A",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "c", "key": "k"},
                    },
                }
            ]
        ),
    ),
    (
        "reserved variable",
        lambda s, d: s.update(
            env=[
                {
                    "name": d(st.sampled_from([*pod.RESERVED_ENV, "RLJOB_NAME", "MEGASCALE_NUM_SLICES"])),
                    "value": "1",
                }
            ]
        ),
    ),
    (
        "duplicate variable",
        lambda s, d: s.update(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
    ),
    ("duplicate volume", lambda s, d: s.update(volumes=[_SCRATCH, _SCRATCH])),
    (
        "reserved volume",
        lambda s, d: s.update(volumes=[{"name": d(st.sampled_from(pod.RESERVED_VOLUMES)), "emptyDir": {}}]),
    ),
    ("volume of two sources", lambda s, d: s.update(volumes=[{**_SCRATCH, "secret": {"secretName": "x"}}])),
    (
        "mount of no volume",
        lambda s, d: s.update(volumes=[], volumeMounts=[{"name": "scratch", "mountPath": "/x"}]),
    ),
    (
        "mount over a reserved path",
        lambda s, d: s.update(
            volumes=[_SCRATCH],
            volumeMounts=[
                {
                    "name": "scratch",
                    "mountPath": d(
                        st.sampled_from(["/etc/rljob", "/etc/rljob/x", "/dev/shm", "/etc", "/dev"])
                    ),
                }
            ],
        ),
    ),
    (
        "two mounts at one path",
        lambda s, d: s.update(
            volumes=[_SCRATCH],
            volumeMounts=[{"name": "scratch", "mountPath": "/x"}, {"name": "scratch", "mountPath": "/x"}],
        ),
    ),
]


@st.composite
def rljob_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid manifest built rule by rule; about one in four has one field pushed past a boundary."""
    accelerator = draw(st.sampled_from(tpu.ACCELERATORS))
    topology = draw(st.sampled_from(tpu.topologies(accelerator)[:40]))
    tpu_spec: dict[str, Any] = {
        "accelerator": accelerator,
        "topology": topology,
        "capacity": draw(st.sampled_from(_CAPACITIES)),
    }
    chips = draw(st.sampled_from([None, *tpu.allowed_chips_per_host(accelerator, topology)]))
    if chips is not None:
        tpu_spec["chipsPerHost"] = chips
    if tpu.hosts_per_slice(accelerator, topology, chips) > 1 and chips != 8:
        tpu_spec["slices"] = draw(st.integers(1, 4))
    target = draw(st.integers(2, 4096))
    rows = draw(st.integers(-(-target // 128), -(-target // 128) + 2).map(lambda k: 128 * k))
    micro = draw(st.integers(1, 8))
    mini = micro * draw(st.integers(1, 4))
    grpo = {"batchSize": mini * draw(st.integers(1, 4)), "numGenerations": draw(st.integers(2, 16))}
    grpo |= draw(_optional("miniBatchSize", st.just(mini))) | draw(
        _optional("microBatchSize", st.just(micro))
    )
    engine = draw(st.sampled_from(["vanilla", "vllm"]))
    rollout = {"engine": engine}
    if engine == "vllm":
        rollout |= draw(_optional("vllmBlockSize", st.sampled_from([8, 16, 64, 1024])))
    spec: dict[str, Any] = {
        "image": "trainer:1",
        "tpu": tpu_spec,
        "maxPrefillPredictLength": draw(st.integers(1, target - 1)),
        "maxTargetLength": target,
        "packing": {"maxSeqTokenPerTpu": draw(st.sampled_from([0, rows]))},
        "rollout": rollout,
        "grpo": grpo,
        "metrics": {"port": draw(st.integers(1024, 65535).filter(lambda p: p not in RESERVED_TPU_PORTS))},
        "suspend": draw(st.booleans()),
    }
    if draw(st.booleans()):
        spec["data"] = {"source": "hf://datasets/openai/gsm8k", "config": "main"}
        spec["rewards"] = draw(st.lists(st.sampled_from(_REWARDS), min_size=1, max_size=3))
    if draw(st.booleans()):
        spec |= _pod_fields(draw)
    if draw(st.integers(0, 3)) == 3:  # not 0: Hypothesis favours the smallest value
        _, push = draw(st.sampled_from(_PUSHES))
        push(spec, draw)
    name = draw(st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,45}[a-z0-9]", fullmatch=True), st.just("a" * 40)))
    return {"apiVersion": "rljob.dev/v1alpha1", "kind": "RLJob", "metadata": {"name": name}, "spec": spec}
