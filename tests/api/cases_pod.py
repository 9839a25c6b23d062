"""RLJob test cases of the trainer pod's fields (capacity, env, volumes and mounts, service account), a
passing and a failing edit for each rule of ``rljob/api/pod_rules.py``; ``cases.py`` gathers them."""

from __future__ import annotations

from typing import Any

from tests.api.manifests import manifest

_GCS = {
    "name": "data",
    "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}},
}
_SECRET_ENV = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}


def _sub_path(sub: str) -> dict[str, Any]:
    """The base manifest with the GCS volume mounted at /data from ``sub`` inside it."""
    mount = {"name": "data", "mountPath": "/data", "subPath": sub}
    return manifest({"volumes": [_GCS], "volumeMounts": [mount]})


def capacity(**fields: Any) -> dict[str, Any]:
    return manifest({"tpu": {"capacity": fields}})


POD_CASES: list[tuple[str, dict[str, Any], str | None]] = [
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
    ("env jax platforms, JAX sampler", manifest({"env": [{"name": "JAX_PLATFORMS", "value": "cpu"}]}), None),
    (
        "env jax platforms, vllm",
        manifest({"rollout": {"engine": "vllm"}, "env": [{"name": "JAX_PLATFORMS", "value": "cpu"}]}),
        "spec.env",
    ),
    (
        "env vllm's, vllm",
        manifest(
            {"rollout": {"engine": "vllm"}, "env": [{"name": "VLLM_ENABLE_V1_MULTIPROCESSING", "value": "1"}]}
        ),
        "spec.env",
    ),
    ("env multislice", manifest({"env": [{"name": "MEGASCALE_NUM_SLICES", "value": "4"}]}), "spec.env"),
    ("env name with a reserved infix", manifest({"env": [{"name": "MY_RLJOB_X", "value": "1"}]}), None),
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
    # subPath as the apiserver's pod validation takes it (validateLocalDescendingPath): relative, no ".."
    # element; refused at admission, not when the Job's pod is created
    *(
        (f"subPath {sub!r}", _sub_path(sub), None if ok else "spec.volumeMounts[0].subPath")
        for sub, ok in (
            ("hf/qwen3", True),
            ("./a//b/", True),
            ("..cache/a..b/...", True),
            ("..", False),
            ("../secrets", False),
            ("a/../../etc", False),
            ("a/..", False),
            ("/abs", False),
        )
    ),
    ("service account", manifest({"serviceAccountName": "trainer-wi"}), None),
    ("service account upper case", manifest({"serviceAccountName": "Trainer"}), "spec.serviceAccountName"),
]
