"""Run the helm binary that hack/cluster/build.sh caches, offline (`helm template`, `helm lint`).

helm built with `go install` (no Makefile ldflags) assumes Kubernetes v1.20 when no cluster is asked,
which the chart's kubeVersion (>=1.29) rejects; every offline call names the version the simulated
cluster runs instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rljob"
KUBE_VERSION = "v1.36.0"
MONITORING = "monitoring.coreos.com/v1"


def helm_binary() -> str | None:
    """helm from PATH, else from the cluster's binary cache (hack/cluster/build.sh --print)."""
    found = shutil.which("helm")
    if found:
        return found
    out = subprocess.run(
        [REPO / "hack" / "cluster" / "build.sh", "--print"], capture_output=True, text=True, check=False
    )
    for line in out.stdout.splitlines():
        candidate = Path(line) / "helm"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    if binary is None:
        pytest.skip("helm is not built yet (hack/cluster/build.sh)")
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} -> exit {proc.returncode}:\n{proc.stderr}")
    return proc


def template(
    *sets: str, monitoring: bool = False, chart: Path = CHART, namespace: str = "rljob-system"
) -> list[dict[str, Any]]:
    """`helm template` with `--set` pairs; the rendered objects (empty documents dropped)."""
    args = ["template", "rljob", str(chart), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    if monitoring:
        args += ["--api-versions", MONITORING]
    for s in sets:
        args += ["--set", s]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]
