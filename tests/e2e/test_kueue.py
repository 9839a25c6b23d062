"""RLJobs queued in Kueue on the simulated cluster: the real Kueue controller-manager (hack/cluster/kueue.sh)
admits the JobSets the operator creates, against a ClusterQueue quota in TPU chips on the ResourceFlavor of
the fake pool v5e-2x4 (2 hosts x 4 chips: one RLJob fills a quota of 8).

Each test makes its own ClusterQueue (only its namespace may use it) and LocalQueue. A recorder watches
every JobSet of the namespace and keeps each change of ``spec.suspend``: Kueue and the operator fighting
over that field would show as extra flips.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from tests.e2e.kube import condition, get, kubectl, list_items, wait_for
from tests.e2e.operator_proc import OperatorProcess, delete_rljobs, install_crd

pytestmark = pytest.mark.cluster

FLAVOR = "v5e-2x4"  # hack/cluster/nodepools.txt; its ResourceFlavor comes from hack/cluster/kueue.sh
CHIPS = 8  # one RLJob on that pool
POOL = "cloud.google.com/gke-nodepool"
RUN_FOREVER = "kwok.rljob.dev/run-forever"  # hack/cluster/stages: such pods never complete on their own


@pytest.fixture(scope="module")
def operator(cluster: Any) -> Iterator[OperatorProcess]:
    install_crd()
    op = OperatorProcess(cluster.logs, ["test-kueue-*"], identity="kueue")
    op.start()
    try:
        yield op
    finally:
        op.stop()


class SuspendRecorder:
    """Every ``spec.suspend`` value each JobSet of a namespace had, in order, from a watch."""

    def __init__(self, ns: str) -> None:
        config.load_kube_config(config_file=os.environ["KUBECONFIG"])  # set by the cluster fixture
        self.api = client.CustomObjectsApi()
        self.ns = ns
        self.values: dict[str, list[bool]] = {}
        self._watch = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = None  # resume after a dropped connection, so no change is missed
        while not self._stopped:
            try:
                stream = self._watch.stream(
                    self.api.list_namespaced_custom_object, "jobset.x-k8s.io", "v1alpha2", self.ns,
                    "jobsets", resource_version=version,
                )  # fmt: skip
                for event in stream:
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    seen = self.values.setdefault(obj["metadata"]["name"], [])
                    value = bool(obj["spec"].get("suspend"))
                    if not seen or seen[-1] != value:
                        seen.append(value)
            except Exception:  # connection dropped (or closed by stop()): reconnect unless stopped
                time.sleep(0.5)

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()


@pytest.fixture
def ns(namespace: str, operator: OperatorProcess) -> Iterator[str]:
    """A watched namespace with a LocalQueue ``lq`` on its own ClusterQueue (quota 0 until ``quota``)."""
    assert namespace.startswith("test-kueue-"), "test names must start with test_kueue_"
    kubectl("apply", "-f", "-", input=_yaml(cluster_queue(namespace, 0), local_queue(namespace)))
    yield namespace
    print("---- operator log ----\n" + operator.tail())
    print(kubectl("get", "rljobs,jobsets,workloads,pods,events", "-n", namespace, "-o", "wide", check=False))
    delete_rljobs(namespace)
    wait_for(lambda: not list_items("pods", namespace), timeout=120, message="trainer pods gone")
    kubectl("delete", "clusterqueue", namespace, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def suspends(ns: str) -> Iterator[SuspendRecorder]:
    rec = SuspendRecorder(ns)
    yield rec
    rec.stop()


def _yaml(*objs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(objs)


def cluster_queue(ns: str, chips: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": ns},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "resourceGroups": [
                {
                    "coveredResources": ["google.com/tpu"],
                    "flavors": [
                        {"name": FLAVOR, "resources": [{"name": "google.com/tpu", "nominalQuota": chips}]}
                    ],
                }
            ],
        },
    }


def local_queue(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": ns},
        "spec": {"clusterQueue": ns},
    }


def quota(ns: str, chips: int) -> None:
    kubectl("apply", "-f", "-", input=_yaml(cluster_queue(ns, chips)))


def submit(ns: str, name: str, *, forever: bool = False, suspend: bool = False) -> None:
    annotations = {RUN_FOREVER: "true"} if forever else {}
    m = {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:test",
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
            "queueName": "lq",
            "suspend": suspend,
            "podAnnotations": annotations,
        },
    }
    kubectl("apply", "-n", ns, "-f", "-", input=_yaml(m))


def phase(ns: str, name: str) -> str | None:
    return ((get("rljob", name, ns) or {}).get("status") or {}).get("phase")


def wait_phase(ns: str, name: str, want: str, timeout: float = 180) -> None:
    wait_for(lambda: phase(ns, name) == want, timeout=timeout, message=f"RLJob {name} phase {want}")


def workload(ns: str, name: str) -> dict[str, Any] | None:
    """The Kueue Workload of RLJob ``name`` (its JobSet's), found by Kueue's job-uid label."""
    js = get("jobset", name, ns)
    if js is None:
        return None
    found = list_items("workloads", ns, f"kueue.x-k8s.io/job-uid={js['metadata']['uid']}")
    assert len(found) <= 1, found
    return found[0] if found else None


def admitted(ns: str, name: str) -> bool:
    return (condition(workload(ns, name), "Admitted") or {}).get("status") == "True"


def jobset_suspended(ns: str, name: str) -> bool:
    return bool((get("jobset", name, ns) or {})["spec"].get("suspend"))


def pods(ns: str, name: str) -> list[dict[str, Any]]:
    return list_items("pods", ns, f"rljob.dev/name={name}")


def stays(fn: Any, seconds: float, message: str) -> None:
    """``fn`` holds at every check for ``seconds`` (the negative half of "waits until")."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert fn(), message
        time.sleep(1)


def finish(ns: str, name: str) -> None:
    """Let a run-forever RLJob's pods complete: kwok's pod-complete stage takes them once the annotation is
    gone."""
    for pod in pods(ns, name):
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, f"{RUN_FOREVER}-")


def events_of(ns: str, name: str) -> set[str]:
    items = list_items("events", ns)
    return {e["reason"] for e in items if e["involvedObject"].get("name") == name}


# --- tests -----------------------------------------------------------------------------------------------


def test_kueue_queued_rljob_stays_suspended_until_admitted(ns: str, suspends: SuspendRecorder) -> None:
    submit(ns, "a")
    wait_phase(ns, "a", "Queued", timeout=120)
    wait_for(lambda: workload(ns, "a"), timeout=30, message="Kueue made a Workload for the JobSet")
    # quota 0: Kueue cannot admit it; nothing may run meanwhile
    stays(lambda: jobset_suspended(ns, "a") and not pods(ns, "a") and phase(ns, "a") == "Queued", 10,
          "a queued RLJob ran before Kueue admitted it")  # fmt: skip
    assert not admitted(ns, "a")
    rlj = get("rljob", "a", ns)
    assert (condition(rlj, "Queued") or {}).get("reason") == "WaitingForAdmission"
    assert "Queued" in kubectl("get", "rljob", "a", "-n", ns), "kubectl get rlj shows the phase"

    quota(ns, CHIPS)
    wait_for(lambda: admitted(ns, "a"), timeout=120, message="Kueue admits a once the quota allows")
    wait_for(lambda: not jobset_suspended(ns, "a"), timeout=30, message="Kueue unsuspends the JobSet")
    got = wait_for(lambda: pods(ns, "a"), timeout=120, message="pods after admission")
    # Kueue put the ResourceFlavor's node labels on the pods
    assert {p["spec"]["nodeSelector"][POOL] for p in got} == {FLAVOR}
    wait_for(lambda: phase(ns, "a") not in ("Queued", None), timeout=120, message="a leaves Queued")
    assert (condition(get("rljob", "a", ns), "Queued") or {}).get("status") == "False"
    wait_for(lambda: "Admitted" in events_of(ns, "a"), timeout=30, message="Admitted event on the RLJob")
    assert suspends.values["a"] == [True, False], suspends.values


def test_kueue_two_rljobs_on_a_quota_of_one_run_one_after_the_other(
    ns: str, suspends: SuspendRecorder
) -> None:
    quota(ns, CHIPS)
    submit(ns, "first", forever=True)
    wait_for(lambda: admitted(ns, "first"), timeout=120, message="first admitted")
    submit(ns, "second")
    wait_phase(ns, "second", "Queued", timeout=120)
    wait_for(lambda: workload(ns, "second"), timeout=30, message="second's Workload")
    wait_phase(ns, "first", "Running")
    stays(lambda: not admitted(ns, "second") and jobset_suspended(ns, "second") and not pods(ns, "second"),
          10, "second admitted while first holds the whole quota")  # fmt: skip

    finish(ns, "first")
    wait_phase(ns, "first", "Succeeded")
    wait_for(lambda: admitted(ns, "second"), timeout=120, message="second admitted after first finished")
    first_done = condition(workload(ns, "first"), "Finished")
    second_in = condition(workload(ns, "second"), "Admitted")
    assert first_done and second_in and second_in["lastTransitionTime"] >= first_done["lastTransitionTime"]
    wait_phase(ns, "second", "Succeeded")
    assert suspends.values == {"first": [True, False], "second": [True, False]}


def test_kueue_suspending_an_admitted_rljob_frees_the_quota(ns: str, suspends: SuspendRecorder) -> None:
    quota(ns, CHIPS)
    submit(ns, "a", forever=True)
    wait_phase(ns, "a", "Running")
    submit(ns, "b", forever=True)
    wait_phase(ns, "b", "Queued", timeout=120)

    kubectl("patch", "rljob", "a", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_phase(ns, "a", "Suspended", timeout=120)
    wait_for(lambda: admitted(ns, "b"), timeout=120, message="b admitted once a is suspended")
    wait_for(lambda: not pods(ns, "a"), timeout=120, message="a's pods removed")
    assert (workload(ns, "a") or {})["spec"]["active"] is False
    wait_phase(ns, "b", "Running")

    # Resumed while b holds the quota: a goes back to the queue, it does not start.
    kubectl("patch", "rljob", "a", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_phase(ns, "a", "Queued", timeout=120)
    stays(lambda: not admitted(ns, "a") and jobset_suspended(ns, "a") and not pods(ns, "a"), 10,
          "a resumed past the quota")  # fmt: skip
    assert suspends.values == {"a": [True, False, True], "b": [True, False]}


def test_kueue_rljob_created_suspended_is_not_admitted_until_resumed(
    ns: str, suspends: SuspendRecorder
) -> None:
    quota(ns, CHIPS)
    submit(ns, "held", suspend=True)
    wait_phase(ns, "held", "Suspended", timeout=120)
    stays(lambda: workload(ns, "held") is None and not pods(ns, "held"), 10,
          "Kueue took a suspended RLJob (it would admit and start it)")  # fmt: skip
    kubectl("patch", "rljob", "held", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: admitted(ns, "held"), timeout=120, message="admitted once resumed")
    wait_for(lambda: pods(ns, "held"), timeout=120, message="pods once admitted")
    assert suspends.values == {"held": [True, False]}
