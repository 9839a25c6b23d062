"""kopf handlers: decorators around ``reconcile``, with timing and error metrics. No logic of their own.

Run with ``rljob operator``, ``python -m rljob_operator`` or ``kopf run -m rljob_operator.handlers``.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from rljob.api.spec import GROUP, PLURAL, VERSION
from rljob_operator import kopf_namespaces, names, progress_refresh, reconcile
from rljob_operator.kube import Kube, error_kind, load_config
from rljob_operator.metrics import OperatorMetrics, serve
from rljob_operator.settings import OperatorOptions, apply_settings

RLJOB = (GROUP, VERSION, PLURAL)
PROGRESS_INTERVAL_ENV = "RLJOB_PROGRESS_INTERVAL_SECONDS"
PROGRESS_INTERVAL = float(os.environ.get(PROGRESS_INTERVAL_ENV) or 30)
"""Seconds between reads of a Running RLJob's trainer host 0 (``status.progress``); 0 turns them off."""
JOBSET = (names.JOBSET_GROUP, names.JOBSET_VERSION, names.JOBSET_PLURAL)

kopf_namespaces.install()  # before kopf.run: a namespace created as the operator starts is watched too


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    """All kopf settings, the API client and the metrics endpoint, in one place."""
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    apply_settings(settings, options)
    load_config()
    memo.kube = Kube()
    memo.render_options = options.render
    memo.metrics = memo.get("metrics") or OperatorMetrics()
    if options.metrics_port:
        serve(memo.metrics, options.metrics_port, options.metrics_addr)
        logger.info("metrics on :%s/metrics", options.metrics_port)


@kopf.on.resume(*RLJOB)
@kopf.on.create(*RLJOB)
def create(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Create the ConfigMap and JobSet once (resume: resync only)."""
    with memo.metrics.reconcile("create", error_kind):
        if reconcile.ensure_children(memo.kube, body, options=memo.render_options) == "invalid":
            memo.metrics.error("invalid_spec")


@kopf.on.update(*RLJOB, field="spec.suspend")
def suspend(new: Any, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """``spec.suspend`` changed after creation (updates only: on create the renderer already set it, and a
    queued JobSet must stay suspended until Kueue admits it): toggle the JobSet's suspend."""
    with memo.metrics.reconcile("suspend", error_kind):
        reconcile.toggle_suspend(memo.kube, body, bool(new))


@kopf.on.event(*JOBSET, labels={names.LABEL_NAME: kopf.PRESENT})
def jobset_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A JobSet of ours changed: mirror its state into the RLJob's status."""
    with memo.metrics.reconcile("jobset", error_kind):
        reconcile.on_jobset_event(memo.kube, event.get("type"), body)


@kopf.on.event(
    "", "v1", "pods", labels={names.LABEL_NAME: kopf.PRESENT, names.LABEL_ROLE: names.ROLE_TRAINER}
)
def pod_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A trainer pod changed: a container the kubelet cannot start shows on the RLJob (pod_waiting.py)."""
    with memo.metrics.reconcile("pod", error_kind):
        reconcile.on_pod_event(memo.kube, body)


@kopf.on.event(*RLJOB)
def rljob_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Keep the RLJob metrics (phase, restarts) current (and forget deleted RLJobs)."""
    meta, status = body.get("metadata", {}), body.get("status") or {}
    phase = None if event.get("type") == "DELETED" else status.get("phase") or "Pending"
    memo.metrics.set_phase(
        meta.get("namespace", ""), meta.get("name", ""), phase, int(status.get("restarts", 0))
    )


@kopf.on.probe(id="rljobs")
def probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness detail: RLJobs this operator knows about."""
    return memo.metrics.tracked()


def _running(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") == "Running"


if PROGRESS_INTERVAL > 0:

    @kopf.timer(*RLJOB, interval=PROGRESS_INTERVAL, initial_delay=PROGRESS_INTERVAL, when=_running)
    async def progress(body: kopf.Body, memo: kopf.Memo, logger: Any, **_: Any) -> None:
        """Running RLJobs only: ``status.progress`` and the Stalled condition from trainer host 0."""
        with memo.metrics.reconcile("progress", error_kind):
            logger.debug("progress: %s", await progress_refresh.refresh(memo.kube, body))
