"""Training progress in the RLJob's status (``status.progress``), as the operator reads it from the
trainer's host 0.

Why the operator reads it (from host 0's ``/metrics``) rather than the trainer writing it: the trainer then
needs no Kubernetes API rights at all (its pods run with no token), and the numbers shown by
``kubectl get rlj`` are the ones Prometheus scrapes. See docs/observability.md.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict

from rljob.api.base import Model


class Progress(Model):
    """Progress of training, from trainer host 0 (JAX process 0), refreshed while the RLJob is Running."""

    model_config = ConfigDict(extra="ignore", strict=False)
    step: int = 0
    """Last completed global step (continues across resumes)."""
    maxSteps: int = 0
    """spec.grpo.maxSteps."""
    rewardMean: float | None = None
    """Mean reward of the last step's completions."""
    meanStepSeconds: float | None = None
    """Mean wall time of a steady step (steps that compiled excluded) since the trainer process started."""
    lastStepSeconds: float | None = None
    """Wall time of the last step."""
    lastStepTime: datetime | None = None
    """When the last step completed."""
    eta: str | None = None
    """Estimated time left at updateTime: (maxSteps - step) x meanStepSeconds, e.g. 1h12m."""
    updateTime: datetime | None = None
    """When the operator last read host 0's metrics."""
