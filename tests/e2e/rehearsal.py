"""Helpers of the rehearsal (tests/e2e/test_rehearsal.py): the locally built images on the real node, the
trainer's process on the node, `kubectl get rlj`. The scrape configs come from
tests/e2e/podmonitor_scrape.py.

The real node is hack/cluster/node.sh's: a kubelet with its own containerd, labelled as one host of a
single-host v6e 2x2 Spot pool, which no kwok pool and no other test asks for.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.kube import kubectl

REPO = Path(__file__).resolve().parents[2]
NODE_SH = REPO / "hack" / "cluster" / "node.sh"
NODE_NAME = "gke-rljob-real-v6e-2x2-0"
# hack/image.sh's names (same environment variables).
_PREFIX = os.environ.get("RLJOB_IMAGE_PREFIX", "localhost/rljob-")
_TAG = os.environ.get("RLJOB_IMAGE_TAG", "dev")
OPERATOR_IMAGE = f"{_PREFIX}operator:{_TAG}"
TRAINER_IMAGE = f"{_PREFIX}trainer:{_TAG}"
TPU = {"accelerator": "tpu-v6e-slice", "topology": "2x2", "capacity": {"type": "Spot"}}
"""The real node's shape: only an RLJob asking for exactly this lands there."""
NODE_TOLERATIONS = [
    {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
]


def import_images(*images: str) -> dict[str, str]:
    """Load locally built Docker images into the node's containerd (cached by Docker ID): image -> ID.
    Fails, naming hack/image.sh, when an image was not built."""
    proc = subprocess.run(
        [str(NODE_SH), "import", *images], capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"node.sh import failed (build the images with hack/image.sh):\n{proc.stderr}")
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line)


def container_pids(container_id: str) -> list[int]:
    """PIDs (on this machine) of a container on the real node: tini first, then the trainer."""
    cid = container_id.split("://", 1)[-1]
    cluster = os.environ.get("RLJOB_CLUSTER_DIR", "/tmp/rljob-cluster")
    out = subprocess.run(
        ["ctr", "--address", f"{cluster}/node/containerd.sock", "-n", "k8s.io", "tasks", "ps", cid],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return [int(line.split()[0]) for line in out.splitlines()[1:] if line.strip()]


def trainer_pid(container_id: str) -> int:
    """The trainer process of the container: tini's child (tini is the image's PID 1)."""
    pids = container_pids(container_id)
    tini = min(pids)
    children = [p for p in pids if _ppid(p) == tini]
    assert len(children) == 1, f"tini {tini} has children {children} (container pids {pids})"
    return children[0]


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def rlj_row(name: str, namespace: str) -> dict[str, str]:
    """`kubectl get rlj NAME` as {column: value} (the printer columns, as a user sees them)."""
    header, row = kubectl("get", "rlj", name, "-n", namespace).splitlines()[:2]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], None]
    return {header[s:e].strip(): row[s:e].strip() for s, e in zip(starts, bounds, strict=True)}
