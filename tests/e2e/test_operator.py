"""The operator end to end on the simulated GKE TPU cluster (hack/cluster/, docs/cluster.md).

The operator runs as a subprocess (``python -m rljob_operator``), exactly as ``rljob operator`` would,
watching only the namespaces these tests create (``test-operator-*``), so other suites sharing the cluster
are left alone. Its log is written next to the cluster's logs and printed when a test fails.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.api.rules import MAX_NAME_LENGTH
from tests.e2e.kube import KubectlError, condition, get, kubectl, kubectl_json, list_items, wait_for
from tests.e2e.operator_proc import OperatorProcess

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "rljob.dev_rljobs.yaml"
POOL = "cloud.google.com/gke-nodepool"
NAMESPACES = "test-operator-*"  # the `namespace` fixture names namespaces after the test


@pytest.fixture(scope="module")
def operator(cluster: Any) -> Iterator[OperatorProcess]:
    """The RLJob CRD installed and the operator running."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/rljobs.rljob.dev", "--timeout=60s")
    with OperatorProcess(cluster.logs, [NAMESPACES], identity="e2e") as op:
        yield op


@pytest.fixture
def ns(namespace: str, operator: OperatorProcess) -> Iterator[str]:
    """A watched namespace. Afterwards the operator's log tail and the namespace's objects are printed
    (pytest shows them only when the test failed)."""
    assert namespace.startswith("test-operator-"), "test names must start with test_operator_"
    yield namespace
    print("---- operator log ----\n" + operator.tail())
    print(kubectl("get", "rljobs,jobsets,jobs,pods,events", "-n", namespace, "-o", "wide", check=False))
    # Free the fake TPU hosts before the next test: trainer pods use the host network, so a pod still
    # terminating holds its metrics port on the node and the next slice cannot schedule there.
    kubectl("delete", "rljobs", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
    wait_for(lambda: not list_items("pods", namespace), timeout=120, message="trainer pods gone")


# --- helpers -----------------------------------------------------------------------------------------


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "examples" / name).read_text())


V5E_2X4 = {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"}  # pool v5e-2x4: 2 hosts x 4 chips
V5P_2X2X2 = {"accelerator": "tpu-v5p-slice", "topology": "2x2x2"}  # pool v5p-2x2x2: 2 hosts x 4 chips


def small_rljob(name: str, tpu: dict[str, Any] = V5P_2X2X2, **spec: Any) -> dict[str, Any]:
    """A two-host RLJob (v5p 2x2x2 unless ``tpu`` says otherwise) with ``spec`` merged in.

    Each fake pool runs one slice at a time (4 chips per node, host-network ports), as on GKE; the cases
    other than the v5e example use the v5p pool so they queue behind each other, not behind other suites
    that exercise the v5e pool."""
    m = {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"image": "rljob-trainer:test", "tpu": dict(tpu)},
    }
    m["spec"].update(copy.deepcopy(spec))
    return m


def apply(obj: dict[str, Any], ns: str) -> str:
    return kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(obj))


def rljob(ns: str, name: str) -> dict[str, Any] | None:
    return get("rljob", name, ns)


def wait_phase(ns: str, name: str, phase: str, timeout: float = 180) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = rljob(ns, name)
        return obj if obj and (obj.get("status") or {}).get("phase") == phase else None

    return wait_for(check, timeout=timeout, message=f"RLJob {ns}/{name} phase {phase}")


def events_of(ns: str, name: str) -> list[dict[str, Any]]:
    return kubectl_json("get", "events", "-n", ns, "--field-selector",
                        f"involvedObject.kind=RLJob,involvedObject.name={name}")["items"]  # fmt: skip


def event_reasons(ns: str, name: str) -> set[str]:
    return {e["reason"] for e in events_of(ns, name)}


def assert_owned(obj: dict[str, Any], owner: dict[str, Any]) -> None:
    refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]
    assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [
        ("RLJob", owner["metadata"]["name"], owner["metadata"]["uid"])
    ]


def node_pool(node_name: str) -> str:
    return kubectl_json("get", "node", node_name)["metadata"]["labels"][POOL]


# --- the cases -----------------------------------------------------------------------------------------


def test_operator_v5e_example_succeeds(ns: str, operator: OperatorProcess) -> None:
    manifest = example("rljob-v5e.yaml")
    name = manifest["metadata"]["name"]
    kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "rljob-v5e.yaml"))

    js = wait_for(lambda: get("jobset", name, ns), timeout=30, message="JobSet created")
    owner = rljob(ns, name)
    assert owner is not None
    assert_owned(js, owner)
    assert_owned(get("configmap", f"{name}-config", ns) or {}, owner)

    jobs = wait_for(lambda: list_items("jobs", ns, f"jobset.sigs.k8s.io/jobset-name={name}"), timeout=30)
    assert len(jobs) == 1
    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 2 and all(p["spec"].get("nodeName") for p in ps)
                             else None)(list_items("pods", ns, f"jobset.sigs.k8s.io/jobset-name={name}")),
                    timeout=180, message="both pods bound")  # fmt: skip
    for pod in pods:
        assert node_pool(pod["spec"]["nodeName"]) == "v5e-2x4"
        res = pod["spec"]["containers"][0]["resources"]
        assert res["requests"]["google.com/tpu"] == res["limits"]["google.com/tpu"] == "4"
        assert pod["metadata"]["labels"]["rljob.dev/role"] == "trainer"

    done = wait_phase(ns, name, "Succeeded")
    st = done["status"]
    assert (condition(done, "Created") or {}).get("status") == "True"
    assert (condition(done, "Succeeded") or {}).get("status") == "True"
    assert st["jobSetName"] == name and st["restarts"] == 0
    assert st["startTime"] and st["completionTime"] and st["observedGeneration"] == 1
    assert all(p["status"]["phase"] == "Succeeded"
               for p in list_items("pods", ns, f"jobset.sigs.k8s.io/jobset-name={name}"))  # fmt: skip
    wait_for(lambda: {"Created", "Succeeded"} <= event_reasons(ns, name), timeout=20, message="events")
    assert 'rljob_operator_reconcile_duration_seconds_count{handler="create"}' in operator.metrics()


def test_operator_v6e_multislice_one_pool_per_slice(ns: str) -> None:
    name = example("rljob-v6e-multislice.yaml")["metadata"]["name"]
    kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "rljob-v6e-multislice.yaml"))
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    pods = wait_for(lambda: (lambda ps: ps if len(ps) == 8 and all(p["spec"].get("nodeName") for p in ps)
                             else None)(list_items("pods", ns, selector)),
                    timeout=180, message="8 pods bound")  # fmt: skip
    assert len(list_items("jobs", ns, selector)) == 2
    pools: dict[str, set[str]] = {}
    for pod in pods:
        job_index = pod["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
        pools.setdefault(job_index, set()).add(node_pool(pod["spec"]["nodeName"]))
        assert pod["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] == "4"
    assert sorted(pools) == ["0", "1"]
    assert all(len(p) == 1 for p in pools.values()), pools
    assert pools["0"] != pools["1"] and pools["0"] | pools["1"] == {"v6e-4x4-a", "v6e-4x4-b"}
    wait_phase(ns, name, "Succeeded", timeout=240)


def test_operator_failing_pod_restarts_then_fails(ns: str) -> None:
    name = "flaky"
    apply(small_rljob(name, maxRestarts=1, podAnnotations={"kwok.rljob.dev/fail": "1"}), ns)
    failed = wait_phase(ns, name, "Failed", timeout=240)
    st = failed["status"]
    assert st["restarts"] == 1
    cond = condition(failed, "Failed") or {}
    assert cond.get("status") == "True" and cond.get("reason"), (
        cond
    )  # the JobSet's reason, e.g. ReachedMaxRestarts
    assert cond.get("message")
    wait_for(lambda: {"Restarted", "Failed"} <= event_reasons(ns, name), timeout=20, message="events")
    failed_event = next(e for e in events_of(ns, name) if e["reason"] == "Failed")
    assert failed_event["type"] == "Warning" and cond["reason"] in failed_event["message"]


def test_operator_bad_config_exit_2_fails_without_restart(ns: str) -> None:
    name = "badcfg"
    apply(small_rljob(name, maxRestarts=3, podAnnotations={"kwok.rljob.dev/fail": "2"}), ns)
    failed = wait_phase(ns, name, "Failed")
    assert failed["status"]["restarts"] == 0, "exit 2 must not be retried"
    assert (condition(failed, "Failed") or {}).get("status") == "True"


def test_operator_suspend_toggles_the_jobset(ns: str) -> None:
    name = "pausable"
    apply(small_rljob(name, podAnnotations={"kwok.rljob.dev/run-forever": "true"}), ns)
    wait_phase(ns, name, "Running")
    kubectl("patch", "rljob", name, "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: (get("jobset", name, ns) or {}).get("spec", {}).get("suspend") is True, timeout=30)
    wait_phase(ns, name, "Suspended")
    kubectl("patch", "rljob", name, "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: (get("jobset", name, ns) or {}).get("spec", {}).get("suspend") is False, timeout=30)
    resumed = wait_phase(ns, name, "Running")
    assert (condition(resumed, "Suspended") or {}).get("status") == "False"
    assert {"Suspended", "Resumed"} <= event_reasons(ns, name)


def test_operator_delete_garbage_collects(ns: str) -> None:
    name = "doomed"
    apply(small_rljob(name, podAnnotations={"kwok.rljob.dev/run-forever": "true"}), ns)
    wait_for(lambda: get("jobset", name, ns), timeout=30, message="JobSet created")
    kubectl("delete", "rljob", name, "-n", ns, "--wait=true", "--timeout=60s")
    wait_for(lambda: get("jobset", name, ns) is None and get("configmap", f"{name}-config", ns) is None,
             timeout=60, message="JobSet and ConfigMap garbage-collected")  # fmt: skip
    wait_for(lambda: not list_items("pods", ns, f"jobset.sigs.k8s.io/jobset-name={name}"), timeout=60)


def test_operator_ttl_deleted_jobset_is_not_recreated(ns: str, operator: OperatorProcess) -> None:
    name = "short-lived"
    apply(small_rljob(name, ttlSecondsAfterFinished=1), ns)
    wait_phase(ns, name, "Succeeded")
    wait_for(lambda: get("jobset", name, ns) is None, timeout=60, message="JobSet deleted by its TTL")
    operator.restart()  # resume handlers run for every RLJob: still nothing may be recreated
    time.sleep(5)
    assert get("jobset", name, ns) is None
    after = rljob(ns, name) or {}
    assert after["status"]["phase"] == "Succeeded"
    assert (condition(after, "Succeeded") or {}).get("status") == "True"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("spec.tpu.topology", lambda m: m["spec"]["tpu"].update(topology="3x3")),
        ("spec.packing.maxSeqTokenPerTpu", lambda m: m["spec"].update(packing={"maxSeqTokenPerTpu": 16})),
        ("metadata.name", lambda m: m["metadata"].update(name="n" * (MAX_NAME_LENGTH + 1))),
    ],
)
def test_operator_invalid_rljob_is_refused(ns: str, field: str, change: Any) -> None:
    m = small_rljob("invalid")
    change(m)
    with pytest.raises(KubectlError) as refused:
        apply(m, ns)
    assert field in refused.value.stderr, refused.value.stderr
    time.sleep(2)
    assert kubectl_json("get", "rljobs", "-n", ns)["items"] == []
    assert kubectl_json("get", "jobsets,configmaps", "-n", ns, "-l", "rljob.dev/name")["items"] == []
