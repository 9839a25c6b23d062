"""A namespace created as the operator starts is watched (``rljob_operator.kopf_namespaces``).

kopf lists namespaces twice at start-up (its scan, then the namespace watch-stream's own listing) and
drops the second listing's entries, so a namespace created between the two was never watched. A CI run
met it: the liveness probe answered before the second listing, the test created its namespace at once,
and its RLJob never got a JobSet. Here the window is held open on purpose: the operator runs with kopf's
namespace watcher delayed ``DELAY_S`` seconds (a wrapper around ``queueing.watcher``, nothing else
changed), the namespace is created inside the delay, and the RLJob in it must get its JobSet.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import yaml

from tests.e2e.kube import get, kubectl, wait_for
from tests.e2e.operator_proc import OperatorProcess, delete_rljobs, install_crd

pytestmark = pytest.mark.cluster

DELAY_S = 8
MARKER = "test: namespace watch-stream delayed"
DELAYED_NAMESPACE_WATCH = f"""
import asyncio, logging, sys
from kopf._core.reactor import queueing
from rljob_operator.main import main
kopf_watcher = queueing.watcher
async def watcher(**kwargs):
    if kwargs["resource"].plural == "namespaces":
        logging.getLogger("test").warning({MARKER!r})
        await asyncio.sleep({DELAY_S})
    return await kopf_watcher(**kwargs)
queueing.watcher = watcher
sys.exit(main())
"""


def test_operator_watches_a_namespace_created_between_kopfs_two_namespace_listings(cluster: Any) -> None:
    install_crd()
    ns = f"test-late-namespace-{uuid.uuid4().hex[:6]}"
    op = OperatorProcess(
        cluster.logs, ["test-late-namespace-*"], identity="late-ns", entry=("-c", DELAYED_NAMESPACE_WATCH)
    )
    op.start()
    try:
        wait_for(lambda: MARKER in op.log_text(), timeout=60, message="kopf's namespace watcher delayed")
        delayed = time.monotonic()
        kubectl("create", "namespace", ns)
        assert time.monotonic() - delayed < DELAY_S - 1, (
            "the namespace must exist before kopf's second listing"
        )
        rljob = {
            "apiVersion": "rljob.dev/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "late", "namespace": ns},
            "spec": {
                "image": "rljob-trainer:test",
                "tpu": {"accelerator": "tpu-v6e-slice", "topology": "1x1"},
            },
        }
        kubectl("apply", "-f", "-", input=yaml.safe_dump(rljob))
        wait_for(
            lambda: get("jobset", "late", ns),
            timeout=60,
            message="the JobSet of the RLJob in the new namespace",
        )
        assert f"Starting the watch-stream for rljobs.v1alpha1.rljob.dev in '{ns}'" in op.log_text()
    finally:
        print(op.tail())
        delete_rljobs(ns)  # while the operator runs: it drops its finalizers
        op.stop()
        kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
