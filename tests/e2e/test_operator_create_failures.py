"""A JobSet create that the real apiserver refuses shows on the RLJob as a condition and a phase, not only
as an Event (``reconcile._create_failed``, ``status.create_failed_status``).

Two refusals the apiserver really makes, each confined to the test's own namespace:

* 403, retryable: a ResourceQuota of zero JobSets. The RLJob stays Pending with ``Created`` False, reason
  ``CreateFailed`` and the apiserver's message; once the quota is gone, the operator's retry creates it.
* 422, final: a ValidatingAdmissionPolicy that denies JobSets (as an admission webhook or policy of a
  cluster would). The RLJob is Failed with reason ``CreateRejected`` and the policy's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.kube import KubectlError, condition, get, kubectl, wait_for
from tests.e2e.operator_proc import OperatorProcess, delete_rljobs, install_crd

pytestmark = pytest.mark.cluster

JOBSETS = "jobsets.jobset.x-k8s.io"


@pytest.fixture(scope="module")
def operator(cluster: Any) -> Iterator[OperatorProcess]:
    install_crd()
    with OperatorProcess(cluster.logs, ["test-operator-create-*"], identity="create-failures") as op:
        yield op


def _apply(*objs: dict[str, Any], ns: str | None = None) -> None:
    kubectl("apply", *(["-n", ns] if ns else []), "-f", "-", input=yaml.safe_dump_all(objs))


def _rljob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"image": "rljob-trainer:test", "tpu": {"accelerator": "tpu-v6e-slice", "topology": "1x1"}},
    }


def _status(ns: str, name: str) -> dict[str, Any]:
    return (get("rljob", name, ns) or {}).get("status") or {}


def test_operator_create_refused_by_quota_is_pending_with_the_reason_then_created(
    namespace: str, operator: OperatorProcess
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-jobsets"},
        "spec": {"hard": {f"count/{JOBSETS}": "0"}},
    }
    _apply(quota, ns=namespace)
    wait_for(  # the quota controller has counted: admission now says "exceeded quota", not "unknown"
        lambda: (get("resourcequota", "no-jobsets", namespace) or {}).get("status", {}).get("hard"),
        timeout=60,
        message="quota status",
    )
    try:
        _apply(_rljob("quota"), ns=namespace)
        created = wait_for(
            lambda: condition(get("rljob", "quota", namespace), "Created"), timeout=90, message="Created"
        )
        assert (created["status"], created["reason"]) == ("False", "CreateFailed"), created
        assert "creating the JobSet failed (403)" in created["message"], created
        assert "exceeded quota: no-jobsets" in created["message"], created
        assert _status(namespace, "quota")["phase"] == "Pending"
        assert get("jobset", "quota", namespace) is None

        kubectl("delete", "resourcequota", "no-jobsets", "-n", namespace)
        wait_for(  # kopf retries the create handler 30 s after the failure
            lambda: (condition(get("rljob", "quota", namespace), "Created") or {}).get("status") == "True",
            timeout=120,
            message="Created True after the quota is gone",
        )
        assert get("jobset", "quota", namespace) is not None
        assert _status(namespace, "quota")["jobSetName"] == "quota"
    finally:
        print(operator.tail())
        delete_rljobs(namespace)


@pytest.fixture
def deny_jobsets(namespace: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy + binding that refuse every JobSet create in ``namespace`` (only)."""
    name = f"rljob-test-deny-jobsets-{uuid.uuid4().hex[:6]}"
    message = "JobSets are not allowed in this namespace (test policy)"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["jobset.x-k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["jobsets"],
                    }
                ]
            },
            "validations": [{"expression": "false", "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    _apply(policy, binding)
    probe = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"replicatedJobs": []},
    }

    def refused() -> bool:  # the apiserver loads policies asynchronously
        try:
            kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe))
        except KubectlError as exc:
            return message in exc.stderr
        return False

    try:
        wait_for(refused, timeout=60, message="policy in force")
        yield message
    finally:
        kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found", check=False)
        kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found", check=False)


def test_operator_create_rejected_as_invalid_fails_the_rljob_with_the_message(
    namespace: str, operator: OperatorProcess, deny_jobsets: str
) -> None:
    try:
        _apply(_rljob("denied"), ns=namespace)
        wait_for(lambda: _status(namespace, "denied").get("phase") == "Failed", timeout=90, message="Failed")
        rljob = get("rljob", "denied", namespace)
        for type_ in ("Created", "Failed"):
            cond = condition(rljob, type_)
            assert cond is not None and cond["reason"] == "CreateRejected", (type_, cond)
            assert "creating the JobSet failed (422)" in cond["message"] and deny_jobsets in cond["message"]
        assert condition(rljob, "Created")["status"] == "False"
        assert get("jobset", "denied", namespace) is None
    finally:
        print(operator.tail())
        delete_rljobs(namespace)
