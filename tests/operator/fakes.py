"""An in-memory stand-in for ``rljob_operator.kube.Kube``: enough apiserver behaviour (create-once, 409 on a
stale resourceVersion, status kept apart from spec) to test ``reconcile`` without a cluster."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes.client.exceptions import ApiException
from rljob_operator.kube import controller_uid


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, ...]] = []
        self._rv = 0
        self.conflicts_to_inject = 0
        self.create_errors: dict[str, ApiException] = {}
        """kind -> the error the next create of that kind raises (e.g. a webhook's 422), then cleared."""

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_rljob(self, manifest: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
        m = copy.deepcopy(manifest)
        m["metadata"].update(uid=uid, resourceVersion=self._next_rv())
        self.objects[("RLJob", m["metadata"]["namespace"], m["metadata"]["name"])] = m
        return copy.deepcopy(m)

    def create_owned(self, obj: dict[str, Any], owner_uid: str) -> tuple[dict[str, Any], bool]:
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.calls.append(("create", *key))
        if obj["kind"] in self.create_errors:
            raise self.create_errors.pop(obj["kind"])
        if key in self.objects:
            existing = self.objects[key]
            assert controller_uid(existing) == owner_uid
            return copy.deepcopy(existing), False
        new = copy.deepcopy(obj)
        new["metadata"].update(
            resourceVersion=self._next_rv(), creationTimestamp="2025-01-01T00:00:00Z", uid=f"uid-{key[2]}"
        )
        self.objects[key] = new
        return copy.deepcopy(new), True

    def get_jobset(self, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("JobSet", ns, name)))

    def set_jobset_suspend(self, ns: str, name: str, suspend: bool) -> None:
        self.calls.append(("suspend", ns, name, str(suspend)))
        js = self.objects.get(("JobSet", ns, name))
        if js is None:
            raise ApiException(status=404)
        js["spec"]["suspend"] = suspend

    def label_jobset(self, ns: str, name: str, labels: dict[str, str]) -> None:
        self.calls.append(("label", ns, name, *sorted(labels.items())[0]))
        self.objects[("JobSet", ns, name)]["metadata"].setdefault("labels", {}).update(labels)

    def add_workload(self, ns: str, jobset_uid: str) -> None:
        """What Kueue does for a JobSet with a queue label: one Workload, labelled with the JobSet's UID."""
        self.objects[("Workload", ns, f"jobset-{jobset_uid}")] = {"jobUID": jobset_uid, "active": True}

    def set_workload_active(self, ns: str, jobset_uid: str, active: bool) -> bool:
        self.calls.append(("active", ns, jobset_uid, str(active)))
        found = [
            w
            for (k, n, _), w in self.objects.items()
            if (k, n) == ("Workload", ns) and w["jobUID"] == jobset_uid
        ]
        for w in found:
            w["active"] = active
        return bool(found)

    def get_rljob(self, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("RLJob", ns, name)))

    def patch_rljob_status(self, ns: str, name: str, status: dict[str, Any], resource_version: str) -> None:
        obj = self.objects[("RLJob", ns, name)]
        if self.conflicts_to_inject:
            self.conflicts_to_inject -= 1
            obj["metadata"]["resourceVersion"] = self._next_rv()  # someone else wrote in between
        if obj["metadata"]["resourceVersion"] != resource_version:
            raise ApiException(status=409)
        obj["status"] = copy.deepcopy(status)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.calls.append(("status", ns, name, status["phase"]))

    def rljob_status(self, ns: str = "default", name: str = "x") -> dict[str, Any]:
        return self.objects[("RLJob", ns, name)].get("status", {})
