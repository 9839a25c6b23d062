"""The simulated GKE TPU cluster behaves like the real thing where rljob depends on it:
JobSet webhooks and controller, scheduling onto TPU node pools, RBAC, PodSecurity,
and the kwok test hooks (docs/cluster.md)."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.e2e.kube import (
    KubectlError,
    condition,
    create,
    get,
    kubectl,
    kubectl_json,
    list_items,
    wait_for,
)

pytestmark = pytest.mark.cluster

POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}


def tpu_jobset(
    name: str,
    accelerator: str = "tpu-v5-lite-podslice",
    topology: str = "2x4",
    hosts: int = 2,
    chips: int = 4,
    tolerate: bool = True,
    annotations: dict | None = None,
) -> dict:
    """A hand-written one-slice TPU JobSet, shaped as docs/../gke-tpu-jobset.md describes."""
    pod_spec: dict = {
        "restartPolicy": "Never",
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": accelerator,
            "cloud.google.com/gke-tpu-topology": topology,
        },
        "containers": [
            {
                "name": "trainer",
                "image": "python:3.11-slim",
                "command": ["python", "-c", "print('hello TPU')"],
                "resources": {"requests": {"google.com/tpu": chips}, "limits": {"google.com/tpu": chips}},
            }
        ],
    }
    if tolerate:
        pod_spec["tolerations"] = [TPU_TOLERATION]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": POOL_LABEL},
        },
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "slice",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": hosts,
                            "completions": hosts,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"metadata": {"annotations": annotations or {}}, "spec": pod_spec},
                        }
                    },
                }
            ],
        },
    }


def pods_of(namespace: str, jobset: str) -> list[dict]:
    return list_items("pods", namespace, f"jobset.sigs.k8s.io/jobset-name={jobset}")


def pool_nodes(pool: str) -> set[str]:
    return {n["metadata"]["name"] for n in list_items("nodes", selector=f"{POOL_LABEL}={pool}")}


def test_tpu_jobset_runs_on_its_pool_and_completes(namespace: str) -> None:
    stored = create(tpu_jobset("v5e"), namespace)

    # Defaults that only JobSet's mutating webhook sets (the CRD schema has none for them).
    assert stored["spec"]["successPolicy"]["operator"] == "All"
    assert stored["spec"]["startupPolicy"]["startupPolicyOrder"] == "AnyOrder"
    assert stored["spec"]["network"]["enableDNSHostnames"] is True

    jobs = wait_for(
        lambda: list_items("jobs", namespace, "jobset.sigs.k8s.io/jobset-name=v5e"), 60, message="child Job"
    )
    assert len(jobs) == 1
    assert jobs[0]["spec"]["parallelism"] == jobs[0]["spec"]["completions"] == 2

    def bound() -> list[dict]:
        pods = pods_of(namespace, "v5e")
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else []

    pods = wait_for(bound, 90, message="2 pods bound to nodes")
    nodes = {p["spec"]["nodeName"] for p in pods}
    # One host per node (each has 4 chips), and only nodes of the v5e 2x4 pool.
    assert nodes == pool_nodes("v5e-2x4"), nodes

    done = wait_for(
        lambda: (c := condition(get("jobset", "v5e", namespace), "Completed")) and c["status"] == "True",
        120,
        message="JobSet Completed",
    )
    assert done
    # Finished pods are kept (no TTL set), so both are there to look at.
    final = pods_of(namespace, "v5e")
    assert [p["status"]["phase"] for p in final] == ["Succeeded", "Succeeded"]
    assert {p["spec"]["nodeName"] for p in final} == nodes
    job = list_items("jobs", namespace, "jobset.sigs.k8s.io/jobset-name=v5e")[0]
    assert job["status"].get("succeeded") == 2


def _unschedulable(namespace: str, jobset: str) -> list[dict]:
    pods = pods_of(namespace, jobset)
    ok = pods and all(
        not p["spec"].get("nodeName")
        and (c := condition(p, "PodScheduled"))
        and c["status"] == "False"
        and c["reason"] == "Unschedulable"
        for p in pods
    )
    return pods if ok else []


def test_jobset_without_matching_pool_stays_pending(namespace: str) -> None:
    create(tpu_jobset("nopool", accelerator="tpu-v6e-slice", topology="8x8"), namespace)
    pods = wait_for(lambda: _unschedulable(namespace, "nopool"), 90, message="leader pod Unschedulable")
    assert "didn't match Pod's node affinity/selector" in condition(pods[0], "PodScheduled")["message"]
    # Still nothing a few seconds later, and the JobSet is neither done nor failed.
    time.sleep(5)
    assert all(
        p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
        for p in pods_of(namespace, "nopool")
    )
    js = get("jobset", "nopool", namespace)
    assert condition(js, "Completed") is None and condition(js, "Failed") is None


def test_jobset_without_tpu_toleration_is_not_scheduled(namespace: str) -> None:
    create(tpu_jobset("notol", tolerate=False), namespace)
    pods = wait_for(lambda: _unschedulable(namespace, "notol"), 90, message="leader pod Unschedulable")
    assert "untolerated taint" in condition(pods[0], "PodScheduled")["message"]
    time.sleep(5)
    assert all(not p["spec"].get("nodeName") for p in pods_of(namespace, "notol"))


def test_rbac_refuses_serviceaccount_without_rights(namespace: str, cluster, tmp_path) -> None:
    kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = kubectl("create", "token", "nobody", "-n", namespace, "--duration=10m").strip()
    # A kubeconfig with only the ServiceAccount's token: authentication is the real
    # TokenRequest/JWT path, authorization is RBAC.
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    sa_config = tmp_path / "sa.kubeconfig"
    sa_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": admin["clusters"],
                "users": [{"name": "nobody", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "rljob", "user": "nobody"}}],
                "current-context": "sa",
            }
        )
    )

    def as_sa(*args: str) -> str:
        return kubectl("--kubeconfig", str(sa_config), *args)

    with pytest.raises(KubectlError) as denied:
        as_sa("get", "pods", "-n", namespace)
    assert "forbidden" in denied.value.stderr.lower()
    assert f"system:serviceaccount:{namespace}:nobody" in denied.value.stderr

    # Granting a Role lets exactly that through, nothing more.
    kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", namespace)
    kubectl(
        "create", "rolebinding", "nobody-reads", "--role=pod-reader",
        f"--serviceaccount={namespace}:nobody", "-n", namespace,
    )  # fmt: skip
    wait_for(lambda: as_sa("get", "pods", "-n", namespace) is not None, 30, message="read after grant")
    with pytest.raises(KubectlError) as still_denied:
        as_sa("create", "configmap", "x", "-n", namespace)
    assert "forbidden" in still_denied.value.stderr.lower()

    def can_i(verb: str, resource: str) -> str:
        # Exit code 1 means "no"; the answer is on stdout either way.
        sa = f"--as=system:serviceaccount:{namespace}:nobody"
        return kubectl("auth", "can-i", verb, resource, "-n", namespace, sa, check=False).strip()

    assert can_i("list", "pods") == "yes"
    assert can_i("create", "jobsets.jobset.x-k8s.io") == "no"


PRIVILEGED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "privileged"},
    "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]},
}

RESTRICTED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "restricted"},
    "spec": {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def test_podsecurity_restricted_is_enforced(namespace: str) -> None:
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    with pytest.raises(KubectlError) as rejected:
        create(PRIVILEGED_POD, namespace)
    assert 'violates PodSecurity "restricted:latest"' in rejected.value.stderr
    assert "privileged" in rejected.value.stderr
    assert get("pod", "privileged", namespace) is None
    # Not a blanket refusal: a pod that meets the profile is admitted.
    assert create(RESTRICTED_POD, namespace)["metadata"]["name"] == "restricted"


def cpu_job(name: str, annotations: dict, pod_failure_policy: dict | None = None) -> dict:
    """A one-pod Job for the plain CPU node (no TPU selector or toleration needed)."""
    spec: dict = {
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
        },
    }
    if pod_failure_policy:
        spec["podFailurePolicy"] = pod_failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_pod(namespace: str, job: str) -> dict | None:
    pods = list_items("pods", namespace, f"job-name={job}")
    return pods[0] if pods else None


def test_kwok_fail_annotation_fails_pod_with_exit_code(namespace: str) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    create(cpu_job("crash", {"kwok.rljob.dev/fail": "42"}, policy), namespace)
    pod = wait_for(
        lambda: (p := job_pod(namespace, "crash")) and p["status"].get("phase") == "Failed" and p,
        60,
        message="pod Failed",
    )
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 42
    # The exit code reaches the Job controller: the podFailurePolicy rule fires.
    failed = wait_for(
        lambda: (c := condition(get("job", "crash", namespace), "Failed")) and c["status"] == "True" and c,
        60,
        message="Job Failed",
    )
    assert failed["reason"] == "PodFailurePolicy"
    # Without the annotation the same Job succeeds (pod-complete stage).
    create(cpu_job("ok", {}), namespace)
    wait_for(
        lambda: (c := condition(get("job", "ok", namespace), "Complete")) and c["status"] == "True",
        60,
        message="Job Complete",
    )


def test_kwok_run_forever_annotation_keeps_pod_running(namespace: str) -> None:
    create(cpu_job("forever", {"kwok.rljob.dev/run-forever": "true"}), namespace)
    wait_for(
        lambda: (p := job_pod(namespace, "forever")) and p["status"].get("phase") == "Running",
        60,
        message="pod Running",
    )
    time.sleep(8)  # well past the 2-3 s after which pod-complete would have finished it
    pod = job_pod(namespace, "forever")
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] in pool_nodes("cpu")
    kubectl("delete", "job", "forever", "-n", namespace, "--cascade=foreground", "--timeout=60s")
    wait_for(lambda: job_pod(namespace, "forever") is None, 60, message="pod deleted")
    assert kubectl_json("get", "jobs", "-n", namespace)["items"] == []


def test_kwok_running_pod_marked_not_ready_is_ready_again(namespace: str) -> None:
    """When a node's heartbeats stop (kube-apiserver restarting on a loaded machine), the node lifecycle
    controller sets Ready=False on each of its pods; a real kubelet re-reports them Ready once it reaches
    the apiserver again. Without that, a JobSet whose pods lived through a restart stayed "0 ready" for ever
    (tests/e2e/test_reliability_apiserver.py failed in CI, 2026-12-06)."""
    create(cpu_job("marked", {"kwok.rljob.dev/run-forever": "true"}), namespace)

    def ready() -> str | None:
        pod = job_pod(namespace, "marked")
        return (
            pod and pod["status"].get("phase") == "Running" and (condition(pod, "Ready") or {}).get("status")
        )

    wait_for(lambda: ready() == "True", 60, message="pod Running and Ready")
    name = job_pod(namespace, "marked")["metadata"]["name"]
    # what the node lifecycle controller writes (MarkPodsNotReady), through the same status subresource
    not_ready = {"type": "Ready", "status": "False", "reason": "NodeNotReady", "lastTransitionTime": None}
    kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=strategic",
            "-p", yaml.safe_dump({"status": {"conditions": [not_ready]}}))  # fmt: skip
    assert (condition(get("pod", name, namespace), "Ready") or {}).get("status") == "False"
    wait_for(lambda: ready() == "True", 30, message="pod Ready again")
    assert job_pod(namespace, "marked")["metadata"]["name"] == name  # the same pod, not a replacement
