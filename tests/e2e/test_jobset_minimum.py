"""``rljob operator`` against a real apiserver whose JobSet CRD is from before v0.10: it exits 1 with the
missing field and the minimum version named, before it watches anything (``jobset_crd.jobset_problem``).

The shared cluster's JobSet CRD must stay as it is (every other suite uses it), so this test starts a
throwaway etcd and kube-apiserver of its own (the cluster's cached binaries and certificates, free ports,
a temporary data directory), installs the cluster's JobSet CRD there under its real name minus
``onJobFailureMessagePatterns``, and runs the operator against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rljob_operator import jobset_crd

from tests import procs
from tests.e2e.kube import kubectl, kubectl_json, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


def _kc(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return kubectl("--kubeconfig", str(kubeconfig), *args, input=input)


@pytest.fixture
def lone_apiserver(cluster: Any, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a fresh, empty apiserver on its own etcd (stopped and removed afterwards)."""
    pki = cluster.dir / "pki"
    etcd_port, peer_port, api_port = procs.free_port(), procs.free_port(), procs.free_port()
    logs = [open(tmp_path / name, "wb") for name in ("etcd.log", "apiserver.log")]  # noqa: SIM115
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp_path / "etcd"), "--name", "lone",
         "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-cluster", f"lone=http://127.0.0.1:{peer_port}"],
        stdout=logs[0], stderr=subprocess.STDOUT,
    )  # fmt: skip
    apiserver = subprocess.Popen(
        ["kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
         "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
         f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
         f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=RBAC",
         "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
         "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
         f"--service-account-key-file={pki / 'sa.pub'}",
         f"--service-account-signing-key-file={pki / 'sa.key'}", f"--cert-dir={tmp_path / 'certs'}"],
        stdout=logs[1], stderr=subprocess.STDOUT,
    )  # fmt: skip
    config = yaml.safe_load((pki / "admin.kubeconfig").read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{api_port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    try:
        wait_for(lambda: _kc(kubeconfig, "get", "--raw", "/readyz"), timeout=120, message="lone apiserver")
        yield kubeconfig
    finally:
        procs.stop(apiserver, timeout=10)
        procs.stop(etcd, timeout=10)
        for log in logs:
            log.close()
        print((tmp_path / "apiserver.log").read_text()[-2000:])


def _jobset_crd_before_v0_10() -> dict[str, Any]:
    """The cluster's JobSet CRD (v0.12) as a fresh object, without the field v0.10 added."""
    real = kubectl_json("get", "crd", jobset_crd.CRD_NAME)
    spec = real["spec"]
    spec.pop("conversion", None)  # points at the cluster's JobSet webhook, which the lone apiserver lacks
    for version in spec["versions"]:
        policy = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["failurePolicy"]
        del policy["properties"]["rules"]["items"]["properties"]["onJobFailureMessagePatterns"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": jobset_crd.CRD_NAME},
        "spec": spec,
    }


def test_operator_exits_1_on_a_jobset_crd_from_before_v0_10(lone_apiserver: Path) -> None:
    _kc(lone_apiserver, "apply", "--server-side", "-f", "-", input=yaml.safe_dump(_jobset_crd_before_v0_10()))

    def established() -> bool:
        crd = json.loads(_kc(lone_apiserver, "get", "crd", jobset_crd.CRD_NAME, "-o", "json"))
        conditions = crd.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(established, timeout=60, message="old JobSet CRD established")
    env = dict(
        os.environ,
        KUBECONFIG=str(lone_apiserver),
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "operator")]),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rljob_operator", "--standalone", "-n", "default", "--connect-timeout", "30"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "lacks spec.failurePolicy.rules[].onJobFailureMessagePatterns" in proc.stderr, proc.stderr
    assert "JobSet v0.10.0 or newer is required" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
