"""kill -9 the operator three times while 100 RLJobs are being created; restart it each time.

An operator dies without warning (OOM kill, node loss) in the middle of a handler: after the ConfigMap but
before the JobSet, after the JobSet but before the status, before kopf recorded the handler as done. The
restarted operator must finish every RLJob exactly once: 100 JobSets, none twice, none orphaned, and every
status right (what ``compute_status`` says for the JobSet as it is) within 30 s of the last restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from rljob.api.spec import GROUP, PLURAL, VERSION
from tests.e2e.kube import kubectl_json, wait_for
from tests.e2e.operator_proc import (
    OperatorProcess,
    children_problems,
    delete_rljobs,
    install_crd,
    status_problems,
)

pytestmark = pytest.mark.cluster

COUNT = 100
KILL_AFTER = (15, 45, 75)  # kill when this many creates have been sent
CONVERGE_S = 30


def rljob(i: int) -> dict[str, Any]:
    """Every other one suspended (no pods; phase Suspended), the rest Pending: v5e 1x1 has no node pool in
    the simulated cluster, so their JobSets, Jobs and pods are created but never scheduled. No node is
    used, so a slow cleanup of 100 JobSets cannot hold nodes that later tests need."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": f"crash-{i:03d}"},
        "spec": {
            "image": "rljob-trainer:crash",
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "1x1"},
            "suspend": i % 2 == 1,
        },
    }


@pytest.fixture
def operator(cluster: Any, namespace: str) -> Iterator[OperatorProcess]:
    install_crd()
    op = OperatorProcess(cluster.logs, [namespace], identity="crash")
    try:
        yield op
    finally:
        print("---- operator log (last start) ----\n" + op.tail(120))
        delete_rljobs(namespace)  # while the operator runs: it drops its finalizers
        op.stop()


def test_reliability_kill_9_three_times_during_a_burst(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    sent: list[str] = []
    errors: list[BaseException] = []

    def create_all() -> None:
        try:
            for i in range(COUNT):
                obj = rljob(i)
                api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
                sent.append(obj["metadata"]["name"])
                time.sleep(0.05)  # spread the burst over the kills
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    operator.start()
    creator = threading.Thread(target=create_all, daemon=True)
    creator.start()

    def jobsets() -> int:
        return len(kubectl_json("get", "jobsets", "-n", namespace)["items"])

    backlogs: list[int] = []
    at_start = 0
    for kill_at in KILL_AFTER:
        wait_for(lambda n=kill_at: len(sent) >= n or errors, timeout=120, message=f"{kill_at} creates sent")
        if backlogs:  # kill a restarted operator only once it is busy: a few JobSets made since its start
            wait_for(lambda n=at_start: jobsets() >= min(n + 3, COUNT), timeout=60, interval=0.2,
                     message="the restarted operator makes progress")  # fmt: skip
        operator.kill()
        # RLJobs sent but without a JobSet when the operator died: work it was in the middle of or behind on
        backlogs.append(len(sent) - jobsets())
        operator.start()  # waits for the liveness endpoint only
        at_start = jobsets()
    last_restart = time.monotonic()
    print(f"RLJobs without a JobSet at each kill: {backlogs}")
    creator.join(timeout=120)
    assert not errors, errors
    assert len(sent) == COUNT
    assert any(backlogs), "every kill found the operator idle: the test would prove nothing"

    def converged() -> bool:
        return not children_problems(namespace, set(sent)) and not status_problems(namespace)

    remaining = CONVERGE_S - (time.monotonic() - last_restart)
    try:
        wait_for(converged, timeout=max(remaining, 1), interval=1, message="children and statuses")
    except TimeoutError:
        problems = children_problems(namespace, set(sent)) + status_problems(namespace)
        pytest.fail(
            f"{len(problems)} problems {CONVERGE_S}s after the last restart:\n" + "\n".join(problems[:30])
        )
    print(f"converged {time.monotonic() - last_restart:.1f}s after the last restart")
    assert operator.running, operator.tail()
