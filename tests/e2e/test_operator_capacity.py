"""Capacity types end to end: Spot, reservation and flex-start RLJobs land only on the fake node pools
labelled (and tainted) for them (hack/cluster/nodepools-capacity.txt: v5e-2x2 on-demand, -spot, -resv,
-flex, all the same shape), and a reservation nobody has leaves the pod Pending. The scheduler decides, from what the operator rendered."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import get, kubectl, list_items, wait_for
from tests.e2e.operator_proc import OperatorProcess, install_crd

pytestmark = pytest.mark.cluster

POOL = "cloud.google.com/gke-nodepool"
REPO = Path(__file__).resolve().parents[2]


CAPACITY_POOLS = REPO / "hack" / "cluster" / "nodepools-capacity.txt"


@pytest.fixture(scope="module")
def capacity_nodes(cluster: Any) -> Iterator[list[str]]:
    """The capacity pools' fake nodes, for this module only (other suites count the standing nodes)."""
    manifests = subprocess.run(
        [str(REPO / "hack" / "cluster" / "nodes.sh"), str(CAPACITY_POOLS)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    nodes = [d["metadata"]["name"] for d in yaml.safe_load_all(manifests) if d]
    kubectl("apply", "-f", "-", input=manifests)
    try:
        for node in nodes:
            kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=60s")
        yield nodes
    finally:
        kubectl("delete", "node", *nodes, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(cluster: Any, capacity_nodes: list[str]) -> Iterator[OperatorProcess]:
    install_crd()
    with OperatorProcess(cluster.logs, ["test-operator-capacity-*"], identity="capacity") as op:
        yield op


def rljob(name: str, capacity: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:test",
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2", "capacity": capacity},
            "podAnnotations": {"kwok.rljob.dev/run-forever": "true"},
        },
    }


def pool_of(ns: str, name: str) -> str | None:
    pods = list_items("pods", ns, f"rljob.dev/name={name}")
    if not pods or not pods[0]["spec"].get("nodeName"):
        return None
    return get("node", pods[0]["spec"]["nodeName"])["metadata"]["labels"][POOL]


@pytest.mark.parametrize(
    ("capacity", "pool"),
    [
        ({"type": "Spot"}, "v5e-2x2-spot"),
        ({"type": "Reservation", "reservation": "rljob-res"}, "v5e-2x2-resv"),
        ({"type": "FlexStart"}, "v5e-2x2-flex"),
    ],
    ids=["spot", "reservation", "flex-start"],
)
def test_operator_capacity_pod_lands_on_its_pool(
    namespace: str, operator: OperatorProcess, capacity_nodes: list[str], capacity: dict[str, Any], pool: str
) -> None:
    """Only on its pool: while that pool is cordoned the pod stays Pending, although three pools of the same
    shape have room; uncordoned, it lands there."""
    own = [n for n in capacity_nodes if get("node", n)["metadata"]["labels"][POOL] == pool]
    assert own, capacity_nodes
    for node in own:
        kubectl("cordon", node)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=_yaml(rljob("cap", capacity)))
        pods = wait_for(
            lambda: list_items("pods", namespace, "rljob.dev/name=cap"), timeout=120, message="pod"
        )
        wait_for(
            lambda: any(
                e.get("reason") == "FailedScheduling"
                and e["involvedObject"].get("name") == pods[0]["metadata"]["name"]
                for e in list_items("events", namespace)
            ),
            timeout=60,
            message="FailedScheduling while its pool is cordoned",
        )
        assert pool_of(namespace, "cap") is None, "scheduled onto another pool"
        for node in own:
            kubectl("uncordon", node)
        landed = wait_for(lambda: pool_of(namespace, "cap"), timeout=120, message="trainer pod scheduled")
        assert landed == pool
    finally:
        for node in own:
            kubectl("uncordon", node, check=False)
        print(operator.tail())
        kubectl("delete", "rljobs", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)


def test_operator_capacity_unknown_reservation_stays_pending(
    namespace: str, operator: OperatorProcess
) -> None:
    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=_yaml(rljob("nores", {"type": "Reservation", "reservation": "nobodys"})),
    )
    try:
        pods = wait_for(
            lambda: list_items("pods", namespace, "rljob.dev/name=nores"), timeout=120, message="pod"
        )
        events = wait_for(
            lambda: [e for e in list_items("events", namespace) if e.get("reason") == "FailedScheduling"],
            timeout=60,
            message="FailedScheduling event",
        )
        assert events and not get("pod", pods[0]["metadata"]["name"], namespace)["spec"].get("nodeName")
    finally:
        kubectl("delete", "rljobs", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)


def _yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj)
