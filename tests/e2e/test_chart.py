"""The user's path on the simulated cluster: `helm install` into a namespace that enforces the `restricted`
Pod Security profile, an example RLJob to `Succeeded`, `helm uninstall`.

kwok runs no containers, so the operator Deployment's pod is admitted and "runs" without executing any
code. The operator therefore runs here as a local process, with exactly the Deployment's arguments and
with the chart ServiceAccount's credentials (a TokenRequest token in a kubeconfig): every API call it
makes goes through the chart's RBAC, so a missing rule fails this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import procs
from tests.e2e.kube import (
    KubectlError,
    create,
    fresh_namespace,
    get,
    kubectl,
    kubectl_json,
    list_items,
    wait_for,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rljob"
EXAMPLE = REPO / "examples" / "rljob-v5e.yaml"
# An RBAC refusal in the operator log ('... is forbidden: User "system:serviceaccount:..." cannot list
# resource ...'). Not any 403: the operator watches all namespaces, and an Event it posts into another
# test's namespace while that one terminates is refused with 403 too (that failed this test once).
RBAC_REFUSED = re.compile(r'forbidden: User "[^"]*" cannot')


def helm(*args: str, timeout: float = 300) -> str:
    proc = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} -> exit {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def helm_cleanup(release: str, namespace: str) -> None:
    """Best-effort uninstall after a failure, so a failed run leaves no cluster-wide RBAC behind."""
    subprocess.run(["helm", "uninstall", release, "--namespace", namespace], capture_output=True, check=False)


def service_account_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the same apiserver that authenticates with `token` only (no client cert)."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = dict(admin["clusters"][0]["cluster"])
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():  # relative paths are relative to the kubeconfig
        cluster["certificate-authority"] = str(admin_kubeconfig.parent / ca)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": cluster}],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [{"name": "operator", "context": {"cluster": "sim", "user": "operator"}}],
                "current-context": "operator",
            }
        )
    )
    path.chmod(0o600)
    return path


def can_i(kubeconfig: Path, *args: str) -> bool:
    """`kubectl auth can-i` as the kubeconfig's user ("yes" exits 0, "no" exits 1)."""
    out = kubectl("--kubeconfig", str(kubeconfig), "auth", "can-i", *args, check=False)
    return out.strip() == "yes"


class LocalOperator:
    """`python -m rljob_operator` with the Deployment's arguments, as the chart's ServiceAccount."""

    def __init__(self, deployment_args: list[str], kubeconfig: Path, log: Path) -> None:
        self.health_port, self.metrics_port = procs.free_port(), procs.free_port()
        self.args = [self._local(a) for a in deployment_args] + ["--metrics-addr=127.0.0.1"]
        self.kubeconfig = kubeconfig
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def _local(self, arg: str) -> str:
        # same endpoints, on free loopback ports (several operators may run on this machine)
        if arg.startswith("--liveness="):
            return f"--liveness=http://127.0.0.1:{self.health_port}/healthz"
        if arg.startswith("--metrics-port="):
            return f"--metrics-port={self.metrics_port}"
        return arg

    def start(self) -> None:
        env = dict(
            os.environ,
            KUBECONFIG=str(self.kubeconfig),
            PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "operator")]),
        )
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rljob_operator", *self.args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._alive, timeout=60, message="operator liveness endpoint")

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
            return r.status == 200

    def stop(self) -> None:
        procs.stop(self.proc, timeout=30)

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def jobs_namespace(cluster: Any) -> Iterator[str]:
    """Where the RLJob runs: trainer pods use the host network, which `restricted` (rightly) refuses, so
    they cannot share the operator's namespace."""
    with fresh_namespace("chart-jobs") as name:
        yield name


def _instance_objects(release: str, namespace: str) -> list[str]:
    """Every object the release could have left, found by its instance label or its name."""
    selector = f"app.kubernetes.io/instance={release}"
    left = []
    for kind in ("deployments", "replicasets", "pods", "services", "serviceaccounts", "configmaps"):
        left += [f"{kind}/{o['metadata']['name']}" for o in list_items(kind, namespace, selector)]
    for kind in ("clusterroles", "clusterrolebindings", "clusterkopfpeerings.kopf.dev"):
        left += [
            f"{kind}/{o['metadata']['name']}" for o in kubectl_json("get", kind, "-l", selector)["items"]
        ]
    return left


def test_chart_install_restricted_rljob_succeeds_with_chart_rbac_uninstall_clean(
    cluster: Any, namespace: str, jobs_namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce-version=latest")
    # PodSecurity admission is really enforcing here: a pod that breaks `restricted` is refused.
    bad_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]},
    }
    with pytest.raises(KubectlError, match="violates PodSecurity"):
        create(bad_pod, namespace=ns, dry_run=True)

    release = f"rljob-{uuid.uuid4().hex[:6]}"
    operator: LocalOperator | None = None
    try:
        # --- install: the operator pod is admitted under `restricted` ---------------------------------
        notes = helm("install", release, str(CHART), "--namespace", ns, "--wait", "--timeout", "180s")
        assert "kubectl get rlj" in notes
        selector = f"app.kubernetes.io/instance={release}"
        pods = wait_for(
            lambda: [p for p in list_items("pods", ns, selector) if p["status"].get("phase") == "Running"],
            timeout=60,
            message="operator pod Running",
        )
        assert len(pods) == 1
        assert pods[0]["spec"]["serviceAccountName"] == release
        assert pods[0]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert get("crd", "clusterkopfpeerings.kopf.dev") is not None
        assert get("clusterkopfpeering", release) is not None

        # --- the ServiceAccount's credentials -----------------------------------------------------------
        token = kubectl("create", "token", release, "-n", ns, "--duration=1h").strip()
        sa_kubeconfig = service_account_kubeconfig(cluster.kubeconfig, token, tmp_path / "sa.kubeconfig")
        whoami = kubectl_json("--kubeconfig", str(sa_kubeconfig), "auth", "whoami")
        assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{release}"
        for denied in (
            ("get", "secrets"),
            ("list", "secrets"),
            ("watch", "secrets"),
            ("create", "pods"),
            ("delete", "pods"),
            ("update", "configmaps"),
            ("create", "rolebindings.rbac.authorization.k8s.io"),
        ):
            for where in (ns, jobs_namespace):
                assert not can_i(sa_kubeconfig, *denied, "-n", where), f"the SA can {denied} in {where}"
        for allowed in (
            ("create", "jobsets.jobset.x-k8s.io"),
            ("patch", "rljobs.rljob.dev", "--subresource=status"),
            ("create", "configmaps"),
            ("create", "events"),
        ):
            assert can_i(sa_kubeconfig, *allowed, "-n", jobs_namespace), f"the SA cannot {allowed}"

        # --- the operator, as the ServiceAccount, takes the example to Succeeded -------------------------
        deployment = get("deployment", release, ns)
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        operator = LocalOperator(args, sa_kubeconfig, cluster.logs / f"chart-operator-{release}.log")
        operator.start()
        kubectl("apply", "-n", jobs_namespace, "-f", str(EXAMPLE))
        name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]

        def phase() -> str | None:
            obj = get("rljob", name, jobs_namespace)
            return ((obj or {}).get("status") or {}).get("phase")

        wait_for(lambda: get("jobset", name, jobs_namespace), timeout=60, message="JobSet created")
        wait_for(lambda: phase() == "Succeeded", timeout=240, message=f"RLJob {name} Succeeded")
        jobset = get("jobset", name, jobs_namespace)
        assert jobset["metadata"]["ownerReferences"][0]["kind"] == "RLJob"
        assert get("configmap", f"{name}-config", jobs_namespace) is not None
        log = operator.log.read_text(errors="replace")
        # (a bare "403" also matched a timestamp such as 04:24:48,403: that failed CI once)
        assert not RBAC_REFUSED.search(log), operator.tail()
        # Events were posted as the ServiceAccount
        reasons = wait_for(
            lambda: {
                e["reason"]
                for e in list_items("events", jobs_namespace)
                if e["involvedObject"].get("kind") == "RLJob" and e["involvedObject"].get("name") == name
            },
            timeout=30,
            message="RLJob events",
        )
        assert "Succeeded" in reasons or "Created" in reasons, reasons
        # kopf peering heartbeats in the chart's ClusterKopfPeering (get/watch/patch allowed by RBAC)
        wait_for(
            lambda: (get("clusterkopfpeering", release) or {}).get("status"),
            timeout=30,
            message="the operator's heartbeat in the ClusterKopfPeering",
        )
    except BaseException:
        if operator is not None:
            print("---- operator log ----\n" + operator.tail())
        print(kubectl("get", "rljobs,jobsets,jobs,pods,events", "-n", jobs_namespace, check=False))
        print(kubectl("get", "all,events", "-n", ns, check=False))
        helm_cleanup(release, ns)
        raise
    finally:
        if operator is not None:
            operator.stop()

    # --- uninstall: nothing of the operator left; the CRD stays, as Helm documents -----------------------
    helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "120s")
    wait_for(lambda: not _instance_objects(release, ns), timeout=60, message="release objects gone")
    assert not [
        b["metadata"]["name"]
        for b in kubectl_json("get", "clusterrolebindings")["items"]
        for s in b.get("subjects") or []
        if s.get("namespace") == ns and s.get("name") == release
    ], "a ClusterRoleBinding still names the ServiceAccount"
    assert get("crd", "rljobs.rljob.dev") is not None
    assert get("rljob", name, jobs_namespace) is not None  # user data survives an uninstall
