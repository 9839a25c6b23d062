"""All Kubernetes API calls of the operator (the one module that does I/O besides kopf itself).

Create-once semantics: objects are created, never updated (JobSet replicated Jobs are immutable and Kueue
rewrites scheduling fields while a JobSet is suspended; re-applying the rendered spec would fight it). An
object that already exists is success if this RLJob controls it (an earlier attempt created it) and a
temporary error if someone else does (e.g. a deleted RLJob of the same name whose children the garbage
collector has not removed yet).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from rljob.api.spec import GROUP, PLURAL, VERSION
from rljob_operator import names


def load_config() -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (``$KUBECONFIG`` or ~/.kube)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG read now: the client's default is read once, when the client is imported
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))


class Kube:
    """Typed helpers over one ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)

    # --- children ------------------------------------------------------------------------------------

    def create_owned(self, obj: dict[str, Any], owner_uid: str) -> tuple[dict[str, Any], bool]:
        """Create ``obj`` (ConfigMap or JobSet): (the object, True), or (the existing one, False) when one
        controlled by ``owner_uid`` is already there."""
        ns, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["kind"]
        try:
            return self._create(kind, ns, obj), True
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = self._get(kind, ns, name)
        if existing is None:  # deleted between our create and get: try again soon
            raise kopf.TemporaryError(f"{kind} {name} vanished while being created", delay=2)
        controller = controller_uid(existing)
        if controller != owner_uid:
            raise kopf.TemporaryError(
                f"{kind} {ns}/{name} exists and is controlled by {controller or 'nobody'}, not this RLJob; "
                "waiting for it to be removed",
                delay=10,
            )
        return existing, False

    def _create(self, kind: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        # Strict: a field the server's schema does not know is an error, never silently pruned (jobset_crd)
        if kind == "ConfigMap":
            created = self.core.create_namespaced_config_map(ns, obj, field_validation="Strict")
            return self.api_client.sanitize_for_serialization(created)
        return self.custom.create_namespaced_custom_object(
            names.JOBSET_GROUP, names.JOBSET_VERSION, ns, names.JOBSET_PLURAL, obj, field_validation="Strict"
        )

    def _get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        try:
            if kind == "ConfigMap":
                return self.api_client.sanitize_for_serialization(
                    self.core.read_namespaced_config_map(name, ns)
                )
            return self.custom.get_namespaced_custom_object(
                names.JOBSET_GROUP, names.JOBSET_VERSION, ns, names.JOBSET_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_jobset(self, ns: str, name: str) -> dict[str, Any] | None:
        return self._get("JobSet", ns, name)

    def set_jobset_suspend(self, ns: str, name: str, suspend: bool) -> None:
        """Toggle only ``spec.suspend``: a merge patch of one field, nothing else of the spec is touched."""
        self._patch_jobset(ns, name, {"spec": {"suspend": suspend}})

    def label_jobset(self, ns: str, name: str, labels: dict[str, str]) -> None:
        """Add labels (a merge patch of ``metadata.labels``; the spec is untouched)."""
        self._patch_jobset(ns, name, {"metadata": {"labels": labels}})

    def _patch_jobset(self, ns: str, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            names.JOBSET_GROUP, names.JOBSET_VERSION, ns, names.JOBSET_PLURAL, name, body
        )

    def set_workload_active(self, ns: str, jobset_uid: str, active: bool) -> bool:
        """Set ``spec.active`` of the Kueue Workload(s) of a JobSet; False when Kueue has made none yet."""
        api = (names.KUEUE_GROUP, names.KUEUE_VERSION, ns, names.WORKLOAD_PLURAL)
        found = self.custom.list_namespaced_custom_object(
            *api, label_selector=f"{names.JOB_UID_LABEL}={jobset_uid}"
        )["items"]
        for workload in found:
            self.custom.patch_namespaced_custom_object(
                *api, workload["metadata"]["name"], {"spec": {"active": active}}
            )
        return bool(found)

    # --- the RLJob -----------------------------------------------------------------------------------

    def get_rljob(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_rljob_status(self, ns: str, name: str, status: dict[str, Any], resource_version: str) -> None:
        """Write the whole status, only if the RLJob is still at ``resource_version`` (409 otherwise): two
        writers (the create handler and the JobSet watcher) must not undo each other's transitions."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, name, body)

    # --- progress --------------------------------------------------------------------------------------

    def host0_address(self, ns: str, rljob: str) -> str | None:
        """IP of trainer host 0 (slice 0, completion index 0) of ``rljob``: its running pod's IP, which for
        host-network pods is the node's. Of several (a restart's new pod beside an old terminating one),
        the newest restart attempt. None when no such pod runs."""
        selector = ",".join(
            (f"{names.LABEL_NAME}={rljob}", f"{names.JOB_INDEX_LABEL}=0", f"{names.COMPLETION_INDEX_LABEL}=0")
        )
        pods = self.core.list_namespaced_pod(ns, label_selector=selector).items
        running = [
            p
            for p in pods
            if p.status
            and p.status.phase == "Running"
            and p.status.pod_ip
            and not p.metadata.deletion_timestamp
        ]
        if not running:
            return None

        def attempt(p: Any) -> int:
            return int((p.metadata.labels or {}).get(names.RESTART_ATTEMPT_LABEL, "0") or 0)

        return max(running, key=attempt).status.pod_ip


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A kopf Body (or any mapping) as plain nested dicts."""
    return {k: (plain(v) if isinstance(v, Mapping) else v) for k, v in body.items()}


def controller_uid(obj: dict[str, Any]) -> str | None:
    """UID of the object's controller owner, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def error_kind(exc: BaseException) -> str:
    """The ``kind`` label of ``rljob_operator_reconcile_errors_total`` for an exception."""
    if isinstance(exc, ApiException):
        return "conflict" if exc.status == 409 else "api"
    if isinstance(exc, kopf.TemporaryError):
        return "temporary"
    return "unexpected"
