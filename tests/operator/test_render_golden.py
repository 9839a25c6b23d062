"""Golden files of the renderer: one YAML stream (ConfigMap, JobSet) per case in ``golden/``.

Regenerate with ``UPDATE_GOLDEN=1 pytest tests/operator``; the diff of the goldens is then the review of a
rendering change. A case missing its golden fails (so CI cannot pass by skipping).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rljob_operator.render import dump_yaml, render_objects

from tests.operator.builders import RLJobBuilder, make_rljob

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CASES: dict[str, RLJobBuilder] = {
    # one per accelerator family
    "v4-2x2x4": make_rljob("v4").tpu("tpu-v4-podslice", "2x2x4"),
    "v5e-2x2": make_rljob("v5e").tpu("tpu-v5-lite-podslice", "2x2"),
    "v5e-2x4-two-hosts": make_rljob("v5e").tpu("tpu-v5-lite-podslice", "2x4"),
    "v5e-2x4-one-8chip-host": make_rljob("v5e").tpu("tpu-v5-lite-podslice", "2x4", chips_per_host=8),
    "v5p-4x4x4": make_rljob("v5p").tpu("tpu-v5p-slice", "4x4x4"),
    "v6e-1x1": make_rljob("v6e").tpu("tpu-v6e-slice", "1x1"),
    "v6e-4x4": make_rljob("v6e").tpu("tpu-v6e-slice", "4x4"),
    "v7x-2x2x2": make_rljob("v7x").tpu("tpu7x", "2x2x2"),
    # JobSet-level features
    "v6e-4x4-multislice": make_rljob("multi").tpu("tpu-v6e-slice", "4x4").slices(2),
    "suspended": make_rljob("paused").suspend(),
    "kueue": make_rljob("queued").queue("tpu-queue").priority_class("high"),
    "ttl-60-restarts-10": make_rljob("keep").ttl(60).max_restarts(10),
    "pod-annotations-metrics-port": make_rljob("annotated")
    .pod_annotation("gke-gcsfuse/volumes", "true")
    .pod_annotation("a.example/b", "c")
    .metrics_port(9200),
    # GKE capacity types (on-demand is every other case)
    "capacity-spot": make_rljob("spot").set("spec.tpu.capacity", {"type": "Spot"}),
    "capacity-reservation": make_rljob("reserved").set(
        "spec.tpu.capacity",
        {"type": "Reservation", "reservation": "tpu-res", "reservationProject": "shared-proj"},
    ),
    "capacity-flex-start": make_rljob("flex").set(
        "spec.tpu.capacity", {"type": "FlexStart", "maxRunDurationSeconds": 86400}
    ),
    # pod identity, environment and storage
    "service-account": make_rljob("wi").set("spec.serviceAccountName", "trainer-wi"),
    "env-values-and-refs": make_rljob("env").set(
        "spec.env",
        [
            {"name": "XLA_FLAGS", "value": "--xla_dump_to=/tmp/xla"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {
                "name": "LIBTPU_INIT_ARGS",
                "valueFrom": {"configMapKeyRef": {"name": "tpu", "key": "args", "optional": True}},
            },
        ],
    ),
    "volumes-gcsfuse-and-cache": make_rljob("storage")
    .set(
        "spec.volumes",
        [
            {
                "name": "weights",
                "csi": {
                    "driver": "gcsfuse.csi.storage.gke.io",
                    "readOnly": True,
                    "volumeAttributes": {"bucketName": "my-weights", "mountOptions": "implicit-dirs"},
                },
            },
            {"name": "jax-cache", "emptyDir": {"sizeLimit": "50Gi"}},
        ],
    )
    .set(
        "spec.volumeMounts",
        [
            {"name": "weights", "mountPath": "/weights", "readOnly": True},
            {"name": "jax-cache", "mountPath": "/home/rljob/.cache/jax"},
        ],
    ),
    # trainer config
    "packing-on": make_rljob("packed").packing(4096).set("spec.maxTargetLength", 1024),
    "packing-off": make_rljob("unpacked").packing(0),
    "vllm-block-size-set": make_rljob("vllm").vllm(block_size=256),
    "vllm-block-size-unset": make_rljob("vllm").vllm(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    rendered = dump_yaml(render_objects(CASES[case].obj()))
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.write_text(rendered)
    assert path.exists(), f"no golden for {case}: run UPDATE_GOLDEN=1 pytest tests/operator"
    assert rendered == path.read_text(), f"{path} differs from the rendering (UPDATE_GOLDEN=1 to accept)"


def test_no_stale_goldens() -> None:
    """Every golden belongs to a case, so a renamed case does not leave a file nobody checks."""
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(CASES)
