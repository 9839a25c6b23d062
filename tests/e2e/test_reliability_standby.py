"""Two operators with kopf peering: only the active one acts; kill it and the standby takes over.

This is the chart's setup for a hot standby (``--standby`` = lower peering priority, a KopfPeering object
in the watched namespace). While both run, the standby must not create anything (its reconcile metrics stay
at zero and kopf logs that it paused). After ``kill -9`` of the active one, the standby resumes when the
dead peer's lease expires (kopf's peering lifetime, 60 s) and handles what was created meanwhile, without
creating a second JobSet for anything the active one already handled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.kube import get, kubectl, wait_for
from tests.e2e.operator_proc import (
    OperatorProcess,
    children_problems,
    delete_rljobs,
    install_crd,
    install_peering_crds,
    status_problems,
)

pytestmark = pytest.mark.cluster

PEERING = "rljob-standby-test"
LEASE_S = 60  # kopf's default peering lifetime: how long a dead peer still counts as alive
CREATES = "rljob_operator_reconcile_duration_seconds_count"


def rljob(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "rljob.dev/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": name},
            "spec": {
                "image": "rljob-trainer:standby",
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4"},
                "suspend": True,  # no pods needed: the JobSet and the status are what is checked
            },
        }
    )


def create(ns: str, names: list[str]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input="---\n".join(rljob(n) for n in names))


def peers(ns: str) -> set[str]:
    return set(((get("kopfpeering", PEERING, ns) or {}).get("status") or {}).keys())


@pytest.fixture
def pair(cluster: Any, namespace: str) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    install_crd()
    install_peering_crds()
    # kopf only heartbeats into an existing peering object (the chart creates it; so do we)
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}}))  # fmt: skip
    common = {"standalone": False, "peering": PEERING}
    active = OperatorProcess(cluster.logs, [namespace], identity="active", **common)
    standby = OperatorProcess(cluster.logs, [namespace], identity="standby", standby=True, **common)
    try:
        yield active, standby
    finally:
        for op in (active, standby):
            print(f"---- {op.identity} log ----\n" + op.tail(60))
        delete_rljobs(namespace)  # while an operator runs: it drops its finalizers
        for op in (active, standby):
            op.stop()


def test_reliability_only_the_active_peer_acts_and_the_standby_takes_over(
    namespace: str, pair: tuple[OperatorProcess, OperatorProcess]
) -> None:
    active, standby = pair
    active.start()
    wait_for(lambda: peers(namespace) == {"active"}, timeout=60, message="active peer registered")
    standby.start()
    wait_for(lambda: peers(namespace) == {"active", "standby"}, timeout=60, message="both peers registered")
    wait_for(lambda: "Pausing operations in favour of" in standby.log_text(), timeout=60,
             message="standby paused")  # fmt: skip

    first = [f"first-{i}" for i in range(10)]
    create(namespace, first)
    wait_for(lambda: not children_problems(namespace, set(first)) and not status_problems(namespace),
             timeout=90, interval=1, message="active operator handled the first batch")  # fmt: skip
    uids = {n: (get("jobset", n, namespace) or {})["metadata"]["uid"] for n in first}
    assert active.metric(CREATES, handler="create") >= len(first)
    assert standby.metric(CREATES) == 0, "the standby reconciled something while the active one ran"
    assert "Handler 'create' succeeded" not in standby.log_text()

    active.kill()
    killed = time.monotonic()
    second = [f"second-{i}" for i in range(10)]
    create(namespace, second)
    wait_for(lambda: "Resuming operations after the pause" in standby.log_text(), timeout=LEASE_S + 60,
             interval=1, message="standby resumed after the active peer's lease expired")  # fmt: skip
    took_over = time.monotonic() - killed
    wait_for(lambda: not children_problems(namespace, set(first + second)) and not status_problems(namespace),
             timeout=90, interval=1, message="standby handled the second batch")  # fmt: skip
    print(f"standby took over {took_over:.0f}s after kill -9 (lease {LEASE_S}s)")

    # nothing of the first batch was created again: same JobSets, same uids
    assert {n: (get("jobset", n, namespace) or {})["metadata"]["uid"] for n in first} == uids
    assert standby.metric(CREATES, handler="create") >= len(second)
    assert standby.running, standby.tail()
