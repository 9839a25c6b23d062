"""Fixtures for tests against the simulated GKE TPU cluster (hack/cluster/).

- `cluster` (session): brings the cluster up once with hack/cluster/up.sh, or
  attaches to one already running from $RLJOB_CLUSTER_DIR. Puts the cluster's
  binaries (kubectl, helm, promtool, ...) first on PATH and sets KUBECONFIG for
  this process and its children. Yields a `Cluster`. At the end it stops the
  cluster only if this session started it and RLJOB_KEEP_CLUSTER is not "1".
- `namespace` (function): a fresh namespace per test, deleted afterwards; yields its name.

RLJOB_SKIP_CLUSTER=1 skips cluster tests when the binaries are not built yet;
otherwise the fixture builds them (hack/cluster/build.sh, cached; 15-40 min cold).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.kube import fresh_namespace

REPO = Path(__file__).resolve().parents[2]
HACK = REPO / "hack" / "cluster"


@dataclass(frozen=True)
class Cluster:
    dir: Path  # $RLJOB_CLUSTER_DIR: state, logs/ (one file per component)
    kubeconfig: Path  # admin (system:masters) kubeconfig, also exported as KUBECONFIG
    bin_dirs: tuple[Path, ...]  # cached binary folders, first on PATH
    started: bool  # True if this session started it (and so will stop it)

    @property
    def logs(self) -> Path:
        return self.dir / "logs"


def _bin_dirs() -> list[Path]:
    out = subprocess.run([HACK / "build.sh", "--print"], capture_output=True, text=True, check=True)
    return [Path(line) for line in out.stdout.splitlines() if line]


def _built(dirs: list[Path]) -> bool:
    return any((d / "kubectl").exists() for d in dirs) and any((d / "kwok").exists() for d in dirs)


def _healthy(kubeconfig: Path) -> bool:
    if not kubeconfig.exists():
        return False
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz", "--request-timeout=5s"],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    cluster_dir = Path(os.environ.get("RLJOB_CLUSTER_DIR", "/tmp/rljob-cluster"))
    kubeconfig = cluster_dir / "kubeconfig"
    dirs = _bin_dirs()
    if not _built(dirs) and os.environ.get("RLJOB_SKIP_CLUSTER") == "1":
        pytest.skip("cluster binaries not built (hack/cluster/build.sh) and RLJOB_SKIP_CLUSTER=1")

    os.environ["PATH"] = os.pathsep.join([*map(str, dirs), os.environ["PATH"]])
    attached = _healthy(kubeconfig)
    # up.sh builds what is missing, then attaches to a healthy cluster or starts one;
    # either way it returns only once nodes, webhooks and the default ServiceAccount are ready.
    subprocess.run([HACK / "up.sh"], check=True, stdout=subprocess.DEVNULL)
    os.environ["KUBECONFIG"] = str(kubeconfig)
    started = not attached
    try:
        yield Cluster(dir=cluster_dir, kubeconfig=kubeconfig, bin_dirs=tuple(dirs), started=started)
    finally:
        if started and os.environ.get("RLJOB_KEEP_CLUSTER") != "1":
            subprocess.run([HACK / "down.sh"], check=False)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    # Named after the test so leftovers (RLJOB_KEEP_CLUSTER=1) are easy to trace.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")
    with fresh_namespace(base[:50].rstrip("-")) as name:
        yield name
