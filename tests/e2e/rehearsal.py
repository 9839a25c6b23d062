"""Helpers of the rehearsal (tests/e2e/test_rehearsal.py): the locally built images on the real node, the
chart's PodMonitor as a Prometheus scrape config, the trainer's process on the node, `kubectl get rlj`.

The real node is hack/cluster/node.sh's: a kubelet with its own containerd, labelled as one host of a
single-host v6e 2x2 Spot pool, which no kwok pool and no other test asks for.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def _meta(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key)


def scrape_config(pod_monitor: dict[str, Any], targets_file: Path) -> dict[str, Any]:
    """The scrape job prometheus-operator generates from ``pod_monitor`` (its first endpoint): keep the
    selected pods' named port, the standard target labels, then the PodMonitor's own relabelings,
    unchanged. Discovery is ``targets_file`` (file_sd), which :func:`pod_targets` fills with what
    Kubernetes pod discovery would give: Debian's Prometheus is built without kubernetes_sd_configs."""
    spec = pod_monitor["spec"]
    endpoint = spec["podMetricsEndpoints"][0]
    keep: list[dict[str, Any]] = [
        {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_pod_label_{_meta(key)}",
                f"__meta_kubernetes_pod_labelpresent_{_meta(key)}",
            ],
            "regex": f"({value});true",
        }
        for key, value in spec["selector"]["matchLabels"].items()
    ]
    keep.append(
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": endpoint["port"],
        }
    )
    standard = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    own = [
        {"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]}
        for r in endpoint["relabelings"]
    ]
    meta = pod_monitor["metadata"]
    return {
        "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/0",
        "metrics_path": endpoint.get("path", "/metrics"),
        "file_sd_configs": [{"files": [str(targets_file)]}],
        "relabel_configs": keep + standard + own,
    }


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kubernetes pod discovery's targets for ``pods``: one per container port of a pod with an IP, with
    the ``__meta_kubernetes_*`` labels that discovery sets (the subset the relabelling reads, and more)."""
    groups = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            continue
        meta = pod["metadata"]
        base = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
            "__meta_kubernetes_pod_phase": pod["status"].get("phase", ""),
        }
        for key, value in (meta.get("labels") or {}).items():
            base[f"__meta_kubernetes_pod_label_{_meta(key)}"] = value
            base[f"__meta_kubernetes_pod_labelpresent_{_meta(key)}"] = "true"
        for c in pod["spec"]["containers"]:
            for port in c.get("ports") or []:
                labels = {
                    **base,
                    "__meta_kubernetes_pod_container_name": c["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


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


PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
WALL = 0x40000000


@contextmanager
def main_thread_stopped(pid: int) -> Iterator[None]:
    """Stop only the main thread of process ``pid`` (ptrace: seize + interrupt) until the block ends.

    Why not SIGSTOP: it stops every thread, the /metrics server's too, so Prometheus sees the target down
    (``up == 0``, the series go stale) and no stall rule can see a stall. A hung training loop, the case the
    stall alert is for, keeps serving its last metrics: stopping the main thread, which runs the loop, is
    that. The tracee resumes when we detach (or when this process exits)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    for request in (PTRACE_SEIZE, PTRACE_INTERRUPT):
        if libc.ptrace(request, pid, None, None) != 0:
            raise OSError(ctypes.get_errno(), f"ptrace {request:#x} of {pid}")
    os.waitpid(pid, WALL)
    try:
        yield
    finally:
        libc.ptrace(PTRACE_DETACH, pid, None, None)


def rlj_row(name: str, namespace: str) -> dict[str, str]:
    """`kubectl get rlj NAME` as {column: value} (the printer columns, as a user sees them)."""
    header, row = kubectl("get", "rlj", name, "-n", namespace).splitlines()[:2]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], None]
    return {header[s:e].strip(): row[s:e].strip() for s, e in zip(starts, bounds, strict=True)}
