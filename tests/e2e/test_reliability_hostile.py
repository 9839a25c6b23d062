"""Hostile RLJobs (tests/e2e/hostile/cases.py) are refused by ``kubectl apply`` with the operator running.

Each refusal must name the field, so a user can fix the manifest from the message alone, and nothing may
come of it: no RLJob stored, so no ConfigMap and no JobSet. Changes to a running RLJob's immutable fields
are refused the same way and leave its JobSet as it was.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.api.manifests import merge
from tests.e2e.hostile.cases import CREATE_CASES, UPDATE_CASES, Hostile, HostileUpdate
from tests.e2e.kube import KubectlError, fresh_namespace, get, kubectl, kubectl_json, wait_for
from tests.e2e.operator_proc import OperatorProcess, delete_rljobs, install_crd

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def hostile(cluster: Any) -> Iterator[tuple[str, OperatorProcess]]:
    """One namespace for all cases (a namespace per case would cost more than the cases), watched by an
    operator of its own."""
    install_crd()
    with fresh_namespace("test-reliability-hostile") as ns:
        op = OperatorProcess(cluster.logs, [ns], identity="hostile")
        op.start()
        try:
            yield ns, op
        finally:
            print("---- operator log ----\n" + op.tail())
            delete_rljobs(ns)  # while the operator runs: it drops its finalizers
            op.stop()


def apply(obj: dict[str, Any], ns: str) -> str:
    return kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(obj, allow_unicode=True))


def case_name(i: int) -> str:
    return f"hostile-{i}"


def test_reliability_at_least_40_cases() -> None:
    assert len(CREATE_CASES) + len(UPDATE_CASES) >= 40
    assert len({c.id for c in CREATE_CASES}) == len(CREATE_CASES)


@pytest.mark.parametrize("i", range(len(CREATE_CASES)), ids=[c.id for c in CREATE_CASES])
def test_reliability_hostile_create_is_refused(hostile: tuple[str, OperatorProcess], i: int) -> None:
    ns, _ = hostile
    case: Hostile = CREATE_CASES[i]
    with pytest.raises(KubectlError) as refused:
        apply(case.manifest(case_name(i)), ns)
    message = refused.value.stderr
    assert case.field in message, message
    if case.name is None:
        assert get("rljob", case_name(i), ns) is None


def test_reliability_hostile_creates_left_nothing(hostile: tuple[str, OperatorProcess]) -> None:
    """After every refused create: no RLJob, JobSet or ConfigMap of ours; the operator is alive and did no
    create at all."""
    ns, op = hostile
    time.sleep(3)  # time for an operator that wrongly saw something to act on it
    assert kubectl_json("get", "rljobs", "-n", ns)["items"] == []
    assert kubectl_json("get", "jobsets", "-n", ns)["items"] == []
    config_maps = [cm["metadata"]["name"] for cm in kubectl_json("get", "configmaps", "-n", ns)["items"]]
    assert config_maps in ([], ["kube-root-ca.crt"]), config_maps
    assert op.running, op.tail()
    assert op.metric("rljob_operator_reconcile_duration_seconds_count", handler="create") == 0


@pytest.fixture(scope="module")
def running(hostile: tuple[str, OperatorProcess]) -> dict[str, Any]:
    """A valid RLJob whose JobSet exists (pods kept Running by kwok's run-forever hook)."""
    ns, _ = hostile
    name = "victim"
    obj = {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "ghcr.io/example/rljob-trainer:0.1.0",
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
            "podAnnotations": {"kwok.rljob.dev/run-forever": "true"},
        },
    }
    apply(obj, ns)
    wait_for(lambda: get("jobset", name, ns), timeout=60, message="JobSet of the running RLJob")

    def with_status() -> dict[str, Any] | None:
        rljob = get("rljob", name, ns)
        return rljob if rljob and (rljob.get("status") or {}).get("jobSetName") else None

    return wait_for(with_status, timeout=60, message="status.jobSetName")


@pytest.mark.parametrize("case", UPDATE_CASES, ids=[c.id for c in UPDATE_CASES])
def test_reliability_hostile_update_is_refused(
    hostile: tuple[str, OperatorProcess], running: dict[str, Any], case: HostileUpdate
) -> None:
    ns, _ = hostile
    name = running["metadata"]["name"]
    before = get("jobset", name, ns)
    assert before is not None
    changed = {
        "apiVersion": running["apiVersion"],
        "kind": running["kind"],
        "metadata": {"name": name},
        "spec": merge(running["spec"], case.patch),
    }
    with pytest.raises(KubectlError) as refused:
        apply(changed, ns)
    assert f"{case.field} is immutable after creation" in refused.value.stderr, refused.value.stderr
    with pytest.raises(KubectlError) as patched:
        kubectl("patch", "rljob", name, "-n", ns, "--type=merge", "-p", yaml.safe_dump({"spec": case.patch}))
    assert f"{case.field} is immutable after creation" in patched.value.stderr
    after = get("jobset", name, ns)
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"] == before["spec"]
    assert (get("rljob", name, ns) or {})["metadata"]["generation"] == 1


def test_reliability_hostile_updates_left_one_jobset(
    hostile: tuple[str, OperatorProcess], running: dict[str, Any]
) -> None:
    ns, op = hostile
    assert [j["metadata"]["name"] for j in kubectl_json("get", "jobsets", "-n", ns)["items"]] == ["victim"]
    assert op.running, op.tail()
