"""`kubectl get rlj` shows a real trainer's step and reward moving, on the simulated cluster.

The RLJob's host 0 pod is scheduled onto a fake TPU node (kwok) of this test whose address is 127.0.0.1,
so the host-network pod's IP is loopback; a real tiny trainer runs as a local process standing in for that
pod, serving /metrics on the RLJob's metrics port. The operator (subprocess, progress read every 2 s) finds
host 0 by its pod, reads it and writes status.progress, which the printer columns show.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests import procs
from tests.e2e.kube import get, kubectl, list_items, loopback_tpu_node, wait_for
from tests.e2e.operator_proc import OperatorProcess, delete_rljobs, install_crd
from tests.observability import runs

pytestmark = pytest.mark.cluster

TPU = {
    "accelerator": "tpu-v5-lite-podslice",
    "topology": "2x2",
}  # single host, 4 chips: no shared pool has it


@pytest.fixture
def operator(cluster: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[OperatorProcess]:
    install_crd()
    monkeypatch.setenv("RLJOB_PROGRESS_INTERVAL_SECONDS", "2")
    with OperatorProcess(cluster.logs, ["test-progress-*"], identity="progress") as op:
        yield op
        delete_rljobs(namespace)  # while the operator runs: it drops the finalizer of a Running RLJob


@pytest.fixture
def node(cluster: Any) -> Iterator[str]:
    name = f"gke-rljob-i14-progress-{uuid.uuid4().hex[:6]}"
    node = loopback_tpu_node(name, TPU["accelerator"], TPU["topology"], "ct5lp-hightpu-4t", chips=4)
    kubectl("create", "-f", "-", input=yaml.safe_dump(node))
    try:
        yield name
    finally:
        kubectl("delete", "node", name, "--wait=false", "--ignore-not-found", check=False)


def test_progress_kubectl_get_rlj_shows_step_and_reward_moving(
    namespace: str, operator: OperatorProcess, node: str, tmp_path: Any
) -> None:
    name, port = "progress", procs.free_port()
    job = runs.manifest(name, 400, port=port)
    job["spec"]["tpu"] = dict(TPU)
    job["spec"]["podAnnotations"] = {"kwok.rljob.dev/run-forever": "true"}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))

    def host0() -> dict[str, Any] | None:
        pods = list_items("pods", namespace, f"rljob.dev/name={name}")
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running[0] if running else None

    pod = wait_for(host0, timeout=120, message="host 0 pod Running")
    assert pod["spec"]["nodeName"] == node and pod["status"]["podIP"] == "127.0.0.1", pod["status"]

    trainer = runs.start(runs.write(tmp_path / "job.yaml", job), RLJOB_METRICS_ADDR="127.0.0.1")
    try:

        def progress() -> dict[str, Any] | None:
            assert trainer.poll() is None, "the trainer exited"
            obj = get("rljob", name, namespace) or {}
            prog = (obj.get("status") or {}).get("progress") or {}
            return prog if prog.get("step", 0) >= 3 and "rewardMean" in prog else None

        first = wait_for(progress, timeout=300, message="status.progress step >= 3")
        table1 = kubectl("get", "rlj", name, "-n", namespace)
        later = wait_for(
            lambda: (p := progress()) and p["step"] >= first["step"] + 5 and p,
            timeout=120,
            message="the step moving on",
        )
        table2 = kubectl("get", "rlj", name, "-n", namespace)
        wide = kubectl("get", "rlj", name, "-n", namespace, "-o", "wide")
    finally:
        trainer.kill()
        trainer.wait(timeout=30)
    print(table1, table2, wide, sep="\n")
    header = table1.splitlines()[0].split()
    assert header[:6] == ["NAME", "PHASE", "STEP", "REWARD", "STEP-TIME", "ETA"], header
    row1, row2 = table1.splitlines()[1].split(), table2.splitlines()[1].split()
    assert int(row1[2]) == first["step"] and int(row2[2]) == later["step"] > int(row1[2])
    assert float(row2[3]) == later["rewardMean"] and float(row2[4]) == later["meanStepSeconds"] > 0
    assert later["maxSteps"] == 400 and later["eta"] and later["lastStepTime"]
    assert {"MAX-STEPS", "LAST-STEP"} <= set(wide.splitlines()[0].split())
    stalled = [c for c in get("rljob", name, namespace)["status"]["conditions"] if c["type"] == "Stalled"]
    assert stalled and stalled[0]["status"] == "False", stalled
