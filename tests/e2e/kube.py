"""Small helpers for tests against the simulated cluster (hack/cluster/up.sh).

They shell out to the `kubectl` built by hack/cluster/build.sh, which the
`cluster` fixture (tests/e2e/conftest.py) puts first on PATH, together with
KUBECONFIG. Output is parsed from JSON, so assertions see real API objects.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class KubectlError(RuntimeError):
    """kubectl exited non-zero; `stderr` holds the apiserver's message."""

    def __init__(self, args: tuple[str, ...], returncode: int, stdout: str, stderr: str):
        super().__init__(f"kubectl {' '.join(args)} -> exit {returncode}: {stderr.strip()}")
        self.args_ = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> str:
    """Run kubectl with `args`; return stdout. Raise KubectlError on failure if `check`."""
    proc = subprocess.run(
        ["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise KubectlError(args, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


@contextlib.contextmanager
def fresh_namespace(prefix: str) -> Iterator[str]:
    """A new namespace ``<prefix>-<6 hex>``, deleted on exit without waiting: tests share one cluster, so
    each works in its own namespace and a test's leftovers never meet another's."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def kubectl_json(*args: str, input: str | None = None) -> Any:
    """Run kubectl with `-o json` and return the parsed object."""
    return json.loads(kubectl(*args, "-o", "json", input=input))


def _dump(objs: dict | Iterable[dict]) -> str:
    if isinstance(objs, dict):
        objs = [objs]
    return yaml.safe_dump_all(list(objs), sort_keys=False)


def apply_yaml(objs: dict | Iterable[dict], namespace: str | None = None, server_side: bool = False) -> list:
    """`kubectl apply` one object or several (dicts); return the applied objects as the server has them."""
    args = ["apply", "-f", "-"]
    if namespace:
        args += ["-n", namespace]
    if server_side:
        args.append("--server-side")
    out = kubectl_json(*args, input=_dump(objs))
    return out.get("items", [out]) if out.get("kind") == "List" else [out]


def create(obj: dict, namespace: str | None = None, dry_run: bool = False) -> dict:
    """`kubectl create` one object; return it as stored (after admission/defaulting)."""
    args = ["create", "-f", "-"]
    if namespace:
        args += ["-n", namespace]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl_json(*args, input=_dump(obj))


def get(kind: str, name: str, namespace: str | None = None) -> dict | None:
    """The object, or None if it does not exist."""
    args = ["get", kind, name, "--ignore-not-found"]
    if namespace:
        args += ["-n", namespace]
    out = kubectl(*args, "-o", "json")
    return json.loads(out) if out.strip() else None


def list_items(kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
    """Objects of `kind` (optionally in `namespace`, filtered by label `selector`)."""
    args = ["get", kind]
    args += ["-n", namespace] if namespace else ["-A"]
    if selector:
        args += ["-l", selector]
    return kubectl_json(*args)["items"]


def condition(obj: dict | None, type_: str) -> dict | None:
    """The status condition of `type_` on `obj`, if any."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def wait_for(fn: Callable[[], T], timeout: float = 60, interval: float = 0.5, message: str = "") -> T:
    """Call `fn` until it returns something truthy (returned) or `timeout` seconds pass.

    Exceptions from `fn` count as "not yet" (the API may be briefly unavailable);
    the last value or exception is reported in the TimeoutError.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = fn()
            if value:
                return value
            last = value
        except Exception as exc:  # retried: reported if it persists
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{message or fn!r}: not true after {timeout}s (last: {last!r})")
        time.sleep(interval)


def loopback_tpu_node(
    name: str, accelerator: str, topology: str, machine: str, chips: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A kwok TPU node of its own pool (named ``name``) whose InternalIP is 127.0.0.1: a host-network pod
    placed there has a loopback pod IP, so a local process can stand in for it (tests/e2e/test_progress.py,
    bench/burst.py --running). ``labels`` adds to GKE's TPU node labels (e.g. a reservation's)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "node.kubernetes.io/instance-type": machine,
                "cloud.google.com/gke-nodepool": name,
                "cloud.google.com/gke-tpu-accelerator": accelerator,
                "cloud.google.com/gke-tpu-topology": topology,
                **(labels or {}),
            },
        },
        "spec": {"taints": [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "capacity": {"cpu": "200", "memory": "800Gi", "pods": "110", "google.com/tpu": str(chips)},
            "allocatable": {"cpu": "200", "memory": "800Gi", "pods": "110", "google.com/tpu": str(chips)},
        },
    }
